"""Streams: one provider's open stream (`LiveStream`), and the stream a caller iterates
(`ChatStream`), which reports a failure after its first chunk to whoever ran the request.

Failover is allowed until the first content chunk (protocol §10 "Streaming"), so a `LiveStream`
reads ahead to its first content, buffering what came before; the engine hands it over only
then. After that point a failure cannot be hidden: `ChatStream` records it (`Recorder.cut`)
and raises `StreamInterrupted`, unless the next provider finishes the answer (continuation,
`Recorder.resume`), its opening trimmed of what it repeats (`Seam`). After the first content a
stream that sends nothing for its `stall_ms` is cut (`Stalled`), and one malformed frame is
skipped when the frame after it is sound (`Recorder.skipped`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, Protocol

from ..chat import completion
from ..core.errors import StreamInterrupted
from ..core.trace import Attempt
from ..dialects import Mismatch, ProviderError, Verbatim, artifacts
from ..net.transport import CLIENT_ERRORS
from ..net.upstream import Disconnected, ReadTimeout, Response
from .run import Run

if TYPE_CHECKING:
    from .prepared import PreparedProvider

STREAM_FAILURES = (*CLIENT_ERRORS, ProviderError, Mismatch)
Frame = tuple[str | None, bytes]  # (event, data) of one SSE frame
Batch = list[dict[str, Any]]  # the chunks of one read of the upstream, handled at once


class Stalled(ReadTimeout):
    """A stream sent no line for its `stall_ms` after its first content: a cut."""


class LiveStream:
    """One provider's open stream: its frames decoded into OpenAI chunks."""

    def __init__(
        self,
        resp: Response | None,
        frames: Any,
        decoder: Any,
        pending: list[dict[str, Any]] | None = None,
        *,
        keep_frames: bool = False,
        mark: Callable[[Frame], Frame] | None = None,
    ) -> None:
        self.resp = resp
        self.frames = frames
        self.decoder = decoder
        self.pending: list[dict[str, Any]] = pending or []
        # The provider's own frames, kept for a client that speaks its API (`take_frames`).
        self.kept: list[Frame] | None = [] if keep_frames else None
        self.mark = mark  # what a kept frame becomes (its artifacts tagged), if anything
        self._chunks = self._read() if resp is not None else None
        self._complete = False
        self._stall_s: float | None = None  # both set by `rest`, once content has gone out
        self._skipped: Callable[[Mismatch], None] | None = None
        self._bad: Mismatch | None = None  # a malformed frame, skipped if the next one is sound

    @classmethod
    def replay(cls, chunks: list[dict[str, Any]]) -> LiveStream:
        """A stream made of chunks already in hand (a whole answer to a stream request)."""
        return cls(None, None, None, chunks)

    @property
    def replayed(self) -> bool:
        """Whether this is a whole answer replayed as chunks, not a provider's stream."""
        return self.resp is None

    async def _read(self) -> AsyncGenerator[Batch, None]:
        assert self.resp is not None
        resp = self.resp
        while lines := await self._lines(resp):
            frames = self.frames.feed(lines)
            at = 0
            while at < len(frames):
                batch: Batch = []
                try:
                    at = self._decode(frames, at, batch)
                except Exception:
                    if batch:
                        yield batch  # what came before the failure goes out first
                    raise
                if batch:
                    yield batch
        frame = self.frames.flush()
        if frame is not None:
            self._keep(frame)
            if batch := _carried(self.decoder.feed(*frame)):
                yield batch
        if not self.decoder.finished:
            raise self._bad or Disconnected("server disconnected")
        if self._bad is not None:
            self._skip(self._bad)
        self._complete = True

    def _decode(self, frames: list[Frame], at: int, batch: Batch) -> int:
        """The chunks of `frames` from `at` on, added to `batch`; where it stopped. Before the
        first content (no `rest` yet) it stops after each frame that gave a chunk, so that
        `first_content` sees them one frame at a time, and a malformed frame after the first
        content is judged by the mid-stream rule."""
        decoder, kept, mark = self.decoder, self.kept, self.mark
        one = self._skipped is None
        fast = not one and kept is None  # chunks a face checks no further, many at a time
        i = at
        while i < len(frames):
            if fast and self._bad is None:
                i = decoder.repeats(frames, i, batch)
                if i == len(frames):
                    break
            frame = frames[i]
            i += 1
            if kept is not None:
                kept.append(frame if mark is None else mark(frame))
            try:
                chunks = _carried(decoder.feed(*frame))
            except Mismatch as exc:
                if one or self._bad is not None:
                    raise  # before the first content (fail over), or twice in a row (a cut)
                if kept is not None:
                    kept.pop()  # a native client is not sent it either
                self._bad = exc
                continue
            if self._bad is not None:
                self._skip(self._bad)
                self._bad = None
            batch += chunks
            if one and chunks:
                return i
        return len(frames)

    def _keep(self, frame: Frame) -> None:
        if self.kept is not None:
            self.kept.append(frame if self.mark is None else self.mark(frame))

    def _skip(self, bad: Mismatch) -> None:
        if self._skipped is not None:
            self._skipped(bad)

    async def _lines(self, resp: Response) -> list[bytes]:
        """The next lines in hand ([] at the end), within `stall_ms` once content has gone
        out."""
        if self._stall_s is None:
            return await resp.lines()
        limit = asyncio.timeout(self._stall_s)
        try:
            async with limit:
                return await resp.lines()
        except TimeoutError:
            if not limit.expired():
                raise  # the read timeout, not ours
            ms = round(self._stall_s * 1000)
            raise Stalled(f"stalled: no bytes for {ms} ms") from None

    async def first_content(self) -> bool:
        """Read until a chunk carries content (buffering the ones before); False if the
        stream ended without any."""
        assert self._chunks is not None
        async for batch in self._chunks:
            self.pending += batch
            if any(map(completion.has_content, batch)):
                return True
        return False

    async def rest(
        self, stall_s: float | None, skipped: Callable[[Mismatch], None]
    ) -> AsyncIterator[Batch]:
        """Every chunk, a batch per read of the upstream: the buffered ones, then the rest as
        they arrive, each read within `stall_s` (None: the read timeout alone); a malformed
        frame followed by a sound one is skipped, and told to `skipped`."""
        self._stall_s, self._skipped = stall_s, skipped
        pending, self.pending = self.pending, []
        if pending:
            yield pending
        if self._chunks is not None:
            async for batch in self._chunks:
                yield batch

    async def aclose(self) -> None:
        if self._chunks is not None:
            await self._chunks.aclose()
        if self.resp is not None:
            if self._complete:
                self.resp.release()  # the connection goes back to the pool
            else:
                self.resp.close()


