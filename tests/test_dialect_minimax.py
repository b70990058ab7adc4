"""Minimax v1 and v2: wire samples through a loopback server and the Router."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from agent_reach import Reason, StreamInterrupted
from agent_reach.dialects import get

from .conftest import CHUNK, COMPLETION, assert_valid
from .fakes.shapes import sse
from .fakes.wire import (
    Wire,
    first_failure,
    json_reply,
    provider,
    router,
    stream_reply,
    streamed,
    text,
)

V1 = "/v1/text/chatcompletion"
V2 = "/v1/text/chatcompletion_v2"
HELLO = {
    "model": "abab5.5-chat",
    "messages": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "hi"},
    ],
}
OK = {"status_code": 0, "status_msg": ""}

V1_ANSWER = {
    "created": 1_700_000_000,
    "model": "abab5.5-chat",
    "reply": "Hello there",
    "choices": [
        {"finish_reason": "stop", "messages": [{"sender_type": "BOT", "text": "Hello there"}]}
    ],
    "usage": {"total_tokens": 191},
    "input_sensitive": False,
    "output_sensitive": False,
    "id": "0106b3bc6f3a4a1b9a9f2a0d1a2b3c4d",
    "base_resp": OK,
}

V2_ANSWER = {
    "id": "04ecb5d9b1921ae0fb0e8da9017a5474",
    "object": "chat.completion",
    "created": 1_700_000_000,
    "model": "MiniMax-M1",
    "choices": [
        {
            "index": 0,
            "finish_reason": "stop",
            "message": {
                "role": "assistant",
                "content": "Hello there",
                "reasoning_content": "The user greets me.",
            },
        }
    ],
    "usage": {"prompt_tokens": 10, "completion_tokens": 20, "total_tokens": 30},
    "base_resp": OK,
}


def v1_event(delta: str, **extra: Any) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": 0, "delta": delta}
    if "finish_reason" in extra:
        choice["finish_reason"] = extra.pop("finish_reason")
    return {
        "created": 1_700_000_000,
        "model": "abab5.5-chat",
        "reply": "",
        "choices": [choice],
        "request_id": "req-v1",
        "base_resp": OK,
        **extra,
    }


V1_STREAM = sse(
    v1_event("Hel"),
    v1_event("lo "),
    v1_event("there", finish_reason="stop", reply="Hello there", usage={"total_tokens": 20}),
)


def v2_chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chunk-v2",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": "MiniMax-M1",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


V2_STREAM = sse(
    v2_chunk({"role": "assistant", "reasoning_content": "The user greets me."}),
    v2_chunk({"content": "Hello "}),
    v2_chunk({"content": "there"}, "stop"),
    {**V2_ANSWER, "id": "chunk-v2"},  # the closing event repeats the whole answer
)


@pytest.fixture
async def wire() -> AsyncIterator[Wire]:
    async with Wire.running() as w:
        yield w


def minimax(url: str, **fields: Any) -> dict[str, Any]:
    return provider("mm", url, "minimax", **fields)


# -- v1 ---------------------------------------------------------------------------------------


async def test_v1_answer_is_normalized(wire: Wire) -> None:
    async with router(minimax(wire.on(V1, json_reply(V1_ANSWER)))) as r:
        result = await r.achat(HELLO)
    resp = result.response
    assert_valid(COMPLETION, resp)
    assert resp["choices"][0]["message"]["content"] == "Hello there"
    assert resp["choices"][0]["finish_reason"] == "stop"
    assert resp["model"] == "abab5.5-chat"
    assert resp["created"] == 1_700_000_000
    assert resp["usage"] == {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 191}


@pytest.mark.parametrize(
    "body",
    [
        {**V1_ANSWER, "choices": [{"text": "Hello there", "index": 0, "finish_reason": "stop"}]},
        {**V1_ANSWER, "choices": []},  # `reply` is accepted
    ],
)
async def test_v1_older_shapes(wire: Wire, body: dict[str, Any]) -> None:
    async with router(minimax(wire.on(V1, json_reply(body)))) as r:
        result = await r.achat(HELLO)
    assert_valid(COMPLETION, result.response)
    assert result.response["choices"][0]["message"]["content"] == "Hello there"


async def test_v1_output_sensitive_is_content_filter(wire: Wire) -> None:
    body = {**V1_ANSWER, "output_sensitive": True}
    async with router(minimax(wire.on(V1, json_reply(body)))) as r:
        result = await r.achat(HELLO)
    assert result.response["choices"][0]["finish_reason"] == "content_filter"


async def test_v1_request_body(wire: Wire) -> None:
    url = wire.on(V1, json_reply(V1_ANSWER)) + "?GroupId=1234"
    request = {
        **HELLO,
        "messages": [
            *HELLO["messages"],
            {"role": "assistant", "content": "Hello."},
            {"role": "user", "content": [{"type": "text", "text": "again"}]},
        ],
        "max_tokens": 256,
        "temperature": 0,
        "top_p": 0.9,
    }
    async with router(minimax(url)) as r:
        await r.achat(request)
    sent = wire.last
    assert sent.query == {"GroupId": "1234"}
    assert sent.body == {
        "model": "abab5.5-chat",
        "messages": [
            {"sender_type": "USER", "text": "hi"},
            {"sender_type": "BOT", "text": "Hello."},
            {"sender_type": "USER", "text": "again"},
        ],
        "prompt": "You are terse.",
        "role_meta": {"user_name": "user", "bot_name": "assistant"},
        "stream": False,
        "tokens_to_generate": 256,
        "temperature": 0.01,  # Minimax wants (0, 1]
        "top_p": 0.9,
    }


async def test_v1_stream(wire: Wire) -> None:
    async with router(minimax(wire.on(V1, stream_reply(V1_STREAM)))) as r:
        chunks = await streamed(r, HELLO)
    for c in chunks:
        assert_valid(CHUNK, c)
    assert text(chunks) == "Hello there"
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["usage"]["total_tokens"] == 20
    assert wire.last.body["stream"] is True
    assert wire.last.body["use_standard_sse"] is True


async def test_v1_stream_whose_last_event_repeats_the_whole_text(wire: Wire) -> None:
    def event(piece: str, **extra: Any) -> dict[str, Any]:
        choice = {"messages": [{"sender_type": "BOT", "text": piece}], **extra}
        return {"model": "abab5.5-chat", "reply": "", "choices": [choice], "base_resp": OK}

    body = sse(event("Hello "), event("there"), event("Hello there", finish_reason="stop"))
    async with router(minimax(wire.on(V1, stream_reply(body)))) as r:
        chunks = await streamed(r, HELLO)
    assert text(chunks) == "Hello there"


async def test_v1_stream_cut_before_the_last_event(wire: Wire) -> None:
    body = sse(v1_event("Hel"), v1_event("lo"))
    async with router(minimax(wire.on(V1, stream_reply(body)))) as r:
        with pytest.raises(StreamInterrupted):
            await streamed(r, HELLO)


# -- v2 ---------------------------------------------------------------------------------------


async def test_v2_answer_is_normalized_with_reasoning(wire: Wire) -> None:
    async with router(minimax(wire.on(V2, json_reply(V2_ANSWER)))) as r:
        result = await r.achat(HELLO)
    resp = result.response
    assert_valid(COMPLETION, resp)
    msg = resp["choices"][0]["message"]
    assert msg["content"] == "Hello there"
    assert msg["reasoning_content"] == "The user greets me."
    assert resp["usage"] == {"prompt_tokens": 10, "completion_tokens": 20, "total_tokens": 30}
    assert resp["id"] == V2_ANSWER["id"]


@pytest.mark.parametrize("done", [False, True])
async def test_v2_stream_does_not_repeat_the_closing_answer(wire: Wire, done: bool) -> None:
    body = V2_STREAM + (sse("[DONE]") if done else b"")
    async with router(minimax(wire.on(V2, stream_reply(body)))) as r:
        chunks = await streamed(r, HELLO)
    for c in chunks:
        assert_valid(CHUNK, c)
    assert text(chunks) == "Hello there"
    assert {c["model"] for c in chunks} == {"MiniMax-M1"}
    assert text(chunks, "reasoning_content") == "The user greets me."
    finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert finishes.count("stop") == 1
    assert chunks[-1]["usage"]["total_tokens"] == 30


async def test_v2_closing_event_alone_gives_the_answer(wire: Wire) -> None:
    body = sse(v2_chunk({"role": "assistant"}), V2_ANSWER)
    async with router(minimax(wire.on(V2, stream_reply(body)))) as r:
        chunks = await streamed(r, HELLO)
    assert text(chunks) == "Hello there"
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_v2_is_chosen_by_the_endpoint_path() -> None:
    dialect = get("minimax")
    v2 = dialect.for_endpoint("https://api.minimax.chat/v1/text/chatcompletion_v2")
    v1 = dialect.for_endpoint("https://api.minimax.chat/v1/text/chatcompletion?GroupId=1")
    assert v1.body(HELLO, "abab5.5-chat", False, "tokens_to_generate")["messages"][0] == {
        "sender_type": "USER",
        "text": "hi",
    }
    body = v2.body(
        {**HELLO, "max_tokens": 64, "temperature": 1.5}, "MiniMax-M1", True, "tokens_to_generate"
    )
    assert body["messages"] == HELLO["messages"]
    assert body["max_completion_tokens"] == 64
    assert "tokens_to_generate" not in body
    assert body["temperature"] == 1.0
    assert body["stream"] is True


async def test_v2_request_body_through_the_router(wire: Wire) -> None:
    async with router(minimax(wire.on(V2, json_reply(V2_ANSWER)))) as r:
        await r.achat({**HELLO, "max_tokens": 64})
    sent = wire.last.body
    assert sent["messages"] == HELLO["messages"]
    assert sent["max_completion_tokens"] == 64


# -- errors: inside HTTP 200 ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        (1004, Reason.AUTH_FAILED),
        (2049, Reason.AUTH_FAILED),
        (1002, Reason.RATE_LIMITED),
        (1008, Reason.QUOTA_EXHAUSTED_UPSTREAM),  # insufficient balance
        (1039, Reason.RATE_LIMITED),
        (2013, Reason.BAD_REQUEST),
        (1026, Reason.CONTENT_BLOCKED),
        (1027, Reason.CONTENT_BLOCKED),
        (1000, Reason.SERVER_ERROR),
        (1024, Reason.SERVER_ERROR),
    ],
)
@pytest.mark.parametrize("path", [V1, V2])
async def test_errors_inside_200(wire: Wire, path: str, code: int, reason: Reason) -> None:
    body = {"id": "x", "choices": None, "base_resp": {"status_code": code, "status_msg": "nope"}}
    for stream in (False, True):  # a stream request gets the same JSON error
        async with router(minimax(wire.on(path, json_reply(body)))) as r:
            attempt = await first_failure(r, HELLO, stream=stream)
        assert (attempt.reason, attempt.status) == (reason, 200)
        assert f"({code})" in attempt.detail


async def test_error_event_in_a_stream(wire: Wire) -> None:
    body = sse(v1_event("", base_resp={"status_code": 1002, "status_msg": "rate limit"}))
    async with router(minimax(wire.on(V1, stream_reply(body)))) as r:
        attempt = await first_failure(r, HELLO, stream=True)
    assert attempt.reason is Reason.RATE_LIMITED


async def test_http_errors(wire: Wire) -> None:
    body = {"base_resp": {"status_code": 1004, "status_msg": "login fail"}}
    async with router(minimax(wire.on(V1, json_reply(body, 401)))) as r:
        attempt = await first_failure(r, HELLO)
    assert (attempt.reason, attempt.status) == (Reason.AUTH_FAILED, 401)
