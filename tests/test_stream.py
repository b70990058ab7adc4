"""Where a continuation meets the text already sent (`stream.Seam`, protocol §10): by tables,
chunks in, chunks out, no sockets."""

from __future__ import annotations

from typing import Any

import pytest

from agent_reach.engine.resume import Seam, summed


def piece(text: str | None = None, finish: str | None = None) -> dict[str, Any]:
    delta = {} if text is None else {"content": text}
    return {"id": "c", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def through(seam: Seam, texts: list[str]) -> tuple[str, list[int]]:
    """The text the client reads after the seam, and after which input piece each output
    chunk came out."""
    out, when = [], []
    pieces = [piece(t) for t in texts] + [piece(finish="stop")]
    for n, p in enumerate(pieces):
        for chunk in seam.through(p):
            out.append(chunk["choices"][0]["delta"].get("content") or "")
            when.append(n)
    return "".join(out), when


SENT = "The quick brown fox ju"


@pytest.mark.parametrize(
    ("opening", "read"),
    [
        (["mps over."], "mps over."),  # carries on exactly
        (["The qu", "ick brown", " fox jumps", " over."], "mps over."),  # starts over
        (["jumps", " over."], "mps over."),  # restarts the word it was cut in
        (["fox jumps over."], "mps over."),  # restarts at the last word but one
        (["brown fox jumps over."], "mps over."),  # a longer overlap
        (["The end."], "The end."),  # "The" is in the text sent, not at its end
        (["u are right."], "u are right."),  # "u" ends the text sent, but inside a word
        (["s over."], "s over."),  # no overlap at all
    ],
)
def test_the_overlap_with_the_text_sent_is_dropped(opening: list[str], read: str) -> None:
    text, _ = through(Seam.after(SENT, prefill=False), opening)
    assert text == read


def test_an_overlap_inside_a_word_is_a_coincidence_unless_it_is_long() -> None:
    assert through(Seam.after("a bana", prefill=False), ["na split"])[0] == "na split"
    assert through(Seam.after("gave it to", prefill=False), [" to me."])[0] == " me."
    long = "an overlap of many characters"
    assert through(Seam.after(f"xx{long}", prefill=False), [f"{long} ends"])[0] == " ends"
    # At a word boundary it is taken for a restart: "is 1" + "1." reads "is 1.", never "is 11."
    assert through(Seam.after("the total is 1", prefill=False), ["1."])[0] == "."


def test_text_is_held_only_while_it_may_still_be_a_repeat() -> None:
    _, when = through(Seam.after(SENT, prefill=False), ["The qu", "ick brown", " fox jumps"])
    assert when[0] == 2  # held through "The qu" and "ick brown", out with " fox jumps"
    _, when = through(Seam.after(SENT, prefill=False), ["Nothing", " like it."])
    assert when == [0, 1, 2]  # "Nothing" is not in the text sent: out at once


def test_a_prefill_is_continued_only_the_whitespace_left_out_of_it_is_dropped() -> None:
    seam = Seam.after("Hello, ", prefill=True)  # the prefill was "Hello,"
    assert through(seam, [" world", "."])[0] == "world."
    seam = Seam.after("Hello, ", prefill=True)
    assert through(seam, ["Hello, world."])[0] == "Hello, world."  # no overlap looked for
    assert Seam.after("Hello,", prefill=True).met  # nothing to hold


def test_what_is_held_comes_out_when_the_continuation_ends() -> None:
    seam = Seam.after(SENT, prefill=False)
    assert seam.through(piece("The qu")) == []
    out = seam.through(piece(finish="stop"))
    assert [c["choices"][0]["delta"] for c in out] == [{"content": "The qu"}, {}]
    assert out[-1]["choices"][0]["finish_reason"] == "stop"
    seam = Seam.after(SENT, prefill=False)
    assert seam.through(piece("The qu")) == []
    assert [c["choices"][0]["delta"] for c in seam.end()] == [{"content": "The qu"}]
    assert seam.end() == []


def test_a_continuation_that_only_repeats_adds_nothing() -> None:
    assert through(Seam.after(SENT, prefill=False), ["The quick ", "brown fox ju"])[0] == ""


def test_usages_add_up_field_by_field() -> None:
    cut = {
        "prompt_tokens": 5,
        "completion_tokens": 2,
        "prompt_tokens_details": {"cached_tokens": 1},
    }
    rest = {
        "prompt_tokens": 9,
        "completion_tokens": 4,
        "prompt_tokens_details": {"cached_tokens": 3},
    }
    assert summed(cut, rest) == {
        "prompt_tokens": 14,
        "completion_tokens": 6,
        "prompt_tokens_details": {"cached_tokens": 4},
    }
