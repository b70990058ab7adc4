"""Tool calls held until whole (`engine/hold.py`), by table of stream chunks. Through the proxy,
with a cut inside a call, on every face: tests/e2e/test_defaults.py."""

from __future__ import annotations

from typing import Any

from agent_reach.chat.callids import CallIds
from agent_reach.engine.hold import Held

SAME = str  # ids as the provider gave them


def piece(index: int = 0, args: str = "", **call: Any) -> dict[str, Any]:
    function = {"arguments": args, **({"name": call.pop("name")} if "name" in call else {})}
    delta = {"tool_calls": [{"index": index, **call, "function": function}]}
    return {"id": "c1", "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}


def calls(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [c for chunk in chunks for c in chunk["choices"][0]["delta"].get("tool_calls") or ()]


def test_a_call_goes_out_once_its_arguments_parse() -> None:
    held = Held(SAME)
    assert held.batch([piece(id="call_1", type="function", name="Bash")]) == []
    assert held.batch([piece(args='{"command": ')]) == []
    assert held.batch([piece(args='"ls"}')]) == [
        {
            "id": "c1",
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "call_1",
                                "type": "function",
                                "function": {"arguments": '{"command": "ls"}', "name": "Bash"},
                            }
                        ]
                    },
                    "finish_reason": None,
                }
            ],
        }
    ]


def test_a_brace_inside_a_string_does_not_end_the_call() -> None:
    held = Held(SAME)
    assert held.batch([piece(id="a", name="f", args='{"code": "}')]) == []
    assert [c["function"]["arguments"] for c in calls(held.batch([piece(args='"}')]))] == [
        '{"code": "}"}'
    ]


def test_the_finish_gives_what_is_held_before_it() -> None:
    held = Held(SAME)
    held.batch([piece(id="a", name="f", args="not json")])
    finish = {"id": "c1", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}
    [out] = held.batch([finish])
    assert out["choices"][0]["finish_reason"] == "tool_calls"
    assert [c["id"] for c in calls([out])] == ["a"]


def test_text_passes_and_two_calls_go_in_their_order() -> None:
    held = Held(SAME)
    text = {"id": "c1", "choices": [{"index": 0, "delta": {"content": "hi"}}]}
    assert held.batch([text]) == [text]  # a stream of text only is not touched
    out = held.batch([piece(0, '{"a": 1', id="x", name="f"), piece(1, "{}", id="y", name="g")])
    assert [c["id"] for c in calls(out)] == ["y"]  # whole first
    assert [c["id"] for c in calls(held.batch([piece(0, "}")]))] == ["x"]


def test_what_is_held_when_the_stream_just_ends_is_given_as_it_is() -> None:
    held = Held(SAME)
    held.batch([piece(id="a", name="f", args='{"a": ')])
    [rest] = held.rest()
    assert rest["id"] == "c1"
    assert calls([rest])[0]["function"]["arguments"] == '{"a": '
    assert held.rest() == []


def test_a_call_is_named_apart_from_the_conversation_as_it_goes_out() -> None:
    """A streamed call whose id the conversation holds already gets a new one (`callids`),
    in the chunk that gives the call whole; its pieces before carry none."""
    messages = [{"role": "tool", "tool_call_id": "call_1", "content": "done"}]
    held = Held(CallIds.of({"messages": messages}).fresh)
    assert held.batch([piece(id="call_1", name="f", args='{"a": ')]) == []
    assert [c["id"] for c in calls(held.batch([piece(args="1}")]))] == ["call_1-ar2"]


def test_a_second_choice_is_not_held() -> None:
    second = piece(id="b", name="f", args='{"a": ')
    second["choices"][0]["index"] = 1
    assert Held(SAME).batch([second]) == [second]
