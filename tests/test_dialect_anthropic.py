"""Anthropic Messages API: wire samples through a loopback server and the Router."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pydantic
import pytest
from anthropic.types import Message, RawMessageStreamEvent
from hypothesis import given
from hypothesis import strategies as st

from agent_reach import Reason, RequestError, StreamInterrupted
from agent_reach.chat import completion
from agent_reach.chat.request import ChatRequest
from agent_reach.dialects import Context, Shape, get
from agent_reach.dialects.anthropic import DIALECT
from agent_reach.dialects.anthropic.answer import encode_answer, stop_reason, tool_use_id
from agent_reach.dialects.anthropic.request import decode_request
from agent_reach.dialects.anthropic.schema import estimate_tokens
from agent_reach.dialects.anthropic.stream import StreamEncoder
from agent_reach.dialects.tokens import ATTACHMENT_TOKENS, MESSAGE_TOKENS, input_tokens, text_tokens

from .conftest import CHUNK, COMPLETION, assert_valid
from .fakes.wire import (
    KEY,
    Wire,
    first_failure,
    json_reply,
    provider,
    router,
    stream_reply,
    streamed,
    text,
)
from .strategies import ARGS, CALL_ID, IMAGE, NAME, TEXT, chat_stream

EVENTS: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(RawMessageStreamEvent)
PATH = "/v1/messages"
MODEL = "claude-sonnet-4-5"
HELLO = {"model": MODEL, "messages": [{"role": "user", "content": "Hello"}]}

ANSWER = {
    "id": "msg_013Zva2CMHLNnXjNJJKqJ2EF",
    "type": "message",
    "role": "assistant",
    "content": [{"type": "text", "text": "Hello!"}],
    "model": MODEL,
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 12, "output_tokens": 6},
}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather of a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


def event(name: str, data: dict[str, Any]) -> str:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n"


def message_start() -> str:
    message = {**ANSWER, "content": [], "stop_reason": None}
    message["usage"] = {"input_tokens": 12, "output_tokens": 1}
    return event("message_start", {"type": "message_start", "message": message})


def block_start(index: int, block: dict[str, Any]) -> str:
    return event(
        "content_block_start",
        {"type": "content_block_start", "index": index, "content_block": block},
    )


def block_delta(index: int, delta: dict[str, Any]) -> str:
    return event(
        "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
    )


def block_stop(index: int) -> str:
    return event("content_block_stop", {"type": "content_block_stop", "index": index})


def message_end(stop_reason: str, output_tokens: int) -> str:
    delta = {"stop_reason": stop_reason, "stop_sequence": None}
    return event(
        "message_delta",
        {"type": "message_delta", "delta": delta, "usage": {"output_tokens": output_tokens}},
    ) + event("message_stop", {"type": "message_stop"})


PING = event("ping", {"type": "ping"})
STREAM = (
    message_start(),
    block_start(0, {"type": "text", "text": ""}),
    PING,
    block_delta(0, {"type": "text_delta", "text": "Hello"}),
    block_delta(0, {"type": "text_delta", "text": "!"}),
    block_stop(0),
    message_end("end_turn", 6),
)


@pytest.fixture
async def wire() -> AsyncIterator[Wire]:
    async with Wire.running() as w:
        yield w


def anthropic(url: str, name: str = "claude") -> dict[str, Any]:
    return provider(name, url, "anthropic", auth_header="x-api-key")


async def test_answer_is_normalized(wire: Wire) -> None:
    async with router(anthropic(wire.on(PATH, json_reply(ANSWER)))) as r:
        result = await r.achat(HELLO)
    resp = result.response
    assert_valid(COMPLETION, resp)
    assert resp["id"] == ANSWER["id"]
    assert resp["model"] == MODEL
    assert resp["choices"][0]["message"]["content"] == "Hello!"
    assert resp["choices"][0]["finish_reason"] == "stop"
    assert resp["usage"] == {"prompt_tokens": 12, "completion_tokens": 6, "total_tokens": 18}


async def test_tool_use_thinking_and_cache_usage(wire: Wire) -> None:
    body = {
        **ANSWER,
        "content": [
            {"type": "thinking", "thinking": "Need the weather.", "signature": "sig"},
            {"type": "text", "text": "Let me check."},
            {
                "type": "tool_use",
                "id": "toolu_01A09q90qw90lq917835lq9",
                "name": "get_weather",
                "input": {"city": "Paris"},
            },
        ],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 10, "cache_read_input_tokens": 90, "output_tokens": 30},
    }
    async with router(anthropic(wire.on(PATH, json_reply(body)))) as r:
        result = await r.achat({**HELLO, "tools": TOOLS})
    resp = result.response
    assert_valid(COMPLETION, resp)
    choice = resp["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] == "Let me check."
    assert choice["message"]["reasoning_content"] == "Need the weather."
    assert choice["message"]["tool_calls"] == [
        {
            "id": "toolu_01A09q90qw90lq917835lq9",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
        }
    ]
    assert resp["usage"]["prompt_tokens"] == 100
    assert resp["usage"]["prompt_tokens_details"] == {"cached_tokens": 90}


async def test_request_body_and_headers(wire: Wire) -> None:
    async with router(anthropic(wire.on(PATH, json_reply(ANSWER)))) as r:
        await r.achat(
            {
                **HELLO,
                "messages": [
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "Hello"},
                ],
                "temperature": 1.7,
                "stop": "END",
            }
        )
        default = wire.last
        await r.achat({**HELLO, "max_completion_tokens": 300})
        capped = wire.last
    assert default.headers["anthropic-version"] == "2023-06-01"
    assert default.headers["x-api-key"] == KEY
    assert "Authorization" not in default.headers
    assert default.body == {
        "model": MODEL,
        "system": "Be brief.",
        "messages": [{"role": "user", "content": "Hello"}],
        "max_tokens": 4096,  # required by Anthropic: always sent
        "stream": False,
        "temperature": 1.0,  # Anthropic's range is [0, 1]
        "stop_sequences": ["END"],
    }
    assert capped.body["max_tokens"] == 300


async def test_tool_conversation_is_converted(wire: Wire) -> None:
    call = {
        "id": "toolu_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
    }
    request = {
        **HELLO,
        "messages": [
            {"role": "user", "content": "Weather in Paris and Rome?"},
            {"role": "assistant", "content": None, "tool_calls": [call, {**call, "id": "toolu_2"}]},
            {"role": "tool", "tool_call_id": "toolu_1", "content": "sunny"},
            {"role": "tool", "tool_call_id": "toolu_2", "content": "rainy"},
        ],
        "tools": TOOLS,
        "tool_choice": "required",
    }
    async with router(anthropic(wire.on(PATH, json_reply(ANSWER)))) as r:
        await r.achat(request)
    sent = wire.last.body
    assert sent["tools"] == [
        {
            "name": "get_weather",
            "description": "Weather of a city",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
        }
    ]
    assert sent["tool_choice"] == {"type": "any"}
    assert sent["messages"][1] == {
        "role": "assistant",
        "content": [
            {
                "type": "tool_use",
                "id": "toolu_1",
                "name": "get_weather",
                "input": {"city": "Paris"},
            },
            {
                "type": "tool_use",
                "id": "toolu_2",
                "name": "get_weather",
                "input": {"city": "Paris"},
            },
        ],
    }
    assert sent["messages"][2] == {  # both results in one user turn
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"},
            {"type": "tool_result", "tool_use_id": "toolu_2", "content": "rainy"},
        ],
    }


async def test_stream_named_events(wire: Wire) -> None:
    async with router(anthropic(wire.on(PATH, stream_reply(*STREAM)))) as r:
        chunks = await streamed(r, HELLO)
    for c in chunks:
        assert_valid(CHUNK, c)
    assert text(chunks) == "Hello!"
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["usage"] == {"prompt_tokens": 12, "completion_tokens": 6, "total_tokens": 18}
    assert {c["id"] for c in chunks} == {ANSWER["id"]}
    assert wire.last.body["stream"] is True


async def test_stream_tool_use(wire: Wire) -> None:
    tool = {"type": "tool_use", "id": "toolu_9", "name": "get_weather", "input": {}}
    body = (
        message_start(),
        block_start(0, {"type": "thinking", "thinking": ""}),
        block_delta(0, {"type": "thinking_delta", "thinking": "Weather needed."}),
        block_delta(0, {"type": "signature_delta", "signature": "abc"}),
        block_stop(0),
        block_start(1, tool),
        block_delta(1, {"type": "input_json_delta", "partial_json": '{"city": '}),
        block_delta(1, {"type": "input_json_delta", "partial_json": '"Paris"}'}),
        block_stop(1),
        message_end("tool_use", 20),
    )
    async with router(anthropic(wire.on(PATH, stream_reply(*body)))) as r:
        chunks = await streamed(r, {**HELLO, "tools": TOOLS})
    for c in chunks:
        assert_valid(CHUNK, c)
    assert text(chunks, "reasoning_content") == "Weather needed."
    calls = [
        t for c in chunks if c["choices"] for t in c["choices"][0]["delta"].get("tool_calls", [])
    ]
    assert calls[0]["id"] == "toolu_9"
    assert calls[0]["function"]["name"] == "get_weather"
    assert {t["index"] for t in calls} == {0}
    assert "".join(t["function"].get("arguments", "") for t in calls) == '{"city": "Paris"}'
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


async def test_error_event_before_content_fails_over(wire: Wire) -> None:
    """LiteLLM #6957: an `overloaded_error` event inside a 200 stream, before any content,
    must fail over (it was passed on to the client as the answer)."""
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    body = (message_start(), PING, event("error", error))
    async with router(
        anthropic(wire.on(PATH, stream_reply(*body))),
        anthropic(wire.on("/good" + PATH, stream_reply(*STREAM)), name="backup"),
    ) as r:
        stream = await r.open_stream(HELLO)
        chunks = [c async for c in stream]
    assert text(chunks) == "Hello!"
    assert [(a.provider, a.reason) for a in stream.trace] == [
        ("claude", Reason.SERVER_ERROR),
        ("claude", Reason.SERVER_ERROR),  # an overload is tried once more (`retries` unset)
        ("backup", Reason.OK),
    ]
    assert "Overloaded" in stream.trace[0].detail


async def test_error_event_after_content_interrupts(wire: Wire) -> None:
    error = {"type": "error", "error": {"type": "api_error", "message": "Internal server error"}}
    body = (*STREAM[:4], event("error", error))
    async with router(anthropic(wire.on(PATH, stream_reply(*body)))) as r:
        with pytest.raises(StreamInterrupted) as info:
            await streamed(r, HELLO)
    assert info.value.attempts[-1].reason is Reason.SERVER_ERROR


async def test_stream_without_message_stop_is_cut(wire: Wire) -> None:
    async with router(anthropic(wire.on(PATH, stream_reply(*STREAM[:4])))) as r:
        with pytest.raises(StreamInterrupted):
            await streamed(r, HELLO)


@pytest.mark.parametrize(
    ("status", "kind", "message", "reason"),
    [
        (401, "authentication_error", "invalid x-api-key", Reason.AUTH_FAILED),
        (403, "permission_error", "no access to this model", Reason.AUTH_FAILED),
        (
            429,
            "rate_limit_error",
            "Number of requests has exceeded your rate limit",
            Reason.RATE_LIMITED,
        ),
        (
            400,
            "invalid_request_error",
            "prompt is too long: 210000 tokens > 200000 maximum",
            Reason.CONTEXT_EXCEEDED,
        ),
        (
            413,
            "request_too_large",
            "Request exceeds the maximum allowed number of bytes",
            Reason.BAD_REQUEST,
        ),
        (404, "not_found_error", "model: claude-nope", Reason.MODEL_UNAVAILABLE),
        (500, "api_error", "Internal server error", Reason.SERVER_ERROR),
        (529, "overloaded_error", "Overloaded", Reason.SERVER_ERROR),
    ],
)
async def test_errors(wire: Wire, status: int, kind: str, message: str, reason: Reason) -> None:
    body = {"type": "error", "error": {"type": kind, "message": message}, "request_id": "req_1"}
    async with router(anthropic(wire.on(PATH, json_reply(body, status)))) as r:
        attempt = await first_failure(r, HELLO)
    assert (attempt.reason, attempt.status) == (reason, status)
    assert message in attempt.detail


def test_pure_pieces() -> None:
    dialect = get("anthropic")
    assert dialect.headers() == {"anthropic-version": "2023-06-01"}
    assert dialect.error_of(ANSWER) is None
    info = dialect.error_of(
        {"type": "error", "error": {"type": "overloaded_error", "message": "x"}}
    )
    assert info is not None
    assert (info.code, info.status) == ("overloaded_error", 529)
    image = "data:image/png;base64,iVBORw0KGgo="
    body = dialect.body(
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "What is this?"},
                        {"type": "image_url", "image_url": {"url": image}},
                        {"type": "image_url", "image_url": {"url": "https://x/cat.jpg"}},
                    ],
                }
            ],
            "tools": TOOLS,
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
            "parallel_tool_calls": False,
        },
        MODEL,
        False,
        "max_tokens",
    )
    assert body["messages"][0]["content"][1:] == [
        {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
        },
        {"type": "image", "source": {"type": "url", "url": "https://x/cat.jpg"}},
    ]
    assert body["tool_choice"] == {
        "type": "tool",
        "name": "get_weather",
        "disable_parallel_tool_use": True,
    }


# -- inbound: a client that speaks Messages to the proxy ---------------------------------------
#
# The direction Claude Code uses: a Messages request read as the engine's chat request, a
# chat answer rendered as a Messages message, chat chunks encoded as Messages events.

CLAUDE_CODE_REQUEST: dict[str, Any] = {  # the shape Claude Code 2.1.197 sends, trimmed
    "model": "claude-opus-4-8",
    "max_tokens": 64000,
    "stream": True,
    "system": [
        {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.197.c40;"},
        {"type": "text", "text": "You are a Claude agent.", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "Be helpful.", "cache_control": {"type": "ephemeral"}},
    ],
    "messages": [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "<system-reminder>date</system-reminder>"},
                {"type": "text", "text": "Run echo hi", "cache_control": {"type": "ephemeral"}},
            ],
        },
        {"role": "system", "content": "Available agent types: …"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Use Bash.", "signature": "EqQBCkYIBxgC"},
                {"type": "text", "text": "Running it."},
                {
                    "type": "tool_use",
                    "id": "toolu_01XyZ",
                    "name": "Bash",
                    "input": {"command": "echo hi", "description": "Print hi"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_01XyZ",
                    "content": [{"type": "text", "text": "hi"}],
                    "is_error": False,
                },
                {"type": "text", "text": "Thanks"},
            ],
        },
    ],
    "tools": [
        {
            "name": "Bash",
            "description": "Executes a bash command.",
            "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}},
        },
        {"type": "web_search_20250305", "name": "web_search", "max_uses": 5},
    ],
    "tool_choice": {"type": "auto", "disable_parallel_tool_use": True},
    "metadata": {"user_id": '{"device_id":"8c08","session_id":"a1dc"}'},
    "thinking": {"type": "adaptive"},
    "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
    "output_config": {"effort": "high"},
}


def test_claude_code_request_is_read_as_chat() -> None:
    inbound = decode_request(CLAUDE_CODE_REQUEST)
    assert inbound.body == {
        "model": "claude-opus-4-8",
        "max_tokens": 64000,
        "stream": True,
        "stream_options": {"include_usage": True},
        "messages": [
            {"role": "system", "content": "You are a Claude agent.\n\nBe helpful."},
            {"role": "user", "content": "<system-reminder>date</system-reminder>\n\nRun echo hi"},
            {"role": "system", "content": "Available agent types: …"},
            {
                "role": "assistant",
                "content": "Running it.",
                "tool_calls": [
                    {
                        "id": "toolu_01XyZ",
                        "type": "function",
                        "function": {
                            "name": "Bash",
                            "arguments": '{"command":"echo hi","description":"Print hi"}',
                        },
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "toolu_01XyZ", "content": "hi"},
            {"role": "user", "content": "Thanks"},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "Bash",
                    "parameters": {
                        "type": "object",
                        "properties": {"command": {"type": "string"}},
                    },
                    "description": "Executes a bash command.",
                },
            }
        ],
        "tool_choice": "auto",
        "parallel_tool_calls": False,
        "user": '{"device_id":"8c08","session_id":"a1dc"}',
    }
    assert inbound.dropped == (
        "context_management",
        "output_config",
        "cache_control",
        "thinking",
        "tools:web_search",
    )


def asked(*messages: Any, **fields: Any) -> dict[str, Any]:
    return {"model": MODEL, "max_tokens": 9, "messages": list(messages or HI), **fields}


HI = [{"role": "user", "content": "hi"}]
USE = {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}}


def user(*blocks: Any) -> dict[str, Any]:
    return {"role": "user", "content": list(blocks)}


@pytest.mark.parametrize(
    ("request_", "param"),
    [
        ({"messages": HI}, "max_tokens"),
        (asked(max_tokens=0), "max_tokens"),
        (asked(max_tokens=True), "max_tokens"),
        (asked(max_tokens=2**63), "max_tokens"),
        ({"max_tokens": 9}, "messages"),
        ({"max_tokens": 9, "messages": []}, "messages"),
        (asked({"role": "tool", "content": "x"}), "messages[0].role"),
        (asked({"role": "user"}), "messages[0].content"),
        (asked(*HI, {"role": "assistant", "content": 5}), "messages[1].content"),
        (asked(user({"text": "x"})), "messages[0].content[0].type"),
        (
            asked(user({"type": "text", "text": "a"}, {"type": "text"})),
            "messages[0].content[1].text",
        ),
        (asked(user({"type": "image"})), "messages[0].content[0].source"),
        (asked({"role": "assistant", "content": [{**USE, "id": 1}]}), "messages[0].content[0].id"),
        (
            asked({"role": "assistant", "content": [{**USE, "input": "ls"}]}),
            "messages[0].content[0].input",
        ),
        (
            asked(user({"type": "tool_result", "content": "x"})),
            "messages[0].content[0].tool_use_id",
        ),
        (
            asked(user({"type": "tool_result", "tool_use_id": "t", "content": [{"type": "text"}]})),
            "messages[0].content[0].content[0].text",
        ),
        (
            asked(user({"type": "tool_result", "tool_use_id": "t", "is_error": "yes"})),
            "messages[0].content[0].is_error",
        ),
        (asked(system=3), "system"),
        (asked(system=[{"type": "text"}]), "system[0].text"),
        (asked(temperature=1.5), "temperature"),
        (asked(temperature="0.5"), "temperature"),
        (asked(top_p=2), "top_p"),
        (asked(top_k=-1), "top_k"),
        (asked(stop_sequences="END"), "stop_sequences"),
        (asked(stop_sequences=["END", 5]), "stop_sequences[1]"),
        (asked(stream="true"), "stream"),
        (asked(metadata={"user_id": 5}), "metadata.user_id"),
        (asked(tools={}), "tools"),
        (asked(tools=[{"name": "Bash"}]), "tools[0].input_schema"),
        (asked(tools=[{"name": "", "input_schema": {}}]), "tools[0].name"),
        (asked(tool_choice="auto"), "tool_choice"),
        (asked(tool_choice={"type": "tool"}), "tool_choice.name"),
        (
            asked(tool_choice={"type": "any", "disable_parallel_tool_use": 1}),
            "tool_choice.disable_parallel_tool_use",
        ),
        (asked(thinking={"type": "enabled"}), "thinking.budget_tokens"),
        (asked(thinking="on"), "thinking"),
        (asked(model=["claude"]), "model"),
    ],
)
def test_bad_requests_name_the_field(request_: dict[str, Any], param: str) -> None:
    with pytest.raises(RequestError) as caught:
        decode_request(request_)
    assert caught.value.param == param
    assert caught.value.status == 400
    assert f"'{param}'" in str(caught.value)


def test_fields_the_api_adds_pass() -> None:
    request = asked(
        user(
            {"type": "document", "source": {"type": "text", "data": "x"}},
            {"type": "search_result", "whatever": [1]},
            {
                "type": "text",
                "text": "hi",
                "citations": None,
                "cache_control": {"type": "ephemeral"},
            },
        ),
        {"role": "assistant", "content": [{"type": "redacted_thinking", "data": "xyz"}]},
        {"role": "user", "content": "go on"},
        thinking={"type": "adaptive"},
        tool_choice={"type": "auto", "disable_parallel_tool_use": True},
        tools=[
            {
                "name": "Bash",
                "input_schema": {"type": "object"},
                "strict": True,
                "defer_loading": True,
            },
            {"type": "web_search_20250305", "name": "web_search", "max_uses": 5},
            {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"},
        ],
        context_management={"edits": []},
        output_config={"effort": "high"},
        container="c1",
        cache_control={"type": "ephemeral"},
        service_tier="auto",
        top_k=0,
    )
    ChatRequest.parse(decode_request(request).body)
    ChatRequest.parse(decode_request(CLAUDE_CODE_REQUEST).body)


def test_blocks_a_chat_provider_cannot_take() -> None:
    inbound = decode_request(
        {
            "max_tokens": 10,
            "top_k": 3,
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "image", "source": {"type": "url", "url": "https://x/a.png"}},
                        {"type": "document", "source": {"type": "text", "data": "pdf"}},
                        {
                            "type": "tool_result",
                            "tool_use_id": "t1",
                            "is_error": True,
                            "content": [
                                {"type": "text", "text": "boom"},
                                {"type": "image", "source": {"type": "file", "file_id": "f"}},
                            ],
                        },
                    ],
                },
                {
                    "role": "assistant",
                    "content": [{"type": "redacted_thinking", "data": "xyz"}],
                },
                {"role": "user", "content": [{"type": "document", "source": {}}]},
            ],
            "tools": [{"name": "f", "input_schema": {"type": "object"}, "defer_loading": True}],
            "tool_choice": {"type": "tool", "name": "web_search"},
        }
    )
    assert inbound.body["messages"] == [
        {"role": "tool", "tool_call_id": "t1", "content": "boom"},
        {
            "role": "user",
            "content": [{"type": "image_url", "image_url": {"url": "https://x/a.png"}}],
        },
        {"role": "assistant", "content": ""},
        {"role": "user", "content": ""},
    ]
    assert "tool_choice" not in inbound.body
    assert set(inbound.dropped) == {
        "document",
        "tool_result:image",
        "tool_result:is_error",
        "redacted_thinking",
        "top_k",
        "tool.defer_loading",
        "tool_choice",
    }


def test_tool_choice_and_tool_ids() -> None:
    tools = [{"name": "f", "input_schema": {"type": "object"}}]
    base = {"max_tokens": 9, "messages": HELLO["messages"], "tools": tools}
    for choice, chat in [
        ({"type": "auto"}, "auto"),
        ({"type": "any"}, "required"),
        ({"type": "none"}, "none"),
        ({"type": "tool", "name": "f"}, {"type": "function", "function": {"name": "f"}}),
    ]:
        assert decode_request({**base, "tool_choice": choice}).body["tool_choice"] == chat
    assert tool_use_id("call_00_abc") == "toolu_call_00_abc"
    assert tool_use_id("toolu_01A") == "toolu_01A"
    assert tool_use_id("call:1/2") == "toolu_call_1_2"
    assert tool_use_id(None).startswith("toolu_")
    assert tool_use_id(None) != tool_use_id(None)


def test_count_tokens_estimate() -> None:
    def count(content: Any, **rest: Any) -> int:
        return estimate_tokens({"messages": [{"role": "user", "content": content}], **rest})

    assert text_tokens("Hello world") == pytest.approx(2 * 1.05)  # a word is a token
    assert text_tokens("internationalization") == pytest.approx(1.05 + 0.2 * 14)
    assert text_tokens("你好世界") == pytest.approx(4 * 0.7)
    assert text_tokens("2026-12-01") == pytest.approx(8 * 0.7 + 2 * 0.4)
    assert text_tokens("def f():\n    return 1") == pytest.approx(
        1.05 + 1.05 + 3 * 0.4 + 1.35 + 1.05 + 0.9 + 0.7
    )
    assert count("Hello world") == 2 + MESSAGE_TOKENS
    image = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "A" * 9999},
    }
    assert count([image]) == ATTACHMENT_TOKENS + MESSAGE_TOKENS
    assert count("Hello", system="Hello world") == 1 + 2 + MESSAGE_TOKENS
    tool = {"name": "abcd", "input_schema": {"type": "object"}}  # counted as its JSON
    assert count("abcd", tools=[tool]) == count("abcd") + round(
        text_tokens(orjson.dumps(tool).decode())
    )
    with pytest.raises(RequestError):
        estimate_tokens({"messages": "hi"})


def test_native_body_keeps_all_but_unsigned_thinking() -> None:
    unsigned = {"type": "thinking", "thinking": "a chat provider's reasoning", "signature": ""}
    signed = {"type": "thinking", "thinking": "Claude's", "signature": "EqQB"}
    request = {
        **CLAUDE_CODE_REQUEST,
        "agent_reach": {"provider_route": "x"},
        "messages": [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": [unsigned, {"type": "text", "text": "a"}]},
            {"role": "user", "content": "q2"},
            {"role": "assistant", "content": [signed, {"type": "text", "text": "b"}]},
            {"role": "user", "content": "q3"},
        ],
    }
    body = DIALECT.native_body(request, "claude-x", True)
    assert body["messages"][1] == {"role": "assistant", "content": [{"type": "text", "text": "a"}]}
    assert body["messages"][3] == request["messages"][3]
    rest = {k: v for k, v in request.items() if k not in ("agent_reach", "messages", "model")}
    assert {k: v for k, v in body.items() if k not in ("messages", "model")} == rest
    assert body["model"] == "claude-x"
    turns = [m for m in CLAUDE_CODE_REQUEST["messages"] if m["role"] != "system"]
    plain = {**CLAUDE_CODE_REQUEST, "stream": False, "messages": turns}
    assert DIALECT.native_body(plain, "", False) == plain


def test_native_body_folds_system_turns_and_leaves_out_a_refused_user_id() -> None:
    """Claude Code's `system` turns inside `messages` go to the end of the top-level `system`
    (Anthropic and vLLM refuse them); its JSON `metadata.user_id` goes to Anthropic only, as
    DeepSeek's endpoint refuses anything but `[A-Za-z0-9_-]+` (issue 19, item 7)."""
    compatible = get("anthropic").for_endpoint("https://api.deepseek.com/anthropic/v1/messages")
    official = get("anthropic").for_endpoint("https://api.anthropic.com/v1/messages")
    for dialect in (compatible, official):
        body = dialect.native_body(CLAUDE_CODE_REQUEST, "m", True)
        assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
        assert body["system"] == [
            *CLAUDE_CODE_REQUEST["system"],
            {"type": "text", "text": "Available agent types: …"},
        ]
    assert official.native_body(CLAUDE_CODE_REQUEST, "m", True)["metadata"] == {
        "user_id": '{"device_id":"8c08","session_id":"a1dc"}'
    }
    assert official.left_out(CLAUDE_CODE_REQUEST) == ()
    assert "metadata" not in compatible.native_body(CLAUDE_CODE_REQUEST, "m", True)
    assert compatible.left_out(CLAUDE_CODE_REQUEST) == ("metadata.user_id",)
    fine = {**CLAUDE_CODE_REQUEST, "metadata": {"user_id": "user_8c08-a1dc"}}
    assert compatible.native_body(fine, "m", True)["metadata"] == fine["metadata"]
    # the same rule when a chat request becomes a Messages one
    chat = {"messages": [{"role": "user", "content": "hi"}], "user": '{"a":1}'}
    assert "metadata" not in compatible.body(chat, "m", False, "max_tokens")
    assert official.body(chat, "m", False, "max_tokens")["metadata"] == {"user_id": '{"a":1}'}


