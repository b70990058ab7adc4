"""The Responses API both ways: as a provider format (wire samples through a loopback server
and the Router), as the client API (pure translation, checked against the official schemas),
and chat → Responses → chat round trips (hypothesis)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_reach import Reason
from agent_reach.chat.request import ChatRequest
from agent_reach.core.errors import RequestError
from agent_reach.dialects import Context, Shape
from agent_reach.dialects.responses import DIALECT
from agent_reach.dialects.responses.answer import encode_answer
from agent_reach.dialects.responses.request import decode_request
from agent_reach.dialects.responses.stream import StreamEncoder
from agent_reach.dialects.responses.tools import tool_map

from .conftest import COMPLETION, RESPONSE, assert_valid, assert_valid_event
from .fakes.shapes import sse
from .fakes.upstream import responses_answer, responses_events
from .fakes.wire import Wire, first_failure, json_reply, provider, router, stream_reply, text

PATH = "/v1/responses"
HELLO = {"model": "gpt-5", "messages": [{"role": "user", "content": "Hello"}]}
CTX = Context("gpt-5", 1_700_000_000, Shape("output", "content.0.text"))


@pytest.fixture
async def wire() -> AsyncIterator[Wire]:
    async with Wire.running() as w:
        yield w


def responses(url: str) -> dict[str, Any]:
    return provider("resp", url, "responses")


def stream_of(answer: dict[str, Any]) -> tuple[bytes, ...]:
    return tuple(
        sse({"type": kind, "sequence_number": n, **data}, event=kind)
        for n, (kind, data) in enumerate(responses_events(answer))
    )


# -- as a provider format ------------------------------------------------------------------


async def test_answer_is_normalized_and_the_body_is_a_responses_request(wire: Wire) -> None:
    async with router(responses(wire.on(PATH, json_reply(responses_answer("gpt-5"))))) as r:
        result = await r.achat(
            {
                "model": "gpt-5",
                "messages": [
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "Hello"},
                ],
                "max_tokens": 50,
                "temperature": 0.2,
                "response_format": {"type": "json_object"},
            }
        )
    resp = result.response
    assert_valid(COMPLETION, resp)
    message = resp["choices"][0]["message"]
    assert message["content"] == "hello from responses"
    assert message["reasoning_content"] == "thinking"
    assert resp["usage"]["total_tokens"] == 10
    assert resp["usage"]["completion_tokens_details"] == {"reasoning_tokens": 1}
    assert wire.last.body == {
        "model": "gpt-5",
        "input": [
            {
                "type": "message",
                "role": "system",
                "content": [{"type": "input_text", "text": "Be brief."}],
            },
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "Hello"}],
            },
        ],
        "stream": False,
        "store": False,
        "temperature": 0.2,
        "max_output_tokens": 50,
        "text": {"format": {"type": "json_object"}},
    }
    assert wire.last.headers["Authorization"].startswith("Bearer ")


async def test_stream_is_decoded(wire: Wire) -> None:
    async with router(
        responses(wire.on(PATH, stream_reply(*stream_of(responses_answer("m")))))
    ) as r:
        stream = await r.open_stream(HELLO)
        chunks = [c async for c in stream]
    assert text(chunks) == "hello from responses"
    assert text(chunks, "reasoning_content") == ""  # the summary came whole, in the item
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_function_calls_both_in_answers_and_streams() -> None:
    answer = {
        **responses_answer("m"),
        "output": [
            {
                "type": "function_call",
                "id": "fc_1",
                "call_id": "call_1",
                "name": "get_weather",
                "arguments": '{"city":"Paris"}',
                "status": "completed",
            }
        ],
    }
    normalized = DIALECT.normalize(answer, CTX)
    choice = normalized["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["tool_calls"] == [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
        }
    ]
    decoder = DIALECT.decoder(CTX)
    events = [
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {**answer["output"][0], "arguments": ""},
        },
        {
            "type": "response.function_call_arguments.delta",
            "item_id": "fc_1",
            "output_index": 0,
            "delta": '{"city":',
        },
        {
            "type": "response.function_call_arguments.delta",
            "item_id": "fc_1",
            "output_index": 0,
            "delta": '"Paris"}',
        },
        {"type": "response.completed", "response": answer},
    ]
    chunks = [c for e in events for c in decoder.feed(e["type"], orjson.dumps(e))]
    calls = [tc for c in chunks for tc in c["choices"][0]["delta"].get("tool_calls", [])]
    assert calls[0]["id"] == "call_1"
    assert "".join(tc["function"]["arguments"] for tc in calls) == '{"city":"Paris"}'
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    assert decoder.finished


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        (
            json_reply(
                {
                    **responses_answer("m"),
                    "status": "failed",
                    "error": {"code": "server_error", "message": "boom"},
                }
            ),
            Reason.SERVER_ERROR,
        ),
        (
            json_reply(
                {
                    "error": {
                        "message": "bad key",
                        "type": "invalid_request_error",
                        "code": "invalid_api_key",
                    }
                },
                401,
            ),
            Reason.AUTH_FAILED,
        ),
    ],
)
async def test_errors_fail_over(wire: Wire, reply: Any, reason: Reason) -> None:
    async with router(responses(wire.on(PATH, reply))) as r:
        attempt = await first_failure(r, HELLO)
    assert attempt.reason is reason


async def test_stream_failure_event_fails_over(wire: Wire) -> None:
    failed = {
        "type": "response.failed",
        "response": {
            **responses_answer("m"),
            "status": "failed",
            "error": {"code": "server_error", "message": "overloaded"},
        },
    }
    reply = stream_reply(
        sse({"type": "response.created", "response": responses_answer("m")}), sse(failed)
    )
    async with router(responses(wire.on(PATH, reply))) as r:
        attempt = await first_failure(r, HELLO, stream=True)
    assert attempt.reason is Reason.SERVER_ERROR
    assert "overloaded" in attempt.detail


def test_length_stop_is_incomplete_both_ways() -> None:
    answer = {
        **responses_answer("m"),
        "status": "incomplete",
        "incomplete_details": {"reason": "max_output_tokens"},
    }
    assert DIALECT.normalize(answer, CTX)["choices"][0]["finish_reason"] == "length"
    completion = DIALECT.normalize(responses_answer("m"), CTX)
    completion["choices"][0]["finish_reason"] = "length"
    out = encode_answer(completion, {"model": "m", "input": "hi"}, 1)
    assert out["status"] == "incomplete"
    assert out["incomplete_details"] == {"reason": "max_output_tokens"}
    assert_valid(RESPONSE, out)


# -- as the client's API --------------------------------------------------------------------

CODEX_TOOLS = {
    "type": "additional_tools",
    "id": "at_1",
    "role": "developer",
    "tools": [
        {
            "type": "namespace",
            "name": "functions",
            "description": "",
            "tools": [
                {"type": "custom", "name": "exec", "description": "Run JavaScript."},
                {
                    "type": "function",
                    "name": "wait",
                    "parameters": {"type": "object"},
                    "strict": False,
                },
            ],
        },
        {
            "type": "namespace",
            "name": "clock",
            "description": "Time.",
            "tools": [
                {
                    "type": "function",
                    "name": "sleep",
                    "parameters": {"type": "object"},
                    "strict": False,
                }
            ],
        },
    ],
}


def test_codex_namespaces_and_custom_tools_become_chat_functions() -> None:
    body = {
        "model": "gpt-6.2-sol",
        "input": [
            CODEX_TOOLS,
            {
                "type": "message",
                "role": "developer",
                "content": [{"type": "input_text", "text": "rules"}],
            },
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]},
            {
                "type": "custom_tool_call",
                "call_id": "c1",
                "name": "exec",
                "namespace": "functions",
                "input": "text(1)",
            },
            {
                "type": "custom_tool_call_output",
                "call_id": "c1",
                "output": [{"type": "input_text", "text": "1"}],
            },
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "x"},
        ],
        "tools": [{"type": "web_search"}],
    }
    inbound = decode_request(body)
    chat = inbound.body
    assert [t["function"]["name"] for t in chat["tools"]] == ["exec", "wait", "clock__sleep"]
    assert chat["tools"][0]["function"]["parameters"]["required"] == ["input"]
    assert chat["messages"] == [
        {"role": "system", "content": "rules"},
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "exec", "arguments": '{"input":"text(1)"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "1"},
    ]
    assert inbound.dropped == ("reasoning", "tools:web_search")
    tools = tool_map(body)
    completion = {
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "c2",
                            "type": "function",
                            "function": {"name": "exec", "arguments": '{"input": "text(2)"}'},
                        },
                        {
                            "id": "c3",
                            "type": "function",
                            "function": {"name": "clock__sleep", "arguments": '{"duration_ms": 5}'},
                        },
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
    }
    out = encode_answer(completion, body, 1)
    assert_valid(RESPONSE, out)
    custom, function = out["output"]
    assert (custom["type"], custom["name"], custom["namespace"], custom["input"]) == (
        "custom_tool_call",
        "exec",
        "functions",
        "text(2)",
    )
    assert (function["type"], function["name"], function["namespace"]) == (
        "function_call",
        "sleep",
        "clock",
    )
    assert tools["clock__sleep"].namespace == "clock"


def test_stream_of_a_custom_tool_call_is_valid() -> None:
    body = {"model": "m", "input": [CODEX_TOOLS, {"role": "user", "content": "go"}]}
    out = StreamEncoder(body, 1, "m")
    events = out.start()
    first = {
        "index": 0,
        "id": "c9",
        "type": "function",
        "function": {"name": "exec", "arguments": ""},
    }
    for delta in (
        {"role": "assistant", "content": "Running."},
        {"tool_calls": [first]},
        {"tool_calls": [{"index": 0, "function": {"arguments": '{"input": "te'}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": 'xt(3)"}'}}]},
    ):
        events += out.feed(
            {"model": "m", "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
        )
    events += out.feed(
        {"model": "m", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}
    )
    events += out.finish_events()
    for n, (kind, data) in enumerate(events):
        assert data["type"] == kind
        assert data["sequence_number"] == n
        assert_valid_event(data)
    done = events[-1][1]["response"]
    assert [i["type"] for i in done["output"]] == ["message", "custom_tool_call"]
    assert done["output"][1]["input"] == "text(3)"
    assert "response.custom_tool_call_input.done" in [k for k, _ in events]


def item(**fields: Any) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": "hi", **fields}


CALL_ITEM = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": 3}, "input"),
        ({"input": ["hi"]}, "input[0]"),
        (
            {"input": [item(content=[{"type": "input_text", "text": 5}])]},
            "input[0].content[0].text",
        ),
        ({"input": [item(content=[{"text": "x"}])]}, "input[0].content[0].type"),
        ({"input": [item(content=5)]}, "input[0].content"),
        ({"input": [item(content=None)]}, "input[0].content"),
        ({"input": [item(role="bot")]}, "input[0].role"),
        ({"input": [item(type=5)]}, "input[0].type"),
        ({"input": [item(), {**CALL_ITEM, "call_id": None}]}, "input[1].call_id"),
        ({"input": [item(), {**CALL_ITEM, "name": ""}]}, "input[1].name"),
        ({"input": [item(), {**CALL_ITEM, "arguments": {}}]}, "input[1].arguments"),
        (
            {"input": [{"type": "function_call_output", "call_id": "c", "output": 5}]},
            "input[0].output",
        ),
        ({"input": [{"type": "function_call_output", "output": "x"}]}, "input[0].call_id"),
        (
            {"input": [item(), {"type": "additional_tools", "tools": [{"type": "function"}]}]},
            "input[1].tools[0].name",
        ),
        ({"input": "hi", "tools": "x"}, "tools"),
        ({"input": "hi", "tools": [{"type": "function"}]}, "tools[0].name"),
        ({"input": "hi", "tools": [{"name": "f"}]}, "tools[0].type"),
        (
            {"input": "hi", "tools": [{"type": "function", "name": "f", "parameters": "{}"}]},
            "tools[0].parameters",
        ),
        (
            {"input": "hi", "tools": [{"type": "namespace", "tools": [{"type": "custom"}]}]},
            "tools[0].tools[0].name",
        ),
        (
            {
                "input": "hi",
                "tools": [{"type": "function", "name": "f"}],
                "tool_choice": {"type": "function", "name": "g"},
            },
            "tool_choice",
        ),
        ({"input": "hi", "tool_choice": "any"}, "tool_choice"),
        ({"input": "hi", "tool_choice": {"type": "function"}}, "tool_choice.name"),
        ({"input": "hi", "tool_choice": {"type": "web_search"}}, "tool_choice"),
        ({"input": "hi", "instructions": 3}, "instructions"),
        ({"input": "hi", "model": 7}, "model"),
        ({"input": "hi", "max_output_tokens": 0}, "max_output_tokens"),
        ({"input": "hi", "max_output_tokens": 15}, "max_output_tokens"),  # the schema's minimum 16
        ({"input": "hi", "max_output_tokens": "100"}, "max_output_tokens"),
        ({"input": "hi", "temperature": 2.5}, "temperature"),
        ({"input": "hi", "top_p": -0.1}, "top_p"),
        ({"input": "hi", "parallel_tool_calls": "yes"}, "parallel_tool_calls"),
        ({"input": "hi", "stream": "true"}, "stream"),
        ({"input": "hi", "store": 0}, "store"),
        ({"input": "hi", "include": "reasoning.encrypted_content"}, "include"),
        ({"input": "hi", "reasoning": {"effort": 3}}, "reasoning.effort"),
        (
            {"input": "hi", "text": {"format": {"type": "json_schema", "schema": []}}},
            "text.format.schema",
        ),
        ({"input": "hi", "text": "json"}, "text"),
        ({"input": "hi", "metadata": []}, "metadata"),
        ({"input": "hi", "user": 5}, "user"),
        ({"input": "hi", "prompt_cache_key": 5}, "prompt_cache_key"),
    ],
)
def test_malformed_requests_name_the_field(body: dict[str, Any], param: str) -> None:
    with pytest.raises(RequestError) as info:
        decode_request(body)
    assert info.value.param == param
    assert info.value.status == 400
    assert f"'{param}'" in str(info.value)


@pytest.mark.parametrize(
    ("body", "messages"),
    [
        ({}, []),
        ({"input": []}, []),
        ({"instructions": "rules"}, [{"role": "system", "content": "rules"}]),
        (
            {"input": [{"type": "message", "role": "system", "content": "only rules"}]},
            [{"role": "system", "content": "only rules"}],
        ),
    ],
)
def test_a_request_with_nothing_to_answer_is_the_providers_to_judge(
    body: dict[str, Any], messages: list[dict[str, Any]]
) -> None:
    """The schema requires no `input` (a stored prompt may stand in for it), so its absence is
    no 400 of the proxy's: the provider is sent the conversation there is."""
    assert decode_request(body).body["messages"] == messages


