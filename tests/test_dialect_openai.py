"""OpenAI format quirks of DeepSeek: `: keep-alive` lines and blank lines before a body."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from agent_reach import Reason
from agent_reach.chat.completion import malformed
from agent_reach.dialects import Context, Shape, Verbatim, openai

from .conftest import CHUNK, COMPLETION, assert_valid
from .fakes.shapes import sse
from .fakes.upstream import chunk, completion, openai_chunk
from .fakes.wire import (
    Wire,
    first_failure,
    json_reply,
    provider,
    raw_reply,
    router,
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
    """After a plain text chunk, one with the same bytes around its text (`OpenAIDecoder`),
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


# -- whole answers: the plain ones skip the walk -------------------------------------------------

ODD = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**64), 2**64),
    st.text(max_size=2),
    st.lists(st.integers(0, 1), max_size=1),
    st.dictionaries(st.text(max_size=1), st.integers(0, 1), max_size=1),
)


def near(
    value: st.SearchStrategy[Any], odd: st.SearchStrategy[Any] = ODD
) -> st.SearchStrategy[Any]:
    """`value`, or now and then (about one time in eight) `odd`: a value of another type."""
    return st.integers(0, 7).flatmap(lambda k: odd if k == 3 else value)


def more(fields: st.SearchStrategy[dict[str, Any]], key: str) -> st.SearchStrategy[dict[str, Any]]:
    """`fields`, now and then with `key` too, a field a provider may add of its own."""
    return near(fields, st.tuples(fields, ODD).map(lambda t: {**t[0], key: t[1]}))


EDGES = st.sampled_from([2**63 - 1, 2**63, -(2**63), -(2**63) - 1, True])
COUNT = near(st.integers(0, 9), ODD | EDGES)
MESSAGE = st.fixed_dictionaries(
    {"role": near(st.just("assistant")), "content": near(st.text(max_size=3))},
    optional={
        "refusal": near(st.none()),
        "reasoning_content": near(st.text(min_size=1, max_size=2)),
    },
)
FINISH = st.sampled_from(["stop", "length", "tool_calls", "content_filter", "function_call"])
CHOICE = st.fixed_dictionaries(
    {
        "index": near(st.just(0), ODD | st.just(1)),
        "message": near(more(MESSAGE, "tool_calls")),
        "finish_reason": near(FINISH, ODD | st.sampled_from(["STOP", "eos", "end_turn"])),
    },
    optional={"logprobs": near(st.none())},
)
USAGE = st.fixed_dictionaries(
    {"prompt_tokens": COUNT, "completion_tokens": COUNT, "total_tokens": COUNT}
)
ANSWER = more(
    st.fixed_dictionaries(
        {
            "id": near(st.just("chatcmpl-1")),
            "object": near(st.just("chat.completion")),
            "created": near(st.integers(0, 2**31)),
            "model": near(st.just("m")),
            "choices": near(
                st.lists(more(CHOICE, "usage"), min_size=1, max_size=1),
                ODD | st.lists(more(CHOICE, "usage"), max_size=3),
            ),
        },
        optional={
            "usage": near(more(USAGE, "prompt_cache_hit_tokens")),
            "system_fingerprint": near(st.just("fp")),
        },
    ),
    "service_tier",
)
OPENAI_SHAPE = Shape("choices", "message.content")


def _edge(where: str, value: Any) -> dict[str, Any]:
    """A plain answer (DeepSeek's, with usage) with one field at `where` set to `value`."""
    body = completion("hi", "m")
    *path, key = where.split(".")
    held: Any = body
    for part in path:
        held = held[0] if part == "0" else held[part]
    held[key] = value
    return body