def test_rendered_message_and_stream_validate_against_the_sdk() -> None:
    response = completion.completion(
        model="deepseek-chat",
        created=1,
        choices=[
            completion.choice(
                completion.message(
                    "Let me check.",
                    tool_calls=[completion_call("call_0", "get_weather", '{"city":"Paris"}')],
                    reasoning="Weather needed.",
                ),
                "tool_calls",
            )
        ],
        usage={
            "prompt_tokens": 100,
            "completion_tokens": 20,
            "total_tokens": 120,
            "prompt_tokens_details": {"cached_tokens": 90},
        },
    )
    message = encode_answer(response)
    Message.model_validate(message, strict=True)
    assert message["content"] == [
        {"type": "thinking", "thinking": "Weather needed.", "signature": ""},
        {"type": "text", "text": "Let me check."},
        {
            "type": "tool_use",
            "id": "toolu_call_0",
            "name": "get_weather",
            "input": {"city": "Paris"},
        },
    ]
    assert message["stop_reason"] == "tool_use"
    assert message["usage"] == {
        "input_tokens": 10,
        "output_tokens": 20,
        "cache_read_input_tokens": 90,
    }
    events = encode(completion.as_chunks(response))
    assert [e for e, _ in events] == [
        "message_start",
        "content_block_start",
        "ping",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]


