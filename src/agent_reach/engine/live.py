"""One try's stream (protocol §10, "Streaming"): the provider's response read frame by frame
through its dialect's decoder into chat chunks (`LiveStream`), with backpressure, the stall
timer and, for a client that speaks the provider's API, the provider's own frames kept."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

from ..chat import completion
from ..core.redaction import Redactor
from ..dialects import Mismatch, ProviderError, Verbatim
from ..net.exchange import Response
from ..net.failures import Disconnected, ReadTimeout
from ..net.transport import CLIENT_ERRORS

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
        redactor: Redactor | None = None,
    ) -> None:
        self.resp = resp
        self.frames = frames
        self.decoder = decoder
        self.pending: list[dict[str, Any]] = pending or []
        # The provider's own frames, kept for a client that speaks its API (`take_frames`).
        self.kept: list[Frame] | None = [] if keep_frames else None
        self.mark = mark  # what a kept frame becomes (its artifacts tagged), if anything
        self.redactor = redactor  # the provider's secrets, out of every line; None: it has none
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
        clean = None if self.redactor is None else self.redactor.body
        if self._stall_s is None:
            return await resp.lines(clean=clean)
        limit = asyncio.timeout(self._stall_s)
        try:
            async with limit:
                return await resp.lines(clean=clean)
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


def _carried(chunks: Batch) -> Batch:
    """`chunks`, if the faces can carry them; else `Mismatch` (a `schema_mismatch`). A
    `Verbatim` one passed already: a decoder gives one only for a chunk with nothing in it to
    check."""
    for chunk in chunks:
        if type(chunk) is not Verbatim and (problem := completion.malformed(chunk, chunk=True)):
            raise Mismatch(problem)
    return chunks
