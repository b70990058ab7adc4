"""Reasoning artifacts tagged on the way out and sorted on the way back (`dialects.artifacts`),
by table. Pure."""

from __future__ import annotations

from typing import Any

import pytest

from agent_reach.dialects import artifacts, get
from agent_reach.dialects.artifacts import homed, mint, tagged

A, B = "aaaaaaaaaaaa", "bbbbbbbbbbbb"


def test_an_answer_and_its_stream_events_are_tagged() -> None:
    message = {
        "content": [
            {"type": "thinking", "thinking": "t", "signature": "S1"},
            {"type": "redacted_thinking", "data": "D1"},
            {"type": "thinking", "thinking": "", "signature": ""},  # nothing to tag yet
            {"type": "text", "text": "signature"},
        ]
    }
    out = tagged(message, A)
    assert [b.get("signature", b.get("data")) for b in out["content"]] == [
        mint("S1", A),
        mint("D1", A),
        "",
        None,
    ]
    assert message["content"][0]["signature"] == "S1"  # the input is not changed
    delta = {"type": "content_block_delta", "delta": {"type": "signature_delta", "signature": "S"}}
    assert tagged(delta, A)["delta"]["signature"] == mint("S", A)
    completed = {"response": {"output": [{"type": "reasoning", "encrypted_content": "E"}]}}
    assert tagged(completed, A)["response"]["output"][0]["encrypted_content"] == mint("E", A)
    plain = {"choices": [{"message": {"content": "hi"}}]}
    assert tagged(plain, A) is plain
    assert tagged(tagged(message, A), B) == tagged(message, A)  # never tagged twice


THINK = {"type": "thinking", "thinking": "t", "signature": "S"}
TEXT = {"type": "text", "text": "x"}


@pytest.mark.parametrize(
    ("blocks", "origin", "expected"),
    [
        ([{**THINK, "signature": mint("S", A)}, TEXT], A, [THINK, TEXT]),  # home: own bytes
        ([{**THINK, "signature": mint("S", B)}, TEXT], A, [TEXT]),  # another's: left out
        ([THINK, TEXT], A, [THINK, TEXT]),  # untagged: as it came
        ([THINK, TEXT], None, [TEXT]),  # refused before: every artifact left out
        ([{**THINK, "signature": mint("S", A)}], None, []),
    ],
)
def test_a_request_keeps_only_its_targets_own(
    blocks: list[dict[str, Any]], origin: str | None, expected: list[dict[str, Any]]
) -> None:
    assert homed(blocks, origin) == expected


def test_each_native_dialect_sorts_its_own_shape() -> None:
    foreign = {**THINK, "signature": mint("S", B)}
    body = {
        "messages": [
            {"role": "assistant", "content": [foreign, TEXT]},
            {"role": "user", "content": "hi"},
        ]
    }
    assert get("anthropic").home(body, A)["messages"][0]["content"] == [TEXT]
    item = {"type": "reasoning", "id": "rs_1", "encrypted_content": mint("E", A)}
    request = {"input": [{"role": "user", "content": "hi"}, item]}
    assert get("responses").home(request, A)["input"][1]["encrypted_content"] == "E"
    assert get("responses").home(request, B)["input"] == [{"role": "user", "content": "hi"}]
    assert get("openai").home(request, B) is request


def test_a_tag_is_recoverable() -> None:
    assert artifacts.origin_of(mint("EqQB", A)) == (A, "EqQB")
    assert artifacts.origin_of("EqQB") == (None, "EqQB")
    assert artifacts.origin_of("ar~broken") == (None, "ar~broken")


def test_chat_reasoning_is_known_by_its_digest() -> None:
    origins = artifacts.Origins(size=2)
    said = {"role": "assistant", "content": "x", "reasoning_content": "because"}
    messages = [{"role": "user", "content": "hi"}, said]
    assert artifacts.home_reasoning(messages, A, origins) is messages  # nothing known yet
    running = artifacts.reasoning_digest()
    for piece in ("bec", "ause"):  # as a stream hands it out
        running.update(piece.encode())
    origins.note(running.digest(), B)
    assert origins.of("because") == B
    assert artifacts.home_reasoning(messages, B, origins) is messages  # home
    assert artifacts.home_reasoning(messages, A, origins)[1] == {
        "role": "assistant",
        "content": "x",
    }
    origins.note(artifacts.reasoning_digest("one").digest(), A)
    origins.note(artifacts.reasoning_digest("two").digest(), A)
    assert origins.of("because") is None  # the oldest is forgotten
    assert len(origins) == 2
