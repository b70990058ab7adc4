"""Tool calls held until whole (`engine/hold.py`), by table of stream chunks. Through the proxy,
with a cut inside a call, on every face: tests/e2e/test_defaults.py."""

from __future__ import annotations

from typing import Any

from agent_reach.engine.hold import Held


def piece(index: int = 0, args: str = "", **call: Any) -> dict[str, Any]:
    function = {"arguments": args, **({"name": call.pop("name")} if "name" in call else {})}
    delta = {"tool_calls": [{"index": index, **call, "function": function}]}
    return {"id": "c1", "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}


def calls(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [c for chunk in chunks for c in chunk["choices"][0]["delta"].get("tool_calls") or ()]


def test_a_call_goes_out_once_its_arguments_parse() -> None:
    held = Held()
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
    held = Held()
    assert held.batch([piece(id="a", name="f", args='{"code": "}')]) == []
    assert [c["function"]["arguments"] for c in calls(held.batch([piece(args='"}')]))] == [
        '{"code": "}"}'
    ]


def test_the_finish_gives_what_is_held_before_it() -> None:
    held = Held()
    held.batch([piece(id="a", name="f", args="not json")])
    finish = {"id": "c1", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}
    [out] = held.batch([finish])
    assert out["choices"][0]["finish_reason"] == "tool_calls"
    assert [c["id"] for c in calls([out])] == ["a"]


def test_text_passes_and_two_calls_go_in_their_order() -> None:
    held = Held()
    text = {"id": "c1", "choices": [{"index": 0, "delta": {"content": "hi"}}]}
    assert held.batch([text]) == [text]  # a stream of text only is not touched
    out = held.batch([piece(0, '{"a": 1', id="x", name="f"), piece(1, "{}", id="y", name="g")])
    assert [c["id"] for c in calls(out)] == ["y"]  # whole first
    assert [c["id"] for c in calls(held.batch([piece(0, "}")]))] == ["x"]


def test_what_is_held_when_the_stream_just_ends_is_given_as_it_is() -> None:
    held = Held()
    held.batch([piece(id="a", name="f", args='{"a": ')])
    [rest] = held.rest()
    assert rest["id"] == "c1"
    assert calls([rest])[0]["function"]["arguments"] == '{"a": '
    assert held.rest() == []
