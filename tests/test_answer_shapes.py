"""Provider answers of any shape (protocol §5, §10.1): whatever `completion.malformed` lets
through, the Responses and Messages translations carry without raising, whole and streamed;
the rest is a `schema_mismatch` (failover before the first byte, an error event after it).
Hypothesis draws answers around the shapes the translations read."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from agent_reach.chat import completion
from agent_reach.dialects.anthropic import answer as anthropic_answer
from agent_reach.dialects.anthropic import stream as anthropic_stream
from agent_reach.dialects.responses.answer import encode_answer
from agent_reach.dialects.responses.stream import StreamEncoder

ANY = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=6,
)


def maybe(value: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return value | ANY


FUNCTION = st.fixed_dictionaries(
    {}, optional={"name": maybe(st.text(max_size=5)), "arguments": maybe(st.text(max_size=5))}
)
CALL = st.fixed_dictionaries(
    {},
    optional={
        "id": maybe(st.text(max_size=5)),
        "type": maybe(st.just("function")),
        "function": maybe(FUNCTION),
        "index": maybe(st.integers(0, 3)),
    },
)
FIELDS = {
    "role": maybe(st.just("assistant")),
    "content": maybe(st.text(max_size=5)),
    "reasoning_content": maybe(st.text(max_size=5)),
    "tool_calls": maybe(st.lists(maybe(CALL), max_size=2)),
    "refusal": maybe(st.none()),
}
MESSAGE = st.fixed_dictionaries({}, optional=FIELDS)
USAGE = maybe(
    st.fixed_dictionaries(
        {
            "prompt_tokens": maybe(st.integers(0, 9)),
            "completion_tokens": maybe(st.integers(0, 9)),
            "total_tokens": maybe(st.integers(0, 9)),
        }
    )
)
FINISH = maybe(st.sampled_from(["stop", "length", "tool_calls", "content_filter"]))


def answer(inner: str) -> st.SearchStrategy[dict[str, Any]]:
    choice = st.fixed_dictionaries(
        {"index": maybe(st.just(0)), inner: maybe(MESSAGE), "finish_reason": FINISH}
    )
    return st.fixed_dictionaries(
        {
            "id": st.just("x"),
            "model": st.just("m"),
            "choices": maybe(st.lists(maybe(choice), max_size=2)),
        },
        optional={"usage": USAGE},
    )


REQUEST = {"model": "m", "input": "hi"}


@settings(max_examples=400, deadline=None)
@given(answer("message"))
def test_a_whole_answer_is_carried_or_a_mismatch(body: dict[str, Any]) -> None:
    if completion.malformed(body) is not None:
        return
    encode_answer(body, REQUEST, 0)
    anthropic_answer.encode_answer(body)


@settings(max_examples=400, deadline=None)
@given(st.lists(answer("delta"), min_size=1, max_size=4))
def test_a_stream_is_carried_or_a_mismatch(chunks: list[dict[str, Any]]) -> None:
    carried = [c for c in chunks if completion.malformed(c, chunk=True) is None]
    out = StreamEncoder(REQUEST, 0, "m")
    out.start()
    events = anthropic_stream.StreamEncoder()
    for chunk in carried:
        out.feed(chunk)
        events.feed(chunk)
    out.finish_events()
    out.response()
    events.end()


def test_a_chunk_whose_content_is_a_list_of_parts_is_carried_as_its_text() -> None:
    """Found by the property above (CI, a fresh clone): `delta.content` as parts, which the
    chunk check accepts, broke the Responses encoder; it is carried as its text, as the
    Messages encoder carries it."""
    parts = {"content": [{}, {"type": "text", "text": "hi"}, {"type": "image_url"}]}
    chunk = {"id": "x", "model": "m", "choices": [{"index": 0, "delta": parts}]}
    assert completion.malformed(chunk, chunk=True) is None
    out = StreamEncoder(REQUEST, 0, "m")
    out.start()
    deltas = [e for kind, e in out.feed(chunk) if kind == "response.output_text.delta"]
    assert [e["delta"] for e in deltas] == ["hi"]
    out.finish_events()
    assert out.response()["output"][0]["content"][0]["text"] == "hi"
