"""Google Gemini generateContent: wire samples through a loopback server and the Router."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from google.genai import types as genai_types
from hypothesis import given
from hypothesis import strategies as st

from agent_reach import Reason, StreamInterrupted
from agent_reach.chat import completion
from agent_reach.chat.request import ChatRequest
from agent_reach.core.errors import RequestError
from agent_reach.dialects import get
from agent_reach.dialects.base import Context, Shape
from agent_reach.dialects.gemini.answer import encode_answer
from agent_reach.dialects.gemini.request import decode_request, estimate_tokens
from agent_reach.dialects.gemini.stream import StreamEncoder
from agent_reach.dialects.tokens import MESSAGE_TOKENS, input_tokens

from .conftest import CHUNK, COMPLETION, assert_valid
from .fakes.shapes import sse
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
from .strategies import ARGS, IMAGE, NAME, TEXT, chat_stream

MODEL = "gemini-2.0-flash"
BASE = "/v1beta/models"
CALL = f"{BASE}/{MODEL}:generateContent"
STREAM_CALL = f"{BASE}/{MODEL}:streamGenerateContent"
HELLO = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
USAGE = {"promptTokenCount": 8, "candidatesTokenCount": 7, "totalTokenCount": 15}

ANSWER = {
    "candidates": [
        {
            "content": {"parts": [{"text": "Hello! How can I help?"}], "role": "model"},
            "finishReason": "STOP",
            "index": 0,
        }
    ],
    "usageMetadata": USAGE,
    "modelVersion": "gemini-2.0-flash-001",
    "responseId": "resp-123",
}


def piece(part: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"parts": [part], "role": "model"}, "index": 0}
    if finish:
        candidate["finishReason"] = finish
    return {"candidates": [candidate], "modelVersion": "gemini-2.0-flash-001", **extra}


STREAM = sse(
    piece({"text": "Hello"}),
    piece({"text": "! How can"}),
    piece({"text": " I help?"}, "STOP", usageMetadata=USAGE),
)


@pytest.fixture
async def wire() -> AsyncIterator[Wire]:
    async with Wire.running() as w:
        yield w


def gemini(url: str, **fields: Any) -> dict[str, Any]:
    return provider("gemini", url, "gemini", auth_header="x-goog-api-key", **fields)


async def test_answer_is_normalized(wire: Wire) -> None:
    wire.on(CALL, json_reply(ANSWER))
    async with router(gemini(wire.url(BASE))) as r:
        result = await r.achat(HELLO)
    resp = result.response
    assert_valid(COMPLETION, resp)
    assert resp["id"] == "resp-123"
    assert resp["model"] == "gemini-2.0-flash-001"  # modelVersion
    assert resp["choices"][0]["message"]["content"] == "Hello! How can I help?"
    assert resp["choices"][0]["finish_reason"] == "stop"
    assert resp["usage"] == {"prompt_tokens": 8, "completion_tokens": 7, "total_tokens": 15}
    sent = wire.last
    assert sent.path == CALL  # the model is in the URL
    assert sent.headers["x-goog-api-key"] == KEY


async def test_request_body(wire: Wire) -> None:
    wire.on(CALL, json_reply(ANSWER))
    request = {
        "model": MODEL,
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "Hello."},
            {"role": "user", "content": "again"},
        ],
        "max_tokens": 512,
        "temperature": 0.7,
        "stop": ["END"],
    }
    async with router(gemini(wire.url(BASE))) as r:
        await r.achat(request)
    assert wire.last.body == {
        "systemInstruction": {"parts": [{"text": "Be brief."}]},
        "contents": [
            {"role": "user", "parts": [{"text": "hi"}]},
            {"role": "model", "parts": [{"text": "Hello."}]},
            {"role": "user", "parts": [{"text": "again"}]},
        ],
        "generationConfig": {"temperature": 0.7, "stopSequences": ["END"], "maxOutputTokens": 512},
    }


async def test_stream_has_no_terminal_marker(wire: Wire) -> None:
    wire.on(STREAM_CALL, stream_reply(STREAM))
    async with router(gemini(wire.url(BASE))) as r:
        chunks = await streamed(r, HELLO)
    for c in chunks:
        assert_valid(CHUNK, c)
    assert text(chunks) == "Hello! How can I help?"
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None, None, "stop"]
    assert chunks[-1]["usage"]["total_tokens"] == 15
    assert wire.last.path == STREAM_CALL
    assert wire.last.query == {"alt": "sse"}


async def test_stream_without_finish_reason_is_cut(wire: Wire) -> None:
    wire.on(STREAM_CALL, stream_reply(sse(piece({"text": "Hello"}), piece({"text": "!"}))))
    async with router(gemini(wire.url(BASE))) as r:
        with pytest.raises(StreamInterrupted):
            await streamed(r, HELLO)


@pytest.mark.parametrize(
    "endpoint",
    [
        BASE,
        BASE + "/",
        BASE + "/{model}:generateContent",
        CALL,
        BASE + "/{model}:streamGenerateContent",
    ],
)
async def test_endpoint_forms_and_key_in_query(wire: Wire, endpoint: str) -> None:
    wire.on(CALL, json_reply(ANSWER))
    wire.on(STREAM_CALL, stream_reply(STREAM))
    fields = {"auth_header": "", "auth_query": "key"}
    async with router(provider("g", wire.url(endpoint), "gemini", **fields)) as r:
        await r.achat(HELLO)
        assert (wire.last.path, wire.last.query) == (CALL, {"key": KEY})
        await streamed(r, HELLO)
        assert (wire.last.path, wire.last.query) == (STREAM_CALL, {"alt": "sse", "key": KEY})


async def test_function_call_and_thoughts(wire: Wire) -> None:
    body = {
        "candidates": [
            {
                "content": {
                    "role": "model",
                    "parts": [
                        {"text": "The user wants weather.", "thought": True},
                        {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}},
                    ],
                },
                "finishReason": "STOP",
            }
        ],
        "usageMetadata": {**USAGE, "thoughtsTokenCount": 5, "totalTokenCount": 20},
    }
    wire.on(CALL, json_reply(body))
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Weather of a city",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ]
    async with router(gemini(wire.url(BASE))) as r:
        result = await r.achat({**HELLO, "tools": tools, "tool_choice": "auto"})
    resp = result.response
    assert_valid(COMPLETION, resp)
    choice = resp["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] is None
    assert choice["message"]["reasoning_content"] == "The user wants weather."
    assert choice["message"]["tool_calls"] == [
        {
            "id": "call_0",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
        }
    ]
    assert resp["usage"]["completion_tokens"] == 12
    assert resp["usage"]["completion_tokens_details"] == {"reasoning_tokens": 5}
    sent = wire.last.body
    assert sent["tools"] == [
        {
            "functionDeclarations": [
                {
                    "name": "get_weather",
                    "description": "Weather of a city",
                    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
                }
            ]
        }
    ]
    assert sent["toolConfig"] == {"functionCallingConfig": {"mode": "AUTO"}}


async def test_stream_function_call(wire: Wire) -> None:
    call = {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}}
    wire.on(STREAM_CALL, stream_reply(sse(piece(call, "STOP", usageMetadata=USAGE))))
    async with router(gemini(wire.url(BASE))) as r:
        chunks = await streamed(r, HELLO)
    for c in chunks:
        assert_valid(CHUNK, c)
    delta = chunks[0]["choices"][0]["delta"]
    assert delta["tool_calls"][0]["function"] == {
        "name": "get_weather",
        "arguments": '{"city":"Paris"}',
    }
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


async def test_tool_results_become_function_responses(wire: Wire) -> None:
    wire.on(CALL, json_reply(ANSWER))
    call = {
        "id": "call_7",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
    }
    request = {
        **HELLO,
        "messages": [
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_7", "content": '{"sky": "clear"}'},
            {"role": "tool", "tool_call_id": "call_7", "content": "also windy"},
        ],
    }
    async with router(gemini(wire.url(BASE))) as r:
        await r.achat(request)
    contents = wire.last.body["contents"]
    assert contents[1] == {
        "role": "model",
        "parts": [{"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}}],
    }
    assert contents[2] == {
        "role": "user",
        "parts": [
            {"functionResponse": {"name": "get_weather", "response": {"sky": "clear"}}},
            {"functionResponse": {"name": "get_weather", "response": {"content": "also windy"}}},
        ],
    }


async def test_blocked_prompt_is_content_blocked(wire: Wire) -> None:
    blocked = {
        "promptFeedback": {"blockReason": "SAFETY", "safetyRatings": []},
        "usageMetadata": {"promptTokenCount": 8, "totalTokenCount": 8},
        "modelVersion": "gemini-2.0-flash-001",
    }
    wire.on(CALL, json_reply(blocked))
    wire.on(STREAM_CALL, stream_reply(sse(blocked)))
    async with router(gemini(wire.url(BASE))) as r:
        attempt = await first_failure(r, HELLO)
    async with router(gemini(wire.url(BASE))) as r:
        streamed_attempt = await first_failure(r, HELLO, stream=True)
    for a in (attempt, streamed_attempt):
        assert a.reason is Reason.CONTENT_BLOCKED
        assert "blockReason SAFETY" in a.detail


async def test_answer_cut_by_safety_is_content_filter(wire: Wire) -> None:
    body = {
        "candidates": [
            {
                "content": {"parts": [{"text": "Partial"}], "role": "model"},
                "finishReason": "SAFETY",
            }
        ]
    }
    wire.on(CALL, json_reply(body))
    async with router(gemini(wire.url(BASE))) as r:
        result = await r.achat(HELLO)
    assert result.response["choices"][0]["finish_reason"] == "content_filter"


def google_error(code: int, status: str, message: str, reason: str | None = None) -> Any:
    details = []
    if reason:
        details = [
            {
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": reason,
                "domain": "googleapis.com",
            }
        ]
    return {"error": {"code": code, "message": message, "status": status, "details": details}}


@pytest.mark.parametrize(
    ("status", "body", "reason"),
    [
        (
            400,
            google_error(
                400,
                "INVALID_ARGUMENT",
                "API key not valid. Please pass a valid API key.",
                "API_KEY_INVALID",
            ),
            Reason.AUTH_FAILED,
        ),
        (
            429,
            google_error(
                429, "RESOURCE_EXHAUSTED", "Resource has been exhausted (e.g. check quota)."
            ),
            Reason.RATE_LIMITED,
        ),
        (
            400,
            google_error(400, "INVALID_ARGUMENT", "Request contains an invalid argument."),
            Reason.BAD_REQUEST,
        ),
        (
            403,
            google_error(403, "PERMISSION_DENIED", "Method doesn't allow unregistered callers."),
            Reason.AUTH_FAILED,
        ),
        (
            404,
            google_error(
                404, "NOT_FOUND", "models/gemini-nope is not found for API version v1beta"
            ),
            Reason.MODEL_UNAVAILABLE,
        ),
        (
            500,
            google_error(500, "INTERNAL", "An internal error has occurred."),
            Reason.SERVER_ERROR,
        ),
        (503, google_error(503, "UNAVAILABLE", "The model is overloaded."), Reason.SERVER_ERROR),
    ],
)
async def test_errors(wire: Wire, status: int, body: Any, reason: Reason) -> None:
    wire.on(CALL, json_reply(body, status))
    wire.on(STREAM_CALL, json_reply(body, status))
    for stream in (False, True):
        async with router(gemini(wire.url(BASE))) as r:
            attempt = await first_failure(r, HELLO, stream=stream)
        assert (attempt.reason, attempt.status) == (reason, status)


def test_pure_pieces() -> None:
    dialect = get("gemini")
    info = dialect.error_of(
        google_error(400, "INVALID_ARGUMENT", "API key not valid.", "API_KEY_INVALID")
    )
    assert info is not None
    assert (info.code, info.status) == ("API_KEY_INVALID", 401)
    info = dialect.error_of([google_error(429, "RESOURCE_EXHAUSTED", "quota")])
    assert info is not None
    assert (info.code, info.status) == ("RESOURCE_EXHAUSTED", 429)
    assert dialect.error_of(ANSWER) is None
    assert dialect.url("https://g/v1beta/models", "models/gemini-pro", True) == (
        "https://g/v1beta/models/gemini-pro:streamGenerateContent?alt=sse"
    )
    body = dialect.body(
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "What is this?"},
                        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                    ],
                }
            ],
            "max_tokens": 5,
            "response_format": {"type": "json_object"},
        },
        MODEL,
        False,
        "max_tokens",
    )
    assert body["contents"][0]["parts"][1] == {
        "inlineData": {"mimeType": "image/png", "data": "AAAA"}
    }
    assert body["max_tokens"] == 5  # a field other than maxOutputTokens goes top level
    assert body["generationConfig"] == {"responseMimeType": "application/json"}


# -- the other direction: a client speaking the Gemini API to the proxy ------------------------

SHELL_SCHEMA = {
    "type": "OBJECT",
    "properties": {"command": {"type": "STRING", "description": "The command."}},
    "required": ["command"],
}
GEMINI_CLI_REQUEST = {
    "contents": [
        {"role": "user", "parts": [{"text": "Run echo."}]},
        {
            "role": "model",
            "parts": [
                {"text": "Let me think.", "thought": True},
                {
                    "functionCall": {"name": "run_shell_command", "args": {"command": "echo hi"}},
                    "thoughtSignature": "c2lnbmVk",
                },
            ],
        },
        {
            "role": "user",
            "parts": [
                {
                    "functionResponse": {
                        "name": "run_shell_command",
                        "response": {"output": "hi"},
                    }
                }
            ],
        },
    ],
    "systemInstruction": {"role": "user", "parts": [{"text": "You are Gemini CLI."}]},
    "tools": [
        {
            "functionDeclarations": [
                {
                    "name": "run_shell_command",
                    "description": "Runs a command.",
                    "parametersJsonSchema": SHELL_SCHEMA,
                }
            ]
        }
    ],
    "generationConfig": {
        "temperature": 1,
        "topP": 0.95,
        "topK": 64,
        "thinkingConfig": {"includeThoughts": True, "thinkingLevel": "HIGH"},
    },
    "safetySettings": [],
}


def test_gemini_cli_request_is_read_as_chat() -> None:
    inbound = decode_request(GEMINI_CLI_REQUEST, "gemini-3.1-pro-preview", True)
    assert inbound.body == {
        "model": "gemini-3.1-pro-preview",
        "messages": [
            {"role": "system", "content": "You are Gemini CLI."},
            {"role": "user", "content": "Run echo."},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1_0",
                        "type": "function",
                        "function": {
                            "name": "run_shell_command",
                            "arguments": '{"command":"echo hi"}',
                        },
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1_0", "content": '{"output":"hi"}'},
        ],
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 1,
        "top_p": 0.95,
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "run_shell_command",
                    "parameters": {
                        "type": "object",
                        "properties": {
                            "command": {"type": "string", "description": "The command."}
                        },
                        "required": ["command"],
                    },
                    "description": "Runs a command.",
                },
            }
        ],
    }
    assert inbound.dropped == (
        "safetySettings",
        "thought",
        "thoughtSignature",
        "generationConfig.topK",
        "generationConfig.thinkingConfig",
    )
    ChatRequest.checked(inbound.body)


def test_ids_a_client_gave_are_kept_and_results_matched_by_id() -> None:
    request = {
        "contents": [
            {"role": "user", "parts": [{"text": "two"}]},
            {
                "role": "model",
                "parts": [
                    {"functionCall": {"id": "a1", "name": "f", "args": {}}},
                    {"functionCall": {"id": "b2", "name": "f", "args": {"x": 1}}},
                ],
            },
            {
                "role": "user",
                "parts": [
                    {"functionResponse": {"id": "b2", "name": "f", "response": {"r": 2}}},
                    {"functionResponse": {"id": "a1", "name": "f", "response": {"r": 1}}},
                    {"text": "and now?"},
                ],
            },
        ],
        "generationConfig": {
            "responseMimeType": "application/json",
            "responseSchema": {"type": "OBJECT", "properties": {"n": {"type": "INTEGER"}}},
        },
        "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["f"]}},
        "tools": [{"functionDeclarations": [{"name": "f"}]}, {"googleSearch": {}}],
    }
    inbound = decode_request(request, "m", False)
    messages = inbound.body["messages"]
    assert [c["id"] for c in messages[1]["tool_calls"]] == ["a1", "b2"]
    assert messages[2:] == [
        {"role": "tool", "tool_call_id": "b2", "content": '{"r":2}'},
        {"role": "tool", "tool_call_id": "a1", "content": '{"r":1}'},
        {"role": "user", "content": "and now?"},
    ]
    assert inbound.body["response_format"] == {
        "type": "json_schema",
        "json_schema": {
            "name": "response",
            "schema": {"type": "object", "properties": {"n": {"type": "integer"}}},
        },
    }
    assert inbound.body["tool_choice"] == {"type": "function", "function": {"name": "f"}}
    assert inbound.dropped == ("tools:googleSearch",)


@pytest.mark.parametrize(
    ("request_", "param"),
    [
        ({}, "contents"),
        ({"contents": []}, "contents"),
        ({"contents": [{"role": "user"}]}, "contents[0].parts"),
        ({"contents": [{"parts": [{"text": 5}]}]}, "contents[0].parts[0].text"),
        ({"contents": [{"parts": ["hi"]}]}, "contents[0].parts[0]"),
        (
            {"contents": [{"parts": [{"functionCall": {"args": {}}}]}]},
            "contents[0].parts[0].functionCall.name",
        ),
        ({"contents": [{"parts": []}], "generationConfig": {"topP": 2}}, "generationConfig.topP"),
        (
            {"contents": [{"parts": []}], "generationConfig": {"maxOutputTokens": 1.5}},
            "generationConfig.maxOutputTokens",
        ),
        ({"contents": [{"parts": []}], "tools": [{"functionDeclarations": [{}]}]}, "tools[0]"),
        ({"contents": [{"parts": []}], "systemInstruction": 3}, "systemInstruction"),
    ],
)
def test_bad_gemini_requests_name_the_field(request_: dict[str, Any], param: str) -> None:
    with pytest.raises(RequestError) as refused:
        decode_request(request_, "m", False)
    assert refused.value.param is not None
    assert refused.value.param.startswith(param)


def test_count_tokens_counts_what_the_chat_request_holds() -> None:
    short = {"contents": [{"parts": [{"text": "hello"}]}]}
    assert estimate_tokens(short) == estimate_tokens({"generateContentRequest": short})
    assert estimate_tokens(short) == 1 + MESSAGE_TOKENS  # a word, one message
    chinese = {"contents": [{"parts": [{"text": "你好世界"}]}]}
    assert estimate_tokens(chinese) == round(4 * 0.7) + MESSAGE_TOKENS
    asked = {"role": "user", "content": "hello"}
    assert estimate_tokens(short) == input_tokens({"messages": [asked]})


# -- round trips (hypothesis): chat → Gemini → chat keeps what both can say --------------------

CALLS = st.lists(
    st.builds(
        lambda n, a: {
            "id": "",
            "type": "function",
            "function": {"name": n, "arguments": orjson.dumps(a).decode()},
        },
        NAME,
        ARGS,
    ),
    max_size=2,
)


@st.composite
def conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Chat conversations Gemini can say: an optional system prompt, user turns (text, or
    text and an image), assistant turns (text and/or tool calls, each answered by a JSON
    object result); call ids are made when drawn, in order."""
    messages: list[dict[str, Any]] = []
    if draw(st.booleans()):
        messages.append({"role": "system", "content": draw(TEXT)})
    for _ in range(draw(st.integers(1, 3))):
        user: Any = draw(TEXT)
        if draw(st.booleans()):
            user = [{"type": "text", "text": user}, draw(IMAGE)]
        messages.append({"role": "user", "content": user})
        calls = [{**c, "id": f"id{len(messages)}_{n}"} for n, c in enumerate(draw(CALLS))]
        assistant: dict[str, Any] = {
            "role": "assistant",
            "content": draw(st.none() | TEXT) if calls else draw(TEXT),
        }
        if calls:
            assistant["tool_calls"] = calls
        messages.append(assistant)
        for call in calls:
            result = orjson.dumps({"output": draw(TEXT)}).decode()
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
    return messages


