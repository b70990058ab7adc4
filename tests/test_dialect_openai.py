"""OpenAI format quirks of DeepSeek: `: keep-alive` lines and blank lines before a body."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from agent_reach import Reason
from agent_reach.completion import malformed
from agent_reach.dialects import Context, Shape, Verbatim, openai

from .conftest import CHUNK, COMPLETION, assert_valid
from .upstream import chunk, completion, openai_chunk
from .wire import (
    Wire,
    first_failure,
    json_reply,
    provider,
    raw_reply,
    router,
    sse,
    stream_reply,
    streamed,
    text,
)

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


async def test_an_answer_filtered_away_is_content_blocked(wire: Wire) -> None:
    # Azure, Moonshot and Zhipu ("sensitive") answer 200 with nothing but the filter's verdict.
    filtered = completion("", "deepseek-chat")
    filtered["choices"][0]["finish_reason"] = "sensitive"
    wire.on(PATH, json_reply(filtered))
    async with router(provider("ds", wire.url(PATH), "openai")) as r:
        attempt = await first_failure(r, HELLO)
    assert attempt.reason is Reason.CONTENT_BLOCKED
    assert "content_filter" in attempt.detail


async def test_a_stream_filtered_before_any_content_is_content_blocked(wire: Wire) -> None:
    pieces = (sse(chunk(role=True)), sse(chunk(finish="content_filter")), "data: [DONE]\n\n")
    async with router(provider("ds", wire.on(PATH, stream_reply(*pieces)), "openai")) as r:
        attempt = await first_failure(r, HELLO, stream=True)
    assert attempt.reason is Reason.CONTENT_BLOCKED


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (
            {
                "message": "This model's maximum context length is 8192 tokens",
                "code": "context_length_exceeded",
            },
            Reason.CONTEXT_EXCEEDED,
        ),
        ({"message": "Prompt 超长", "code": "1261"}, Reason.CONTEXT_EXCEEDED),
        (
            {"message": "系统检测到输入或生成内容可能包含不安全或敏感内容", "code": "1301"},
            Reason.CONTENT_BLOCKED,
        ),
        (
            {
                "message": "The request was rejected because it was considered high risk",
                "type": "content_filter",
            },
            Reason.CONTENT_BLOCKED,
        ),
    ],
)
async def test_refusals_in_a_200_and_in_a_stream(
    wire: Wire, error: dict[str, str], reason: Reason
) -> None:
    wire.on(PATH, json_reply({"error": error}))
    async with router(provider("ds", wire.url(PATH), "openai")) as r:
        assert (await first_failure(r, HELLO)).reason is reason
    wire.on(PATH, stream_reply(sse(chunk(role=True)), sse({"error": error})))
    async with router(provider("ds", wire.url(PATH), "openai")) as r:
        assert (await first_failure(r, HELLO, stream=True)).reason is reason


def _decoded(data: bytes) -> dict[str, Any]:
    ctx = Context("gpt-test", 0, Shape("choices", "message.content"))
    (out,) = openai.DIALECT.decoder(ctx).feed(None, data)
    return out


def _judged(data: bytes, after: bytes | None = None) -> tuple[type, Any, bool]:
    """What a decoder makes of `data` (fed `after` first, if given): the type of its chunk
    or of its exception, the chunk or the message, and whether it saw the answer finish."""
    ctx = Context("gpt-test", 0, Shape("choices", "message.content"))
    decoder = openai.DIALECT.decoder(ctx)
    if after is not None:
        decoder.feed(None, after)
    try:
        (out,) = decoder.feed(None, data)
    except Exception as exc:
        return type(exc), str(exc), decoder.finished
    return type(out), (out, getattr(out, "raw", None)), decoder.finished


FIRST = orjson.dumps(openai_chunk({"content": "hi"}))
# What may stand between a chunk's bytes around its text (`FIRST`'s): text and its escapes
# (a plain chunk), and bytes that are no JSON or end the string early to make another chunk.
TEXTS = [b"x", b"", "你好 h\u00e9".encode(), b'a\\"b', b"\\\\", b"\\n\\t", b'a\\"}']
NOT_TEXTS = [
    b"a\\",
    b'a","x":"b',
    b'a"},"logprobs":null,"finish_reason":"stop"}],"error":{"message":"m"},"y":[{"delta":{"content":"',
    b"\n",
    b"\xff",
]


@pytest.mark.parametrize("spaced", [False, True])
@pytest.mark.parametrize("inside", TEXTS + NOT_TEXTS)
def test_a_chunk_around_the_same_bytes_is_judged_as_alone(inside: bytes, spaced: bool) -> None:
    """After a plain text chunk, one with the same bytes around its text (`openai._alike`),
    fed alone or taken with others without the field-by-field check (`repeats`): whatever
    stands between them, the decoder makes of it what a fresh one does, and it is `Verbatim`
    only when it is plain text."""
    first = FIRST.replace(b'"content":', b'"content": ') if spaced else FIRST
    head, tail = first.split(b'"hi"')
    data = head + b'"' + inside + b'"' + tail
    alone, after = _judged(data), _judged(data, after=first)
    assert after == alone
    if alone[0] is Verbatim:
        assert alone[1][1] == data
        assert malformed(alone[1][0], chunk=True) is None
    assert (alone[0] is Verbatim) == (inside in TEXTS)
    # Many at a time (`repeats`): the same chunk, or the frame left to `feed`.
    decoder = openai.DIALECT.decoder(Context("gpt-test", 0, Shape("choices", "message.content")))
    decoder.feed(None, first)
    taken: list[Any] = []
    took = decoder.repeats([(None, data), (None, first)], 0, taken)
    if took:
        assert (type(taken[0]), (taken[0], taken[0].raw)) == alone[:2]
    assert took == (2 if inside in TEXTS and b'"' not in inside and inside[-1:] != b"\\" else 0)


PLAIN_CHUNKS = [
    openai_chunk({"role": "assistant", "content": ""}),
    openai_chunk({"content": "h\u00e9"}),
    openai_chunk({}, "stop"),
    {**openai_chunk({"content": "x"}), "obfuscation": "a1"},
    {k: v for k, v in openai_chunk({"content": "x"}).items() if k != "service_tier"},
]
CHANGED_CHUNKS = [
    chunk("x"),  # no `logprobs`: added
    openai_chunk({"content": "x"}, "eos"),  # a finish reason mapped
    openai_chunk({"role": "user", "content": "x"}),
    openai_chunk({"content": [{"type": "text", "text": "x"}]}),
    openai_chunk({"reasoning_content": "x"}),
    openai_chunk({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "f"}}]}),
    {**openai_chunk({"content": "x"}), "usage": {"prompt_tokens": 1, "completion_tokens": 1}},
    {**openai_chunk({"content": "x"}), "x_extra": 1},
    {**openai_chunk({"content": "x"}), "service_tier": None},
    {**openai_chunk({"content": "x"}), "created": "1700000000"},
    {**openai_chunk({"content": "x"}), "id": ""},
    {**openai_chunk({"content": "x"}), "choices": [{**openai_chunk({})["choices"][0], "index": 1}]},
]


def test_a_chunk_that_needs_no_change_keeps_its_bytes() -> None:
    """`Verbatim` only for a chunk that is its own normalization: the same chunk as the one
    normalized field by field (a frame of two lines is), and one the faces can carry."""
    for obj in PLAIN_CHUNKS:
        data = orjson.dumps(obj, option=orjson.OPT_INDENT_2).replace(b"\n", b"")
        out = _decoded(data)
        assert type(out) is Verbatim, obj
        assert out.raw == data
        normalized = _decoded(data.replace(b",", b",\n", 1))
        assert type(normalized) is dict
        assert normalized == out == obj
        assert malformed(out, chunk=True) is None
    for obj in CHANGED_CHUNKS:
        assert type(_decoded(orjson.dumps(obj))) is not Verbatim, obj
