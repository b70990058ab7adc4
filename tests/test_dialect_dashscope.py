"""DashScope native: wire samples of PROVIDERS.md through a loopback server and the Router."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from agent_reach import Reason
from agent_reach.dialects import get

from .conftest import CHUNK, COMPLETION, assert_valid
from .fakes.wire import (
    KEY,
    Reply,
    Seen,
    Wire,
    first_failure,
    json_reply,
    provider,
    router,
    streamed,
    text,
)

PATH = "/api/v1/services/aigc/text-generation/generation"
HELLO = {"model": "qwen-plus", "messages": [{"role": "user", "content": "你好"}]}

ANSWER = {
    "output": {
        "choices": [
            {"finish_reason": "stop", "message": {"role": "assistant", "content": "您好！"}}
        ]
    },
    "usage": {"total_tokens": 33, "output_tokens": 19, "input_tokens": 14},
    "request_id": "2fa6a6a2-0000-4b7e-9c1d-6c4b5a0c1a11",
}


def event(n: int, content: str, finish: str, output_tokens: int) -> str:
    data = {
        "output": {
            "choices": [
                {"message": {"content": content, "role": "assistant"}, "finish_reason": finish}
            ]
        },
        "usage": {
            "total_tokens": 14 + output_tokens,
            "output_tokens": output_tokens,
            "input_tokens": 14,
        },
        "request_id": "req-1",
    }
    return f"id:{n}\nevent:result\n:HTTP_STATUS/200\ndata:{orjson.dumps(data).decode()}\n\n"


STREAM = (
    event(1, "你", "null", 1),
    event(2, "好", "null", 2),
    event(3, "！", "stop", 19),
)


def native(seen: Seen) -> Reply:
    """Like DashScope: SSE only when the request has `X-DashScope-SSE: enable`."""
    if seen.headers.get("X-DashScope-SSE") == "enable":
        return Reply(content_type="text/event-stream", pieces=tuple(s.encode() for s in STREAM))
    return json_reply(ANSWER)


@pytest.fixture
async def wire() -> AsyncIterator[Wire]:
    async with Wire.running() as w:
        yield w


def dashscope(url: str, **fields: Any) -> dict[str, Any]:
    return provider("qwen", url, "dashscope", **fields)


async def test_answer_is_normalized(wire: Wire) -> None:
    async with router(dashscope(wire.on(PATH, json_reply(ANSWER)))) as r:
        result = await r.achat(HELLO)
    resp = result.response
    assert_valid(COMPLETION, resp)
    assert resp["id"] == ANSWER["request_id"]
    assert resp["model"] == "qwen-plus"  # DashScope's body names no model: the one asked for
    assert resp["choices"][0]["message"]["content"] == "您好！"
    assert resp["choices"][0]["finish_reason"] == "stop"
    assert resp["usage"] == {"prompt_tokens": 14, "completion_tokens": 19, "total_tokens": 33}


async def test_legacy_text_answer(wire: Wire) -> None:
    legacy = {"output": {"text": "旧格式", "finish_reason": "stop"}, "request_id": "r"}
    async with router(dashscope(wire.on(PATH, json_reply(legacy)))) as r:
        result = await r.achat(HELLO)
    assert_valid(COMPLETION, result.response)
    assert result.response["choices"][0]["message"]["content"] == "旧格式"


async def test_reasoning_and_tool_calls(wire: Wire) -> None:
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "杭州"}'},
    }
    body = {
        "output": {
            "choices": [
                {
                    "finish_reason": "tool_calls",
                    "message": {
                        "role": "assistant",
                        "content": "",
                        "reasoning_content": "需要查天气",
                        "tool_calls": [call],
                    },
                }
            ]
        },
        "usage": {"input_tokens": 5, "output_tokens": 7, "total_tokens": 12},
    }
    async with router(dashscope(wire.on(PATH, json_reply(body)))) as r:
        result = await r.achat(HELLO)
    msg = result.response["choices"][0]["message"]
    assert_valid(COMPLETION, result.response)
    assert msg["tool_calls"] == [call]
    assert msg["reasoning_content"] == "需要查天气"
    assert result.response["choices"][0]["finish_reason"] == "tool_calls"


async def test_request_body_nests_input_and_parameters(wire: Wire) -> None:
    async with router(dashscope(wire.on(PATH, json_reply(ANSWER)))) as r:
        await r.achat(
            {
                **HELLO,
                "messages": [{"role": "system", "content": "简洁"}, *HELLO["messages"]],
                "max_tokens": 512,
                "temperature": 0.7,
                "stop": "。",
                "seed": 7,
            }
        )
    sent = wire.last
    assert sent.headers["Authorization"] == f"Bearer {KEY}"
    assert "X-DashScope-SSE" not in sent.headers
    assert sent.body == {
        "model": "qwen-plus",
        "input": {
            "messages": [
                {"role": "system", "content": "简洁"},
                {"role": "user", "content": "你好"},
            ]
        },
        "parameters": {
            "result_format": "message",
            "temperature": 0.7,
            "seed": 7,
            "stop": ["。"],
            "max_tokens": 512,
        },
    }


async def test_stream_is_incremental_and_ends_without_done(wire: Wire) -> None:
    # The provider streams on this path whatever the headers (what DashScope does once it
    # sees `X-DashScope-SSE: enable`), so the SSE decoder is exercised end to end.
    url = wire.on(
        "/sse" + PATH,
        Reply(content_type="text/event-stream", pieces=tuple(s.encode() for s in STREAM)),
    )
    async with router(dashscope(url)) as r:
        chunks = await streamed(r, HELLO)
    for c in chunks:
        assert_valid(CHUNK, c)
    assert text(chunks) == "你好！"
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None, None, "stop"]
    assert chunks[-1]["usage"] == {"prompt_tokens": 14, "completion_tokens": 19, "total_tokens": 33}
    assert "usage" not in chunks[0]  # cumulative usage is sent once, at the end
    assert wire.last.body["parameters"]["incremental_output"] is True


async def test_stream_request_answers_with_the_text(wire: Wire) -> None:
    # Whether or not the engine sends the stream header yet, the caller gets the answer:
    # SSE with it, a whole JSON answer replayed as chunks without it.
    async with router(dashscope(wire.on(PATH, native))) as r:
        chunks = await streamed(r, HELLO)
    for c in chunks:
        assert_valid(CHUNK, c)
    assert text(chunks) in ("你好！", "您好！")


async def test_stream_request_sends_the_sse_header(wire: Wire) -> None:
    async with router(dashscope(wire.on(PATH, native))) as r:
        chunks = await streamed(r, HELLO)
        assert wire.last.headers.get("X-DashScope-SSE") == "enable"
        assert text(chunks) == "你好！"
        await r.achat(HELLO)
        assert "X-DashScope-SSE" not in wire.last.headers


@pytest.mark.parametrize(
    ("status", "code", "reason"),
    [
        (401, "InvalidApiKey", Reason.AUTH_FAILED),
        (429, "Throttling.RateQuota", Reason.RATE_LIMITED),
        (429, "Throttling.AllocationQuota", Reason.RATE_LIMITED),
        (400, "InvalidParameter", Reason.BAD_REQUEST),
        (400, "DataInspectionFailed", Reason.CONTENT_BLOCKED),
        (500, "InternalError", Reason.SERVER_ERROR),
        (200, "InvalidApiKey", Reason.AUTH_FAILED),  # an error body with a 200
        (200, "Throttling.RateQuota", Reason.RATE_LIMITED),
        (200, "Arrearage", Reason.QUOTA_EXHAUSTED_UPSTREAM),  # overdue: a used-up balance
    ],
)
async def test_errors(wire: Wire, status: int, code: str, reason: Reason) -> None:
    body = {"code": code, "message": f"{code} happened", "request_id": "r-1"}
    async with router(dashscope(wire.on(PATH, json_reply(body, status)))) as r:
        attempt = await first_failure(r, HELLO)
    assert (attempt.reason, attempt.status) == (reason, status)
    assert code in attempt.detail or f"{code} happened" in attempt.detail


async def test_error_event_in_a_stream(wire: Wire) -> None:
    error = (
        "id:1\nevent:error\n:HTTP_STATUS/429\n"
        'data:{"code":"Throttling.RateQuota","message":"Requests rate limit exceeded",'
        '"request_id":"r"}\n\n'
    )
    url = wire.on(PATH, Reply(content_type="text/event-stream", pieces=(error.encode(),)))
    async with router(dashscope(url)) as r:
        attempt = await first_failure(r, HELLO, stream=True)
    assert attempt.reason is Reason.RATE_LIMITED


def test_pure_pieces() -> None:
    dialect = get("dashscope")
    assert dialect.stream_headers() == {"X-DashScope-SSE": "enable"}
    assert dialect.error_of(ANSWER) is None
    info = dialect.error_of({"code": "InvalidApiKey", "message": "Invalid API-key provided."})
    assert info is not None
    assert (info.code, info.status) == ("InvalidApiKey", 401)
    body = dialect.body(HELLO, "qwen-max", True, "max_new_tokens")
    assert body["parameters"]["incremental_output"] is True
    assert "stream" not in body  # DashScope streams by header, not by body
    body = dialect.body({**HELLO, "max_tokens": 9}, "qwen-max", False, "max_new_tokens")
    assert body["max_new_tokens"] == 9  # a non-default field goes to the top level
    assert "max_tokens" not in body["parameters"]