CODEX_REQUEST: dict[str, Any] = {  # the shape Codex CLI 0.171.0 sends, trimmed
    "model": "gpt-6.2-sol",
    "instructions": "You are Codex.",
    "input": [
        CODEX_TOOLS,
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "x"}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]},
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAA"},
        {**CALL_ITEM, "name": "exec_command", "arguments": '{"cmd":"ls"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "Exit code: 0\nfile"},
        {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {}},
    ],
    "tools": [
        {"type": "function", "name": "exec_command", "parameters": {"type": "object"}},
        {"type": "web_search", "external_web_access": False},
    ],
    "tool_choice": "auto",
    "parallel_tool_calls": True,
    "reasoning": {"effort": "medium", "summary": "auto"},
    "store": False,
    "stream": True,
    "include": ["reasoning.encrypted_content"],
    "prompt_cache_key": "019a-session",
    "text": {"verbosity": "low"},
    "client_metadata": {"x-codex-turn": 3},
    "service_tier": None,
}


def test_what_codex_sends_is_accepted_and_its_chat_request_too() -> None:
    inbound = decode_request(CODEX_REQUEST)
    req = ChatRequest.parse(inbound.body)
    assert req.stream
    assert [m["role"] for m in req.body["messages"]] == [
        "system",
        "system",
        "user",
        "assistant",
        "tool",
    ]
    assert {"reasoning", "web_search_call", "tools:web_search"} <= set(inbound.dropped)
    assert req.body["stream_options"] == {"include_usage": True}  # for response.completed
    assert "stream_options" not in decode_request({**CODEX_REQUEST, "stream": False}).body


