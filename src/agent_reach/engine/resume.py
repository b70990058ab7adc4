"""Continuing a stream cut mid-answer (protocol §10, continuation): what the client was sent
already (`Said`), and the seam where another provider's continuation joins it, with the
overlap it repeats dropped (`Seam`, `overlap`); usage summed across the two."""

from __future__ import annotations

from typing import Any

from ..dialects import Verbatim, artifacts
from .live import Batch


class Said:
    """What a stream has sent its client: whether text went, and the text itself when a cut
    may be continued (`keep`: else an unread stream would hold every piece it wrote, 250 KB
    more per stream in bench/abuse.py); whether anything else (a tool call, reasoning) went
    too; the first chunk's id and time, which a continuation's chunks take so that the client
    sees one stream; and the usage reported before a cut, which the continuation's adds to."""

    __slots__ = (
        "_blocks",
        "_recent",
        "continuing",
        "head",
        "keep",
        "latest",
        "other",
        "reasoning",
        "spent",
        "texted",
    )

    def __init__(self, keep: bool) -> None:
        self.keep = keep
        self.texted = False
        self._blocks: list[str] = []  # the kept text, joined 256 pieces at a time
        self._recent: list[str] = []
        self.other = False
        self.head: dict[str, Any] | None = None
        self.continuing = False
        self.reasoning: Any = None  # a running digest of the reasoning sent (`artifacts`)
        self.spent: dict[str, Any] | None = None  # the usage of the streams cut before
        self.latest: dict[str, Any] | None = None  # the last usage of the stream under way

    @property
    def text(self) -> str:
        """The text sent so far (when kept)."""
        return "".join(self._blocks) + "".join(self._recent)

    def _note(self, text: str) -> None:
        self.texted = True
        if self.keep:
            self._recent.append(text)
            if len(self._recent) == 256:  # a token's str costs ~50 bytes beside its text
                self._blocks.append("".join(self._recent))
                self._recent.clear()

    def resumed(self) -> None:
        """Another provider takes over the answer: what the cut one reported counts as spent."""
        self.continuing = True
        if self.latest is not None:
            self.spent = self.latest if self.spent is None else summed(self.spent, self.latest)
            self.latest = None

    def batch(self, chunks: Batch) -> Batch:
        """`passed` of each chunk. Without `keep` it changes none (no continuation follows),
        and a `Verbatim` one, text at most, has nothing to note but the first chunk's head."""
        if self.keep or self.head is None:
            return [self.passed(chunk) for chunk in chunks]
        for chunk in chunks:
            if type(chunk) is not Verbatim:
                self.passed(chunk)
        return chunks

    def passed(self, chunk: dict[str, Any]) -> dict[str, Any]:
        """Note `chunk`, as the client will see it: a continuation's under the first chunk's
        id and time, with its own model (who finished the answer), its usage the sum of all."""
        if self.head is None:
            self.head = {k: chunk[k] for k in ("id", "created") if k in chunk}
        elif self.continuing:
            chunk = {**chunk, **self.head, "choices": [_without_role(c) for c in chunk["choices"]]}
        usage = chunk.get("usage") if self.keep else None
        if usage:
            self.latest = usage
            if self.spent is not None:
                chunk = {**chunk, "usage": summed(self.spent, usage)}
        for c in chunk.get("choices") or ():
            delta = c.get("delta") or {}
            if delta.get("content"):
                self._note(delta["content"])
            if isinstance(delta.get("reasoning_content"), str):
                self.reasoning = self.reasoning or artifacts.reasoning_digest()
                self.reasoning.update(delta["reasoning_content"].encode())
            if (
                delta.get("tool_calls")
                or delta.get("reasoning_content")
                or delta.get("function_call")
            ):
                self.other = True
        return chunk


