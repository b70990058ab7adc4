"""OpenAI format quirks of DeepSeek: `: keep-alive` lines and blank lines before a body."""

from __future__ import annotations

from collections.abc import AsyncIterator

import orjson
import pytest

from .conftest import CHUNK, COMPLETION, assert_valid
from .upstream import chunk, completion
from .wire import Wire, provider, raw_reply, router, sse, stream_reply, streamed, text

PATH = "/chat/completions"
HELLO = {"model": "deepseek-chat", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
async def wire() -> AsyncIterator[Wire]:
    async with Wire.running() as w:
        yield w


async def test_blank_lines_before_a_body(wire: Wire) -> None:
    # Under load DeepSeek keeps a non-stream connection alive with blank lines.
    body = b"\n\n\r\n\n" + orjson.dumps(completion("hello after the wait", "deepseek-chat"))
    async with router(provider("ds", wire.on(PATH, raw_reply(body)), "openai")) as r:
        result = await r.achat(HELLO)
    assert_valid(COMPLETION, result.response)
    assert result.response["choices"][0]["message"]["content"] == "hello after the wait"


async def test_keep_alive_comments_in_a_stream(wire: Wire) -> None:
    pieces = (
        "\n",
        ": keep-alive\n\n",
        sse(chunk(role=True)),
        ": keep-alive\n\n",
        ": keep-alive\n\n",
        sse(chunk("hello "), chunk("there")),
        ": keep-alive\n\n",
        sse(chunk(finish="stop")),
        sse("[DONE]"),
    )
    async with router(provider("ds", wire.on(PATH, stream_reply(*pieces)), "openai")) as r:
        chunks = await streamed(r, HELLO)
    for c in chunks:
        assert_valid(CHUNK, c)
    assert text(chunks) == "hello there"
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
