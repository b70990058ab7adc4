"""Baidu ERNIE (legacy `result` API): wire samples through a loopback server and the Router."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from agent_reach import Reason, StreamInterrupted
from agent_reach.dialects import get

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

PATH = "/rpc/2.0/ai_custom/v1/wenxinworkshop/chat/completions_pro"
HELLO = {"model": "ernie-4.0", "messages": [{"role": "user", "content": "你好"}]}
USAGE = {"prompt_tokens": 3, "completion_tokens": 8, "total_tokens": 11}

ANSWER = {
    "id": "as-bcmt5ct4ie",
    "object": "chat.completion",
    "created": 1_700_000_000,
    "result": "你好，有什么可以帮你？",
    "is_truncated": False,
    "need_clear_history": False,
    "finish_reason": "normal",
    "usage": USAGE,
}


def piece(n: int, result: str, end: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": "as-stream",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "sentence_id": n,
        "is_end": end,
        "is_truncated": False,
        "result": result,
        "need_clear_history": False,
    }
    if end:
        out["finish_reason"] = "normal"
        out["usage"] = USAGE
    return out


STREAM = sse(piece(0, "你好，"), piece(1, "有什么"), piece(2, "可以帮你？", end=True))


@pytest.fixture
async def wire() -> AsyncIterator[Wire]:
    async with Wire.running() as w:
        yield w


def ernie(url: str, **fields: Any) -> dict[str, Any]:
    return provider("ernie", url, "ernie", auth_header="", auth_query="access_token", **fields)


async def test_answer_is_normalized(wire: Wire) -> None:
    async with router(ernie(wire.on(PATH, json_reply(ANSWER)))) as r:
        result = await r.achat(HELLO)
    resp = result.response
    assert_valid(COMPLETION, resp)
    assert resp["id"] == "as-bcmt5ct4ie"
    assert resp["model"] == "ernie-4.0"
    assert resp["choices"][0]["message"]["content"] == "你好，有什么可以帮你？"
    assert resp["choices"][0]["finish_reason"] == "stop"  # "normal"
    assert resp["usage"] == USAGE


async def test_request_body_and_url(wire: Wire) -> None:
    wire.on("/chat/ernie-speed-128k", json_reply(ANSWER))
    request = {
        "model": "ernie-speed-128k",
        "messages": [
            {"role": "system", "content": "你是助手"},
            {"role": "user", "content": "第一句"},
            {"role": "user", "content": "第二句"},
            {"role": "assistant", "content": "好的"},
            {"role": "user", "content": "继续"},
        ],
        "max_tokens": 300,
        "temperature": 0,
        "stop": ["。"],
    }
    async with router(ernie(wire.url("/chat/{model}"))) as r:
        await r.achat(request)
    sent = wire.last
    assert sent.path == "/chat/ernie-speed-128k"  # the model goes into the URL
    assert sent.query == {"access_token": KEY}
    assert "Authorization" not in sent.headers
    assert sent.body == {
        "system": "你是助手",
        "messages": [
            {"role": "user", "content": "第一句\n第二句"},  # ERNIE wants alternating turns
            {"role": "assistant", "content": "好的"},
            {"role": "user", "content": "继续"},
        ],
        "stream": False,
        "temperature": 0.01,  # ERNIE wants (0, 1]
        "stop": ["。"],
        "max_output_tokens": 300,
    }


async def test_stream_ends_at_is_end(wire: Wire) -> None:
    async with router(ernie(wire.on(PATH, stream_reply(STREAM)))) as r:
        chunks = await streamed(r, HELLO)
    for c in chunks:
        assert_valid(CHUNK, c)
    assert text(chunks) == "你好，有什么可以帮你？"
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None, None, "stop"]
    assert chunks[-1]["usage"] == USAGE
    assert wire.last.body["stream"] is True


async def test_stream_without_is_end_is_cut(wire: Wire) -> None:
    body = sse(piece(0, "你好，"), piece(1, "有什么"))
    async with router(ernie(wire.on(PATH, stream_reply(body)))) as r:
        with pytest.raises(StreamInterrupted) as info:
            await streamed(r, HELLO)
    assert info.value.attempts[-1].reason is Reason.SERVER_ERROR


async def test_function_call_becomes_a_tool_call(wire: Wire) -> None:
    body = {
        **ANSWER,
        "result": "",
        "finish_reason": "function_call",
        "function_call": {
            "name": "get_weather",
            "arguments": '{"city": "北京"}',
            "thoughts": "查询天气",
        },
    }
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]
    async with router(ernie(wire.on(PATH, json_reply(body)))) as r:
        result = await r.achat({**HELLO, "tools": tools})
    assert_valid(COMPLETION, result.response)
    choice = result.response["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] is None
    call = choice["message"]["tool_calls"][0]
    assert call["function"] == {"name": "get_weather", "arguments": '{"city": "北京"}'}
    assert wire.last.body["functions"] == [
        {"name": "get_weather", "description": "", "parameters": {}}
    ]


async def test_need_clear_history_is_content_filter(wire: Wire) -> None:
    body = {**ANSWER, "need_clear_history": True, "ban_round": -1}
    async with router(ernie(wire.on(PATH, json_reply(body)))) as r:
        result = await r.achat(HELLO)
    assert result.response["choices"][0]["finish_reason"] == "content_filter"


@pytest.mark.parametrize(
    ("code", "message", "reason"),
    [
        (110, "Access token invalid or no longer valid", Reason.AUTH_FAILED),
        (111, "Access token expired", Reason.AUTH_FAILED),
        (17, "Open api daily request limit reached", Reason.RATE_LIMITED),
        (18, "Open api qps request limit reached", Reason.RATE_LIMITED),
        (336501, "Rate limit reached for RPM", Reason.RATE_LIMITED),
        (336003, "the first role must be user", Reason.BAD_REQUEST),
        (336007, "the max length of current question is 2000", Reason.BAD_REQUEST),
        (336100, "try again later", Reason.SERVER_ERROR),
        (1, "Unknown error", Reason.SERVER_ERROR),
    ],
)
async def test_errors_inside_200(wire: Wire, code: int, message: str, reason: Reason) -> None:
    body = {"error_code": code, "error_msg": message}
    for stream in (False, True):  # a stream request gets the same JSON error
        async with router(ernie(wire.on(PATH, json_reply(body)))) as r:
            attempt = await first_failure(r, HELLO, stream=stream)
        assert (attempt.reason, attempt.status) == (reason, 200)
        assert f"({code})" in attempt.detail


async def test_error_event_in_a_stream(wire: Wire) -> None:
    body = sse({"error_code": 18, "error_msg": "Open api qps request limit reached"})
    async with router(ernie(wire.on(PATH, stream_reply(body)))) as r:
        attempt = await first_failure(r, HELLO, stream=True)
    assert attempt.reason is Reason.RATE_LIMITED


def test_pure_pieces() -> None:
    dialect = get("ernie")
    assert dialect.error_of(ANSWER) is None
    assert dialect.url("https://h/chat/{model}", "ernie 4", False) == "https://h/chat/ernie%204"
    assert dialect.url("https://h/chat/completions", "x", True) == "https://h/chat/completions"
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    body = dialect.body(
        {
            "messages": [
                {"role": "user", "content": "q"},
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "c1", "content": '{"ok": true}'},
            ]
        },
        "m",
        False,
        "max_output_tokens",
    )
    assert body["messages"][1:] == [
        {"role": "assistant", "content": "", "function_call": {"name": "f", "arguments": "{}"}},
        {"role": "function", "name": "f", "content": '{"ok": true}'},
    ]
