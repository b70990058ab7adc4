"""Compaction's pure half (`dialects/responses/compaction.py`): the sealed item and its way back
into a conversation, by table and by hypothesis; an item altered, made for another key, or not
ours is a 400 naming it; the response that carries it against the official schema."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_reach.core.errors import RequestError
from agent_reach.dialects.responses import compaction
from agent_reach.dialects.responses.request import decode_request
from agent_reach.dialects.responses.stream import StreamEncoder
from agent_reach.server.guard import seal_of

from .conftest import RESPONSE, RESPONSES_SCHEMAS, _validator, assert_valid, assert_valid_event

COMPACTION = _validator("CompactionBody", RESPONSES_SCHEMAS)
KEY, OTHER = seal_of("sk-client-a"), seal_of("sk-client-b")


def expanded(items: list[Any], key: bytes = KEY) -> list[Any]:
    out: list[Any] = compaction.expanded({"input": items}, key)["input"]
    return out


@given(st.text(), st.integers(0, 10_000))
def test_a_summary_comes_back_as_it_went(summary: str, replaced: int) -> None:
    item = compaction.seal(summary, replaced, KEY)
    assert_valid(COMPACTION, item)
    assert compaction.opened(item["encrypted_content"], KEY, "input[0]") == summary
    (message,) = expanded([item])
    assert message == {"type": "message", "role": "user", "content": compaction.HEADER + summary}


def _flipped(content: str, at: int) -> str:
    swap = "A" if content[at] != "A" else "B"
    return content[:at] + swap + content[at + 1 :]


@given(st.text(min_size=1), st.data())
def test_any_change_to_an_item_is_refused(summary: str, data: st.DataObject) -> None:
    content = compaction.seal(summary, 3, KEY)["encrypted_content"]
    at = data.draw(st.integers(len(compaction.MARK), len(content) - 1))
    if content[at] == ".":
        return  # the separator: a change there is a different split, refused below too
    with pytest.raises(RequestError, match=r"input\[1\]: the compaction item's"):
        expanded(
            [
                {"role": "user", "content": "hi"},
                {"type": "compaction", "encrypted_content": _flipped(content, at)},
            ]
        )


def test_an_item_made_for_another_key_is_refused() -> None:
    item = compaction.seal("their conversation", 5, OTHER)
    with pytest.raises(RequestError, match="made for another client key") as refused:
        expanded([item])
    assert refused.value.status == 400
    assert refused.value.param == "input"


@pytest.mark.parametrize(
    "content", [compaction.MARK + "!!not base64!!", compaction.MARK + "aGVsbG8", compaction.MARK]
)
def test_an_item_of_ours_that_does_not_open_is_a_400(content: Any) -> None:
    item = {"type": "compaction", "id": "cmp_1", "encrypted_content": content}
    with pytest.raises(RequestError, match=r"input\[0\]") as refused:
        expanded([item])
    assert refused.value.status == 400


@pytest.mark.parametrize("content", ["gAAAAABo-openai-own", None, 42])
def test_an_item_not_ours_is_left_for_the_provider_that_made_it(content: Any) -> None:
    item = {"type": "compaction", "id": "cmp_1", "encrypted_content": content}
    ours = compaction.seal("mine", 1, KEY)
    body = {"input": [{"role": "user", "content": "hi"}, item, ours]}
    assert compaction.foreign(body) == 1
    assert compaction.expanded(body, KEY)["input"][:2] == body["input"][:2]
    assert compaction.foreign({"input": [ours]}) is None


def test_a_request_without_compaction_items_is_left_as_it_is() -> None:
    body = {"input": [{"role": "user", "content": "hi"}, {"type": "reasoning"}]}
    assert compaction.expanded(body, KEY) is body


@pytest.mark.parametrize(
    ("given", "asked"),
    [
        ([{"type": "compaction_trigger"}], True),
        ([{"role": "user", "content": "hi"}, {"type": "compaction_trigger"}], True),
        ([{"type": "compaction_trigger"}, {"role": "user", "content": "hi"}], False),
        ("compaction_trigger", False),
        ([], False),
        (None, False),
    ],
)
def test_only_a_last_trigger_asks_for_compaction(given: Any, asked: bool) -> None:
    assert compaction.triggered({"input": given}) is asked


def test_the_summary_request_is_the_conversation_then_the_prompt() -> None:
    body = {
        "model": "m",
        "instructions": "Be a coder.",
        "tools": [{"type": "function", "name": "exec_command"}],
        "stream": True,
        "previous_response_id": "resp_x",
        "input": [
            compaction.seal("earlier work", 4, KEY),
            {"role": "user", "content": "go on"},
            {"type": "compaction_trigger"},
        ],
    }
    ask = compaction.summary_request(compaction.expanded(body, KEY))
    assert "stream" not in ask
    assert "previous_response_id" not in ask
    assert ask["store"] is False
    assert ask["tool_choice"] == "none"
    chat = decode_request(ask).body
    assert [m["content"] for m in chat["messages"]] == [
        "Be a coder.",
        compaction.HEADER + "earlier work",
        "go on",
        compaction.PROMPT,
    ]


def test_the_compaction_response_validates() -> None:
    out = StreamEncoder({"model": "m"}, 0, "m")
    item = compaction.seal("s", 1, KEY)
    events = [*out.start(), *out.whole_item(item), *out.finish_events()]
    for _, event in events:
        assert_valid_event(event)
    assert_valid(RESPONSE, out.response())
    assert [i["type"] for i in out.response()["output"]] == ["compaction"]