def by_order(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`messages` with each tool call id replaced by its place among the calls."""
    ids: dict[str, str] = {}
    out = []
    for message in messages:
        m = dict(message)
        if m.get("tool_calls"):
            m["tool_calls"] = [
                {**c, "id": ids.setdefault(c["id"], f"#{len(ids)}")} for c in m["tool_calls"]
            ]
        if m.get("role") == "tool":
            m["tool_call_id"] = ids[m["tool_call_id"]]
        out.append(m)
    return out


@given(
    messages=conversations(),
    choice=st.sampled_from(["auto", "required", "none", "function"]),
    cap=st.integers(1, 100_000),
    temperature=st.floats(0, 2),
    stop=st.lists(TEXT, max_size=2),
)
def test_request_round_trip(
    messages: list[dict[str, Any]], choice: str, cap: int, temperature: float, stop: list[str]
) -> None:
    tool = {
        "type": "function",
        "function": {
            "name": "f",
            "description": "d",
            "parameters": {"type": "object", "properties": {"x": {"type": "string"}}},
        },
    }
    chat: dict[str, Any] = {
        "model": MODEL,
        "messages": messages,
        "max_tokens": cap,
        "temperature": temperature,
        "tools": [tool],
        "tool_choice": {"type": "function", "function": {"name": "f"}}
        if choice == "function"
        else choice,
    }
    if stop:
        chat["stop"] = stop
    sent = get("gemini").body(chat, MODEL, False, "maxOutputTokens")
    back = decode_request(orjson.loads(orjson.dumps(sent)), MODEL, False)
    assert back.dropped == ()
    assert {**back.body, "messages": by_order(back.body["messages"])} == {
        **chat,
        "messages": by_order(messages),
    }


def renamed(message: dict[str, Any], prefix: str) -> dict[str, Any]:
    """`message` with its tool call ids prefixed (a conversation of its own)."""
    out = dict(message)
    if "tool_calls" in out:
        out["tool_calls"] = [{**c, "id": prefix + c["id"]} for c in out["tool_calls"]]
    if "tool_call_id" in out:
        out["tool_call_id"] = prefix + out["tool_call_id"]
    return out


@given(conversations(), conversations())
def test_a_longer_conversation_reads_as_the_same_prefix(
    first: list[dict[str, Any]], more: list[dict[str, Any]]
) -> None:
    dialect = get("gemini")
    later = [renamed(m, "later-") for m in more if m["role"] != "system"]
    before = dialect.body({"messages": first}, MODEL, False, "maxOutputTokens")
    after = dialect.body({"messages": first + later}, MODEL, False, "maxOutputTokens")
    shorter = decode_request(before, MODEL, False).body["messages"]
    longer = decode_request(after, MODEL, False).body["messages"]
    shared = len(shorter) - 1  # the last turn may be joined with the next one's tool results
    assert orjson.dumps(longer[:shared]) == orjson.dumps(shorter[:shared])


@st.composite
def answers(draw: st.DrawFn) -> dict[str, Any]:
    """Chat completions Gemini can say (tool call ids kept, as Gemini 3 sends them)."""
    calls = [{**c, "id": f"call_{n}"} for n, c in enumerate(draw(CALLS))]
    finish = "tool_calls" if calls else draw(st.sampled_from(["stop", "length", "content_filter"]))
    usage = completion.usage(draw(st.integers(0, 10_000)), draw(st.integers(0, 10_000)))
    assert usage is not None
    cached = draw(st.integers(0, 10))
    if cached:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    message = completion.message(
        draw(st.none() | TEXT) if calls else draw(TEXT),
        tool_calls=calls,
        reasoning=draw(st.none() | TEXT),
    )
    return completion.completion(
        id="resp-1",
        model="deepseek-chat",
        created=1,
        choices=[completion.choice(message, finish)],
        usage=usage,
    )


CTX = Context("deepseek-chat", 1, Shape("candidates", "content.parts.0.text"))


@given(answers())
def test_answer_round_trip(answer: dict[str, Any]) -> None:
    rendered = encode_answer(answer)
    genai_types.GenerateContentResponse.model_validate(rendered)
    back = get("gemini").normalize(orjson.loads(orjson.dumps(rendered)), CTX)
    assert back["choices"][0]["message"] == answer["choices"][0]["message"]
    assert back["choices"][0]["finish_reason"] == answer["choices"][0]["finish_reason"]
    assert back["usage"] == answer["usage"]
    assert back["id"] == "resp-1"
    assert back["model"] == "deepseek-chat"


@given(answers(), st.integers(1, 6))
def test_stream_round_trip(answer: dict[str, Any], size: int) -> None:
    events = StreamEncoder()
    sent = [o for c in chat_stream(answer, size) for o in events.feed(c)] + events.end()
    for obj in sent:
        genai_types.GenerateContentResponse.model_validate(obj)
    decoder = get("gemini").decoder(CTX)
    chunks = [c for obj in sent for c in decoder.feed(None, orjson.dumps(obj))]
    message = answer["choices"][0]["message"]
    text = "".join(d.get("content") or "" for c in chunks for d in [c["choices"][0]["delta"]])
    thought = "".join(
        d.get("reasoning_content") or "" for c in chunks for d in [c["choices"][0]["delta"]]
    )
    calls = [t for c in chunks for t in c["choices"][0]["delta"].get("tool_calls") or ()]
    assert text == (message.get("content") or "")
    assert thought == (message.get("reasoning_content") or "")
    assert [(t["id"], t["function"]) for t in calls] == [
        (t["id"], t["function"]) for t in message.get("tool_calls") or ()
    ]
    assert chunks[-1]["choices"][0]["finish_reason"] == answer["choices"][0]["finish_reason"]
    assert chunks[-1]["usage"] == answer["usage"]


# -- whatever the Gemini checks accept, the chat request it becomes passes the chat checks ----

_words = st.text(max_size=6)
_part = st.one_of(
    st.builds(lambda t: {"text": t}, _words),
    st.builds(lambda t: {"text": t, "thought": True}, _words),
    st.just({"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}}),
    st.just({"inlineData": {"mimeType": "application/pdf", "data": "JVBERi0="}}),
    st.just({"fileData": {"mimeType": "image/png", "fileUri": "https://x.example/a.png"}}),
    st.builds(
        lambda n, a: {"functionCall": {"name": n, "args": a}},
        st.text(min_size=1, max_size=6),
        st.dictionaries(_words, _words, max_size=2),
    ),
    st.builds(
        lambda n, r: {"functionResponse": {"name": n, "response": r}},
        _words,
        st.dictionaries(_words, _words, max_size=2),
    ),
)
_content = st.fixed_dictionaries(
    {"parts": st.lists(_part, max_size=3)},
    optional={"role": st.sampled_from(["user", "model", "function"])},
)
gemini_requests = st.fixed_dictionaries(
    {"contents": st.lists(_content, min_size=1, max_size=4)},
    optional={
        "systemInstruction": _words | st.builds(lambda t: {"parts": [{"text": t}]}, _words),
        "generationConfig": st.fixed_dictionaries(
            {},
            optional={
                "temperature": st.floats(0, 2),
                "topP": st.floats(0, 1),
                "topK": st.integers(0, 100),
                "maxOutputTokens": st.integers(1, 2**31 - 1),
                "stopSequences": st.lists(_words, max_size=2),
                "candidateCount": st.integers(1, 4),
                "responseMimeType": st.sampled_from(
                    ["application/json", "text/plain", "text/x.enum"]
                ),
                "responseSchema": st.just({"type": "OBJECT"}),
            },
        ),
        "tools": st.lists(
            st.builds(
                lambda n: {"functionDeclarations": [{"name": n, "parameters": {"type": "OBJECT"}}]},
                st.text(min_size=1, max_size=6),
            ),
            max_size=2,
        ),
        "toolConfig": st.sampled_from(
            [
                {"functionCallingConfig": {"mode": m}}
                for m in ("AUTO", "ANY", "NONE", "VALIDATED", "MODE_UNSPECIFIED")
            ]
        ),
    },
)


@given(request=gemini_requests, stream=st.booleans())
def test_what_the_gemini_checks_accept_the_chat_checks_accept(
    request: dict[str, Any], stream: bool
) -> None:
    ChatRequest.parse(decode_request(request, "m", stream).body)