def summed(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Two usages added up, field by field (nested details too)."""
    out = dict(a)
    for key, value in b.items():
        had = out.get(key)
        if isinstance(value, dict) and isinstance(had, dict):
            out[key] = summed(had, value)
        elif isinstance(value, int) and isinstance(had, int):
            out[key] = had + value
        else:
            out[key] = value
    return out


class Seam:
    """Where a continuation meets the text already sent (protocol §10): its opening text is
    held until it is known how much of it repeats the end of what was sent, and that much is
    dropped, so the client never reads a piece twice.

    A continuation asked with an instruction may start over, from the beginning or from the
    last sentence or word; one continuing a prefill carries on from it, and may only repeat
    the trailing whitespace that was left out of the prefill. An overlap counts from a word
    boundary (or is at least `LONG` characters): "a wor" + "world" drops "wor", but "a bana" +
    "na split" keeps both "na"."""

    LONG = 8

    __slots__ = ("held", "last", "met", "reach", "sent")

    def __init__(self, sent: str, reach: int) -> None:
        self.sent = sent
        self.reach = reach  # the longest overlap looked for
        self.held = ""
        self.last: dict[str, Any] | None = None  # the chunk that brought the held text
        self.met = reach == 0

    @classmethod
    def after(cls, sent: str, prefill: bool) -> Seam:
        """The seam after `sent`, for a continuation that was given it as a prefill or not."""
        return cls(sent, len(sent) - len(sent.rstrip()) if prefill else len(sent))

    def through(self, chunk: dict[str, Any]) -> list[dict[str, Any]]:
        """The chunks to pass on for `chunk`: none while the opening is held."""
        if self.met:
            return [chunk]
        choices = chunk.get("choices") or ()
        delta = choices[0].get("delta") or {} if choices else {}
        text = delta.get("content")
        final = not choices or choices[0].get("finish_reason") is not None
        if text:
            self.held += text
            self.last = chunk
            if not final and self._may_grow():
                return []
            return [self._met(chunk)]
        if final:
            return [*self.end(), chunk]
        return [chunk]

    def end(self) -> list[dict[str, Any]]:
        """What is still held, when the continuation ends."""
        if self.met or self.last is None:
            self.met = True
            return []
        chunk = self._met({**self.last, "choices": [{**self.last["choices"][0]}]})
        choice = chunk["choices"][0]
        choice["finish_reason"] = None
        return [chunk] if (choice.get("delta") or {}).get("content") else []

    def _may_grow(self) -> bool:
        """Whether the held text could still be the start of a longer overlap."""
        sent, held = self.sent, self.held
        return sent.find(held, len(sent) - self.reach, len(sent) - 1) >= 0

    def _met(self, chunk: dict[str, Any]) -> dict[str, Any]:
        """`chunk` carrying the held text less its overlap with what was sent."""
        self.met = True
        text = self.held[overlap(self.sent, self.held, self.reach, self.LONG) :]
        self.held = ""
        choice = chunk["choices"][0]
        delta = {**(choice.get("delta") or {})}
        if text:
            delta["content"] = text
        else:
            delta.pop("content", None)
        return {**chunk, "choices": [{**choice, "delta": delta}, *chunk["choices"][1:]]}


def overlap(sent: str, opening: str, reach: int, long: int) -> int:
    """How many characters at the start of `opening` repeat the end of `sent` (at most
    `reach`): the longest such overlap that starts at a word boundary of `sent`, or is at
    least `long` characters."""
    if not opening or not reach:
        return 0
    first = opening[0]
    i = sent.find(first, max(len(sent) - reach, len(sent) - len(opening), 0))
    while i >= 0:
        if opening.startswith(sent[i:]) and (
            len(sent) - i >= long or i == 0 or not (sent[i - 1].isalnum() and sent[i].isalnum())
        ):
            return len(sent) - i
        i = sent.find(first, i + 1)
    return 0


def _without_role(choice: dict[str, Any]) -> dict[str, Any]:
    delta = choice.get("delta") or {}
    if "role" not in delta:
        return choice
    return {**choice, "delta": {k: v for k, v in delta.items() if k != "role"}}