# The edges a random answer seldom reaches: each must be walked (or be plain, and agree).
EDGE_CASES = [
    ("choices.0.message.reasoning_content", ""),
    ("choices.0.message.reasoning_content", None),
    ("choices.0.message.refusal", 1),
    ("choices.0.message.content", [{"type": "text", "text": "hi"}]),
    ("choices.0.message.role", None),
    ("choices.0.index", True),
    ("choices.0.index", 2**63),
    ("choices.0.finish_reason", "STOP"),
    ("choices.0.finish_reason", None),
    ("choices.0.logprobs", {}),
    ("usage.total_tokens", 2**63),
    ("usage.prompt_tokens", -(2**63) - 1),
    ("usage.completion_tokens", True),
    ("usage.total_tokens", None),
    ("created", True),
    ("id", ""),
    ("model", ""),
    ("object", None),
    ("system_fingerprint", None),
    ("usage", None),
]


def _examples(test: Any) -> Any:
    for where, value in EDGE_CASES:
        test = example(_edge(where, value))(test)
    return test


@settings(max_examples=1000, deadline=None)
@given(ANSWER)
@_examples
def test_a_plain_answer_is_what_its_walk_makes_of_it(answer: dict[str, Any]) -> None:
    """`plain` takes an answer only when the field-by-field normalization makes of it what
    `plain` does (the same answer with the nulls it lacked), `completion.malformed` passes it,
    and it says exact only when the answer is that normalization already; any other it leaves
    as it was."""
    dialect = openai.OpenAI()
    given_ = copy.deepcopy(answer)
    exact = dialect.plain(answer, OPENAI_SHAPE)
    if exact is None:
        assert answer == given_
        return
    normalized = dialect.normalize(copy.deepcopy(given_), Context("asked", 5, OPENAI_SHAPE))
    assert answer == normalized
    assert malformed(normalized) is None
    assert exact is (normalized == given_)


def _openai(content: str, model: str = "m") -> dict[str, Any]:
    """An answer as OpenAI sends one: with the nulls its schema requires."""
    body = completion(content, model)
    body["choices"][0] |= {"logprobs": None}
    body["choices"][0]["message"] |= {"refusal": None}
    return body


def test_the_answers_providers_send_are_plain() -> None:
    """OpenAI's own (its nulls given) is exact; DeepSeek's (no `refusal`) and one without
    `logprobs` get them; a tool call, another shape or a usage with a provider's own counts is
    normalized field by field."""
    dialect = openai.OpenAI()
    full = _openai("hi")
    assert dialect.plain(copy.deepcopy(full), OPENAI_SHAPE) is True
    choice = full["choices"][0]
    message = {"role": "assistant", "content": "hi", "reasoning_content": "think"}
    deepseek = {**full, "choices": [{**choice, "message": message}]}
    assert dialect.plain(deepseek, OPENAI_SHAPE) is False
    assert deepseek["choices"][0]["message"] == {**message, "refusal": None}
    assert_valid(COMPLETION, deepseek)
    bare = completion("hi", "m")
    assert dialect.plain(bare, OPENAI_SHAPE) is False
    assert bare["choices"][0]["logprobs"] is None
    assert_valid(COMPLETION, bare)
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    tools = {**full, "choices": [{**choice, "message": {**message, "tool_calls": [call]}}]}
    cached = {**full, "usage": {**full["usage"], "prompt_cache_hit_tokens": 1}}
    for other in (tools, cached):
        assert dialect.plain(other, OPENAI_SHAPE) is None
    assert dialect.plain(copy.deepcopy(full), Shape("data", "text")) is None


async def test_a_plain_answer_passes_as_its_bytes(wire: Wire) -> None:
    """An answer that is its own normalization reaches the client as the provider's bytes;
    one that lacks the nulls OpenAI's schema requires gets them (and is valid)."""
    data = orjson.dumps(_openai("hi", "deepseek-chat"), option=orjson.OPT_INDENT_2)
    short = completion("hi", "deepseek-chat")
    for reply, verbatim in ((raw_reply(data), True), (json_reply(short), False)):
        async with router(provider("p", wire.on(PATH, reply), "openai")) as r:
            got = (await r.achat(HELLO)).response
        assert (type(got) is Verbatim) is verbatim
        if verbatim:
            assert got.raw == data
        assert_valid(COMPLETION, dict(got))
        assert got["choices"][0]["message"]["content"] == "hi"