class Recorder(Protocol):
    """Who ran the request: told when its stream fails after the first chunk; `origins`
    learns who wrote the reasoning a chat stream carried."""

    origins: artifacts.Origins

    async def cut(
        self, run: Run, prepared: PreparedProvider, exc: BaseException, ms: float
    ) -> Attempt:
        """Record the failure (its attempt, the circuit); the attempt recorded."""
        ...

    async def resume(self, run: Run, partial: str) -> tuple[PreparedProvider, LiveStream] | None:
        """The next provider's stream finishing the answer cut after `partial`, or None."""
        ...

    def skipped(self, run: Run, prepared: PreparedProvider, exc: Mismatch) -> None:
        """A malformed frame was skipped mid-stream (the frame after it was sound)."""
        ...


class ChatStream:
    """A stream that has started: who answers (`provider`), the trace so far, and the chunks.

    Iterate it once. A failure after the first chunk is recorded and raises
    `StreamInterrupted`; leaving early (or a cancelled task) closes the upstream at once.
    """

    def __init__(
        self, recorder: Recorder, prepared: PreparedProvider, live: LiveStream, run: Run
    ) -> None:
        self.recorder = recorder
        self.prepared = prepared
        self.live = live
        self.run = run

    @property
    def trace(self) -> list[Attempt]:
        return self.run.trace

    @property
    def provider(self) -> str:
        return self.prepared.name

    @property
    def replayed(self) -> bool:
        """Whether the provider gave a whole answer (replayed as chunks), not a stream."""
        return self.live.replayed

    @property
    def native(self) -> bool:
        """Whether the provider's own frames are kept for the client (`take_frames`): it
        speaks the API the request arrived in, and this is a live stream, not a replay."""
        return self.live.kept is not None

    def take_frames(self) -> list[Frame]:
        """The provider's (event, data) frames read since the last call, in order; the
        chunks yielded so far came from them (or from frames before them)."""
        kept = self.live.kept
        if not kept:
            return []
        out = kept.copy()
        kept.clear()
        return out

    async def __aiter__(self) -> AsyncIterator[dict[str, Any]]:
        batches = self.batches()
        try:
            async for batch in batches:
                for chunk in batch:
                    yield chunk
        finally:
            await batches.aclose()

    async def batches(self) -> AsyncGenerator[Batch, None]:
        """The chunks as the client is to see them, a batch per read of the upstream (a face
        writes each batch at once); iterating the stream itself gives them one by one."""
        said = Said(keep=self.run.policy.continue_on_cut and not self.native)
        passed = said.batch
        first_cut: Attempt | None = None
        seam: Seam | None = None
        try:
            while True:
                start = time.perf_counter()
                try:
                    async for batch in self.live.rest(self._stall_s(), self._skipped):
                        out = batch if seam is None else [o for c in batch for o in seam.through(c)]
                        if seam is not None and seam.met:
                            seam = None
                        if out:
                            yield passed(out)
                    if seam is not None and (held := seam.end()):
                        yield passed(held)
                    if said.reasoning is not None and not self.native:
                        self.recorder.origins.note(said.reasoning.digest(), self.prepared.origin)
                    return
                except STREAM_FAILURES as exc:
                    ms = (time.perf_counter() - start) * 1000
                    attempt = await self.recorder.cut(self.run, self.prepared, exc, ms)
                    first_cut = first_cut or attempt
                    seam = None  # what it held never reached the client
                    if not await self._continue(said):
                        detail = f"{first_cut.reason} ({first_cut.detail})"
                        message = f"{first_cut.provider} failed mid-stream: {detail}"
                        raise StreamInterrupted(self.trace, message, cut=first_cut) from exc
                    seam = Seam.after(said.text, self.prepared.prefill)
        finally:
            await self.live.aclose()

    def _stall_s(self) -> float | None:
        ms = self.run.policy.stall_ms or self.prepared.spec.stall_ms
        return ms / 1000 if ms else None

    def _skipped(self, exc: Mismatch) -> None:
        self.recorder.skipped(self.run, self.prepared, exc)

    async def _continue(self, said: Said) -> bool:
        """Protocol §10, continuation: when the policy allows it and only text was sent, the next
        provider finishes the answer in this same stream."""
        if not said.keep or not said.texted or said.other:
            return False
        await self.live.aclose()
        resumed = await self.recorder.resume(self.run, said.text)
        if resumed is None:
            return False
        self.prepared, self.live = resumed
        said.resumed()
        return True

    async def aclose(self) -> None:
        await self.live.aclose()


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


def _carried(chunks: Batch) -> Batch:
    """`chunks`, if the faces can carry them; else `Mismatch` (a `schema_mismatch`). A
    `Verbatim` one passed already: a decoder gives one only for a chunk with nothing in it to
    check."""
    for chunk in chunks:
        if type(chunk) is not Verbatim and (problem := completion.malformed(chunk, chunk=True)):
            raise Mismatch(problem)
    return chunks


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
