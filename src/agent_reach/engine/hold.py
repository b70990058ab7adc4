"""Tool calls that reach the client whole or not at all (issue 51, item 2).

A chat provider streams a tool call as pieces of its arguments; a stream cut in the middle
would leave the client a call it cannot run (`{"comm` and an error), which agents handle
badly. So a chat stream's tool calls are held, piece by piece, and go to the client as one
delta each once whole: its arguments parse as JSON, or the provider said it finished. A cut
while one is held drops it: the client never saw it, and the next provider may begin the
answer again (`ChatStream`). Each call is named as it goes (`name`: the stream's
`callids.CallIds.fresh`, so that no id repeats in the conversation). The cost is the time a
call takes to arrive, paid before its first byte (bench/tool_hold.py measures it); a stream of
text only is not touched, nor the calls of a second choice (`n` > 1, which agents never ask).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from .live import Batch


class Held:
    """The tool calls of one stream's first choice being put together, by their index, each
    given its id by `name` when it goes out."""

    __slots__ = ("calls", "head", "name")

    def __init__(self, name: Callable[[Any], Any]) -> None:
        self.name = name
        self.calls: dict[int, dict[str, Any]] = {}
        self.head: dict[str, Any] = {}  # the last held chunk's id, time and model

    def batch(self, chunks: Batch) -> Batch:
        """`chunks` with their tool-call pieces held back, and each call that became whole
        given in the chunk that completed it."""
        if not self.calls and not any(_calls(c) for c in chunks):
            return chunks
        out: list[dict[str, Any]] = []
        for chunk in chunks:
            out += self._through(chunk)
        return out

    def _through(self, chunk: dict[str, Any]) -> list[dict[str, Any]]:
        calls = _calls(chunk)
        choices: list[Any] = chunk.get("choices") or []
        finished = bool(choices) and choices[0].get("finish_reason") is not None
        if not calls and not (finished and self.calls):
            return [chunk]
        for piece in calls or ():
            self._add(piece)
        self.head = {k: chunk[k] for k in ("id", "object", "created", "model") if k in chunk}
        whole = sorted(i for i, c in self.calls.items() if finished or _whole(c))
        choice = dict(choices[0])
        delta = {k: v for k, v in (choice.get("delta") or {}).items() if k != "tool_calls"}
        if whole:
            delta["tool_calls"] = [self._out(i) for i in whole]
        if not delta and not finished:
            return []  # only pieces of calls not whole yet
        choice["delta"] = delta
        return [{**chunk, "choices": [choice, *choices[1:]]}]

    def _add(self, piece: dict[str, Any]) -> None:
        index = piece.get("index", 0)
        call = self.calls.get(index)
        if call is None:
            call = self.calls[index] = {"index": index, "function": {"arguments": ""}}
        for key in ("id", "type"):
            if piece.get(key):
                call[key] = piece[key]
        function = piece.get("function") or {}
        if function.get("name"):
            call["function"]["name"] = function["name"]
        call["function"]["arguments"] += function.get("arguments") or ""

    def rest(self) -> Batch:
        """What is still held when the stream ends without saying it finished: given as it
        is (the provider said no more)."""
        if not self.calls:
            return []
        calls = [self._out(i) for i in sorted(self.calls)]
        choice = {"index": 0, "delta": {"tool_calls": calls}, "finish_reason": None}
        return [{**self.head, "choices": [choice]}]

    def _out(self, index: int) -> dict[str, Any]:
        call = self.calls.pop(index)
        if call.get("id"):
            call["id"] = self.name(call["id"])
        return call


def _calls(chunk: dict[str, Any]) -> list[dict[str, Any]] | None:
    choices = chunk.get("choices")
    if not choices or not isinstance(choices[0], dict) or choices[0].get("index", 0) != 0:
        return None
    delta = choices[0].get("delta")
    calls = delta.get("tool_calls") if isinstance(delta, dict) else None
    return calls if isinstance(calls, list) and calls else None


def _whole(call: dict[str, Any]) -> bool:
    """Whether a call's arguments are a whole JSON object (parsed only when they end as
    one could: a long call is not parsed at every piece)."""
    text = call["function"]["arguments"]
    if not text.rstrip().endswith("}"):
        return False
    try:
        return isinstance(orjson.loads(text), dict)
    except orjson.JSONDecodeError:
        return False
