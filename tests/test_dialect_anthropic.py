"""Anthropic Messages API: wire samples through a loopback server and the Router."""

from __future__ import annotations

import json
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
    stream_reply,
    streamed,
    text,
)

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
