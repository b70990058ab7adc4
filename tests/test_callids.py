"""Tool-call ids that never repeat within a conversation (`chat/callids.py`), by table: what a
conversation holds, what a new call is named, what a chat provider is sent back (a streamed
call: tests/test_hold.py). Through the
proxy with the official clients: tests/e2e/test_messages.py, tests/e2e/test_proxy.py."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from agent_reach.chat.callids import CallIds, minted, restored
from agent_reach.dialects import Verbatim


def conversation(*ids: str) -> dict[str, Any]:
    """A chat request whose assistant turns called `ids`, each answered."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    for i in ids:
        call = {"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}}
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": i, "content": "done"},
        ]
    return {"model": "m", "messages": messages}


@pytest.mark.parametrize(
    ("held", "given", "named"),
    [
        ((), "call_1", "call_1"),  # new: as the provider named it
        (("call_1",), "call_1", "call_1-ar2"),
        (("call_1", "call_1-ar2"), "call_1", "call_1-ar3"),
        (("toolu_call_1",), "call_1", "call_1-ar2"),  # a Messages client's id of the same call
        (("call_1",), "toolu_call_1", "toolu_call_1-ar2"),
        (("call_2",), "call_1", "call_1"),
        (("call_1",), "", ""),  # no id: the face names the call
        (("call_1",), None, None),
    ],
)
def test_a_new_call_is_named_apart_from_the_conversations(
    held: tuple[str, ...], given: Any, named: Any
) -> None:
    assert CallIds.of(conversation(*held)).fresh(given) == named


def test_two_calls_of_one_answer_are_apart_too() -> None:
    ids = CallIds.of(conversation())
    assert [ids.fresh("call_1"), ids.fresh("call_1")] == ["call_1", "call_1-ar2"]


def answer(*ids: str) -> dict[str, Any]:
    calls = [
        {"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}} for i in ids
    ]
    message = {"role": "assistant", "content": None, "tool_calls": calls}
    return {"id": "c", "object": "chat.completion", "choices": [{"index": 0, "message": message}]}


def test_a_whole_answer_is_renamed_and_no_longer_sent_as_its_bytes() -> None:
    body = answer("call_1")
    given = Verbatim.of(body, orjson.dumps(body))
    out = CallIds.of(conversation("call_1")).answer(given)
    assert type(out) is dict  # the face serializes it, not the provider's bytes
    assert out["choices"][0]["message"]["tool_calls"][0]["id"] == "call_1-ar2"
    fresh = Verbatim.of(answer("call_9"), b"{}")
    assert CallIds.of(conversation("call_1")).answer(fresh) is fresh  # nothing to change


def test_a_chat_provider_gets_its_own_ids_back() -> None:
    renamed = conversation("call_1", "call_1-ar2", "toolu_call_1-ar3")
    assert minted(renamed)
    sent = restored(renamed)
    ids = [c["id"] for m in sent["messages"] for c in m.get("tool_calls") or ()]
    assert ids == ["call_1", "call_1", "toolu_call_1"]
    results = [m["tool_call_id"] for m in sent["messages"] if m["role"] == "tool"]
    assert results == ids
    untouched = conversation("call_1", "call_2")
    # nothing renamed: the request says so once, and its body goes as it is (no copy)
    assert not minted(untouched)
    assert not minted(conversation("read-array"))  # "-ar" in an id, not ours
