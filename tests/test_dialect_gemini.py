"""Google Gemini generateContent: wire samples through a loopback server and the Router."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from agent_reach import Reason, StreamInterrupted
from agent_reach.dialects import get

from .conftest import CHUNK, COMPLETION, assert_valid
from .wire import (
    KEY,
    Wire,
    first_failure,
    json_reply,
    provider,
    router,
    sse,
    stream_reply,
    streamed,
    text,
)

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