# -- round trips ----------------------------------------------------------------------------

names = st.from_regex(r"[A-Za-z][A-Za-z0-9_-]{0,20}", fullmatch=True)
words = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=30)
arguments = st.dictionaries(names, st.integers() | words, max_size=3).map(
    lambda d: json.dumps(d, ensure_ascii=False)
)


@st.composite
def tool_calls(draw: st.DrawFn) -> list[dict[str, Any]]:
    return [
        {
            "id": f"call_{i}",
            "type": "function",
            "function": {"name": draw(names), "arguments": draw(arguments)},
        }
        for i in range(draw(st.integers(1, 3)))
    ]


@st.composite
def conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Chat conversations both APIs can say: system, user and assistant text, assistant tool
    calls and their results."""
    messages: list[dict[str, Any]] = []
    if draw(st.booleans()):
        messages.append({"role": "system", "content": draw(words)})
    for _ in range(draw(st.integers(1, 4))):
        messages.append({"role": "user", "content": draw(words)})
        if draw(st.booleans()):
            calls = draw(tool_calls())
            content = draw(st.none() | words)
            messages.append({"role": "assistant", "content": content, "tool_calls": calls})
            for call in calls:
                messages.append(
                    {"role": "tool", "tool_call_id": call["id"], "content": draw(words)}
                )
        else:
            messages.append({"role": "assistant", "content": draw(words)})
    return messages


@settings(max_examples=80, deadline=None)
@given(conversations())
def test_round_trip_of_requests(messages: list[dict[str, Any]]) -> None:
    sent = DIALECT.body({"messages": messages}, "m", False, "max_output_tokens")
    back = decode_request({"model": "m", **sent}).body
    assert back["messages"] == messages


@settings(max_examples=80, deadline=None)
@given(st.none() | words, st.none() | tool_calls(), st.integers(0, 10_000), st.integers(0, 10_000))
def test_round_trip_of_answers(
    content: str | None, calls: list[dict[str, Any]] | None, prompt: int, output: int
) -> None:
    message: dict[str, Any] = {
        "role": "assistant",
        "content": content or (None if calls else "x"),
        "refusal": None,
    }
    if calls:
        message["tool_calls"] = calls
    finish = "tool_calls" if calls else "stop"
    usage = {"prompt_tokens": prompt, "completion_tokens": output, "total_tokens": prompt + output}
    completion = {
        "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": usage,
    }
    response = encode_answer(completion, {"model": "m", "input": "hi"}, 1)
    assert_valid(RESPONSE, response)
    back = DIALECT.normalize(response, CTX)
    choice = back["choices"][0]
    assert choice["message"]["content"] == message["content"]
    assert choice["message"].get("tool_calls") == message.get("tool_calls")
    assert choice["finish_reason"] == finish
    assert {k: back["usage"][k] for k in usage} == usage


@settings(max_examples=50, deadline=None)
@given(st.lists(words, min_size=1, max_size=5), st.none() | tool_calls())
def test_round_trip_of_streams(pieces: list[str], calls: list[dict[str, Any]] | None) -> None:
    out = StreamEncoder({"model": "m", "input": "hi"}, 1, "m")
    events = out.start()
    deltas: list[dict[str, Any]] = [{"content": p} for p in pieces]
    for i, call in enumerate(calls or ()):
        deltas.append({"tool_calls": [{"index": i, **call}]})
    for delta in deltas:
        events += out.feed(
            {"model": "m", "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
        )
    events += out.finish_events()
    decoder = DIALECT.decoder(CTX)
    chunks = [c for kind, data in events for c in decoder.feed(kind, orjson.dumps(data))]
    assert decoder.finished
    assert text(chunks) == "".join(pieces)
    got = [
        tc for c in chunks for tc in c["choices"][0]["delta"].get("tool_calls", []) if "id" in tc
    ]
    assert [(tc["id"], tc["function"]["name"]) for tc in got] == [
        (c["id"], c["function"]["name"]) for c in calls or ()
    ]


# -- whatever the Responses checks accept, the chat request it becomes passes the chat checks -

_words = st.text(max_size=6)
_names = st.text(min_size=1, max_size=6)
_part = st.one_of(
    st.builds(
        lambda k, t: {"type": k, "text": t},
        st.sampled_from(["input_text", "output_text", "text", "summary_text"]),
        _words,
    ),
    st.builds(lambda r: {"type": "refusal", "refusal": r}, _words),
    st.builds(
        lambda u: {"type": "input_image", "image_url": u, "detail": "low"},
        st.sampled_from(["", "https://x.example/a.png", "data:image/png;base64,AAAA"]),
    ),
    st.just({"type": "input_image", "file_id": "file_1"}),
    st.just({"type": "input_file", "file_id": "file_1"}),
)
_item = st.one_of(
    st.fixed_dictionaries(
        {
            "role": st.sampled_from(["user", "assistant", "system", "developer"]),
            "content": _words | st.lists(_part, max_size=3),
        },
        optional={"type": st.just("message")},
    ),
    st.builds(
        lambda i, n, a, ns: (
            {"type": "function_call", "call_id": i, "name": n, "arguments": a}
            | ({"namespace": ns} if ns else {})
        ),
        _words,
        _names,
        _words,
        st.none() | _names,
    ),
    st.builds(
        lambda i, n, x: {"type": "custom_tool_call", "call_id": i, "name": n, "input": x},
        _words,
        _names,
        _words,
    ),
    st.builds(
        lambda k, i, o: {"type": k, "call_id": i, "output": o},
        st.sampled_from(["function_call_output", "custom_tool_call_output"]),
        _words,
        _words | st.lists(_part, max_size=2),
    ),
    st.just({"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "x"}),
    st.just(CODEX_TOOLS),
)
_tool = st.one_of(
    st.builds(lambda n: {"type": "function", "name": n, "parameters": {"type": "object"}}, _names),
    st.builds(lambda n: {"type": "custom", "name": n}, _names),
    st.just({"type": "web_search"}),
)
responses_requests = st.fixed_dictionaries(
    {
        "input": _words
        | st.lists(_item, min_size=1, max_size=4).map(
            lambda i: [*i, {"role": "user", "content": "q"}]
        )
    },
    optional={
        "model": _words,
        "instructions": _words,
        "tools": st.lists(_tool, max_size=2),
        "tool_choice": st.sampled_from(["auto", "none", "required", {"type": "allowed_tools"}]),
        "parallel_tool_calls": st.booleans(),
        "max_output_tokens": st.integers(16, 2**63 - 1),
        "temperature": st.floats(0, 2),
        "top_p": st.floats(0, 1),
        "text": st.sampled_from(
            [
                {"format": {"type": "json_object"}},
                {"format": {"type": "json_schema", "name": "x", "schema": {}}},
                {"verbosity": "low"},
            ]
        ),
        "reasoning": st.just({"effort": "high", "summary": "auto"}),
        "stream": st.booleans(),
        "store": st.booleans(),
        "user": _words,
    },
)


@given(request=responses_requests)
def test_what_the_responses_checks_accept_the_chat_checks_accept(request: dict[str, Any]) -> None:
    ChatRequest.parse(decode_request(request).body)