@pytest.mark.parametrize(
    ("finish", "calls", "stop"),
    [
        ("stop", False, "end_turn"),
        ("length", False, "max_tokens"),
        ("content_filter", False, "refusal"),
        ("tool_calls", True, "tool_use"),
        ("stop", True, "tool_use"),
        (None, False, "end_turn"),
    ],
)
def test_stop_reasons(finish: str | None, calls: bool, stop: str) -> None:
    assert stop_reason(finish, calls) == stop


# -- round trips (hypothesis): chat → Messages → chat keeps what both can say -----------------


def completion_call(id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": id, "type": "function", "function": {"name": name, "arguments": arguments}}


CALL = st.builds(
    lambda i, n, a: completion_call(i, n, orjson.dumps(a).decode()), CALL_ID, NAME, ARGS
)
CALLS = st.lists(CALL, max_size=2, unique_by=lambda c: c["id"])


@st.composite
def conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Chat conversations the Messages format can say: an optional system prompt, then user
    turns (text, or text and an image) and assistant turns (text and/or tool calls, each
    call followed by its result)."""
    messages: list[dict[str, Any]] = []
    if draw(st.booleans()):
        messages.append({"role": "system", "content": draw(TEXT)})
    for _ in range(draw(st.integers(1, 3))):
        user: Any = draw(TEXT)
        if draw(st.booleans()):
            user = [{"type": "text", "text": user}, draw(IMAGE)]
        messages.append({"role": "user", "content": user})
        calls = draw(CALLS)
        assistant: dict[str, Any] = {
            "role": "assistant",
            "content": draw(st.none() | TEXT) if calls else draw(TEXT),
        }
        if calls:
            assistant["tool_calls"] = calls
        messages.append(assistant)
        for call in calls:
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": draw(TEXT)})
    return messages


TOOL_DEFS = st.lists(
    st.builds(
        lambda n, d: {
            "type": "function",
            "function": {
                "name": n,
                "description": d,
                "parameters": {"type": "object", "properties": {"x": {"type": "string"}}},
            },
        },
        NAME,
        TEXT,
    ),
    max_size=2,
    unique_by=lambda t: t["function"]["name"],
)


@given(
    messages=conversations(),
    tools=TOOL_DEFS,
    choice=st.sampled_from(["auto", "required", "none", "function"]),
    serial=st.booleans(),
    cap=st.integers(1, 100_000),
    temperature=st.floats(0, 1),
    stop=st.lists(TEXT, max_size=2),
)
def test_request_round_trip(
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    choice: str,
    serial: bool,
    cap: int,
    temperature: float,
    stop: list[str],
) -> None:
    chat: dict[str, Any] = {
        "model": MODEL,
        "messages": messages,
        "max_tokens": cap,
        "temperature": temperature,
        "user": "u-1",
    }
    if stop:
        chat["stop"] = stop
    if tools:
        chat["tools"] = tools
        name = tools[0]["function"]["name"]
        chat["tool_choice"] = (
            {"type": "function", "function": {"name": name}} if choice == "function" else choice
        )
        if serial:
            chat["parallel_tool_calls"] = False
    back = decode_request(DIALECT.body(chat, MODEL, False, "max_tokens"))
    assert back.dropped == ()
    assert back.body == {
        k: v for k, v in chat.items() if not (k == "parallel_tool_calls" and choice == "none")
    }


@st.composite
def answers(draw: st.DrawFn) -> dict[str, Any]:
    """Chat completions the Messages format can say."""
    calls = draw(CALLS)
    finish = "tool_calls" if calls else draw(st.sampled_from(["stop", "length", "content_filter"]))
    usage = completion.usage(draw(st.integers(0, 10_000)), draw(st.integers(0, 10_000)))
    cached = draw(st.integers(0, 10))
    assert usage is not None
    if cached:
        usage["prompt_tokens"] += cached
        usage["total_tokens"] += cached
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    message = completion.message(
        draw(st.none() | TEXT) if calls else draw(TEXT),
        tool_calls=calls,
        reasoning=draw(st.none() | TEXT),
    )
    return completion.completion(
        model="deepseek-chat",
        created=1,
        choices=[completion.choice(message, finish)],
        usage=usage,
    )


def expected(answer: dict[str, Any]) -> dict[str, Any]:
    """What survives the round trip: everything, tool call ids as `toolu_` ids."""
    message = dict(answer["choices"][0]["message"])
    if "tool_calls" in message:
        message["tool_calls"] = [{**c, "id": tool_use_id(c["id"])} for c in message["tool_calls"]]
    return message


CTX = Context("deepseek-chat", 1, Shape("content", "text"))


@given(answers())
def test_answer_round_trip(answer: dict[str, Any]) -> None:
    message = encode_answer(answer)
    Message.model_validate(message, strict=True)
    back = DIALECT.normalize(message, CTX)
    assert back["choices"][0]["message"] == expected(answer)
    assert back["choices"][0]["finish_reason"] == answer["choices"][0]["finish_reason"]
    assert back["usage"] == answer["usage"]


def encode(chunks: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """Chat chunks as Messages events, each checked against the SDK's event types."""
    events = StreamEncoder()
    out = [e for c in chunks for e in events.feed(c)] + events.end()
    for name, data in out:
        assert data["type"] == name
        if name != "ping":
            EVENTS.validate_python(data, strict=True)
    return out


def assemble(chunks: list[dict[str, Any]]) -> tuple[dict[str, Any], str | None]:
    """The assistant message and finish reason a list of chat chunks adds up to."""
    message: dict[str, Any] = {"role": "assistant", "content": None, "refusal": None}
    calls: dict[int, dict[str, Any]] = {}
    finish = None
    for c in chunks:
        for choice in c["choices"]:
            delta = choice["delta"]
            for key in ("content", "reasoning_content"):
                if delta.get(key):
                    message[key] = (
                        message.get(key, "") + delta[key] if message.get(key) else delta[key]
                    )
            for piece in delta.get("tool_calls") or ():
                n = piece["index"]
                if n in calls:
                    calls[n]["function"]["arguments"] += piece["function"]["arguments"]
                else:
                    calls[n] = {k: v for k, v in piece.items() if k != "index"}
            finish = choice["finish_reason"] or finish
    if calls:
        message["tool_calls"] = [calls[n] for n in sorted(calls)]
    return message, finish


@given(answers(), st.integers(1, 6))
def test_stream_round_trip(answer: dict[str, Any], size: int) -> None:
    decoder = DIALECT.decoder(CTX)
    events = encode(chat_stream(answer, size))
    chunks = [c for name, data in events for c in decoder.feed(name, orjson.dumps(data))]
    assert decoder.finished
    message, finish = assemble(chunks)
    assert message == expected(answer)
    assert finish == answer["choices"][0]["finish_reason"]
    assert chunks[-1]["usage"] == answer["usage"]


# -- whatever the Messages checks accept, the chat request it becomes passes the chat checks --

_words = st.text(max_size=6)
_names = st.text(min_size=1, max_size=6)
_source = st.sampled_from(
    [
        {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
        {"type": "url", "url": "https://x.example/a.png"},
        {"type": "file", "file_id": "f1"},
    ]
)
_text = st.builds(lambda t: {"type": "text", "text": t}, _words)
_image = st.builds(lambda s: {"type": "image", "source": s}, _source)
_block = st.one_of(
    _text,
    _image,
    st.builds(
        lambda i, n, a: {"type": "tool_use", "id": i, "name": n, "input": a},
        _words,
        _names,
        st.dictionaries(_words, _words, max_size=2),
    ),
    st.builds(
        lambda i, c, e: {"type": "tool_result", "tool_use_id": i, "content": c, "is_error": e},
        _words,
        st.none() | _words | st.lists(_text | _image, max_size=2),
        st.booleans(),
    ),
    st.builds(lambda t: {"type": "thinking", "thinking": t, "signature": "s"}, _words),
    st.builds(
        lambda k: {"type": k, "data": "x"}, st.sampled_from(["document", "redacted_thinking"])
    ),
)
_turn = st.fixed_dictionaries(
    {
        "role": st.sampled_from(["user", "assistant", "system"]),
        "content": _words | st.lists(_block, max_size=3),
    }
)
_tool = st.builds(lambda n: {"name": n, "input_schema": {"type": "object"}}, _names) | st.just(
    {"type": "web_search_20250305", "name": "web_search"}
)
messages_requests = st.fixed_dictionaries(
    {"max_tokens": st.integers(1, 2**63 - 1), "messages": st.lists(_turn, min_size=1, max_size=4)},
    optional={
        "model": _words,
        "system": _words | st.lists(_text, max_size=2),
        "temperature": st.floats(0, 1),
        "top_p": st.floats(0, 1),
        "top_k": st.integers(0, 500),
        "stop_sequences": st.lists(_words, max_size=2),
        "stream": st.booleans(),
        "metadata": st.fixed_dictionaries({}, optional={"user_id": _words}),
        "tools": st.lists(_tool, max_size=2),
        "tool_choice": st.sampled_from(
            [{"type": "auto"}, {"type": "any"}, {"type": "none"}, {"type": "tool", "name": "web"}]
        ),
        "thinking": st.sampled_from(
            [{"type": "adaptive"}, {"type": "disabled"}, {"type": "enabled", "budget_tokens": 1024}]
        ),
    },
)


@given(request=messages_requests)
def test_what_the_messages_checks_accept_the_chat_checks_accept(request: dict[str, Any]) -> None:
    ChatRequest.parse(decode_request(request).body)


def test_cache_control_marks_of_a_chat_request_reach_anthropic() -> None:
    """A chat client's `cache_control` marks (the OpenRouter/DashScope convention) become the
    Messages blocks' marks: system, text, image and tool result (issue 19, item 5)."""
    mark = {"type": "ephemeral"}
    image = {"type": "image_url", "image_url": {"url": "https://x.example/a.png"}}
    request = {
        "messages": [
            {
                "role": "system",
                "content": [{"type": "text", "text": "Be brief.", "cache_control": mark}],
            },
            {
                "role": "user",
                "content": [{"type": "text", "text": "q"}, {**image, "cache_control": mark}],
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [completion_call("c1", "f", "{}")],
            },
            {
                "role": "tool",
                "tool_call_id": "c1",
                "content": [{"type": "text", "text": "r", "cache_control": mark}],
            },
        ]
    }
    body = DIALECT.body(request, "m", False, "max_tokens")
    assert body["system"] == [{"type": "text", "text": "Be brief.", "cache_control": mark}]
    first, _, last = body["messages"]
    assert first["content"][0] == {"type": "text", "text": "q"}
    assert first["content"][1]["cache_control"] == mark
    assert last["content"][0]["cache_control"] == mark
    plain = DIALECT.body(
        {"messages": [{"role": "system", "content": "Be brief."}, HELLO["messages"][0]]},
        "m",
        False,
        "max_tokens",
    )
    assert plain["system"] == "Be brief."
    assert plain["messages"] == [{"role": "user", "content": "Hello"}]


def test_a_chat_request_is_estimated_as_its_messages_request() -> None:
    """`input_tokens` counts a chat request (what a context window is checked against) about
    as the Messages request it came from."""
    from .token_corpus import corpus

    request = corpus()["agent session"]
    chat = decode_request(request).body
    assert abs(input_tokens(chat) - estimate_tokens(request)) <= 0.05 * estimate_tokens(request)


def test_fallbacks_go_only_to_anthropics_own_api() -> None:
    """Issue 50, item 4: Anthropic's server-side model fallback (`fallbacks`, Claude Code
    2.1.332 with beta `server-side-fallback-2026-07-01`) is Anthropic's own: a compatible
    endpoint (DeepSeek's, Kimi's, …) is sent none, and that is named."""
    request = {
        "model": "m",
        "max_tokens": 10,
        "messages": [{"role": "user", "content": "q"}],
        "fallbacks": [{"model": "claude-sonnet-4-6"}],
    }
    official = DIALECT.for_endpoint("https://api.anthropic.com/v1/messages")
    compatible = DIALECT.for_endpoint("https://api.deepseek.com/anthropic/v1/messages")
    assert official.native_body(request, "m", False)["fallbacks"] == request["fallbacks"]
    assert official.left_out(request) == ()
    assert "fallbacks" not in compatible.native_body(request, "m", False)
    assert compatible.left_out(request) == ("fallbacks",)
    assert "fallbacks" in request  # the client's body is left as it came
