"""Streams: one provider's open stream (`LiveStream`), and the stream a caller iterates
(`ChatStream`), which reports a failure after its first chunk to whoever ran the request.

Failover is allowed until the first content chunk (protocol §10 "Streaming"), so a `LiveStream`
reads ahead to its first content, buffering what came before; the engine hands it over only
then. After that point a failure cannot be hidden: `ChatStream` records it (`Recorder.cut`)
and raises `StreamInterrupted`.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import TYPE_CHECKING, Any, Protocol

import aiohttp

from . import completion
from .dialects import Mismatch, ProviderError
from .errors import StreamInterrupted
from .routing import Run
from .trace import Attempt
from .transport import CLIENT_ERRORS

if TYPE_CHECKING:
    from .prepared import PreparedProvider

STREAM_FAILURES = (*CLIENT_ERRORS, ProviderError, Mismatch)


class LiveStream:
    """One provider's open stream: its frames decoded into OpenAI chunks."""

    def __init__(
        self,
        resp: aiohttp.ClientResponse | None,
        frames: Any,
        decoder: Any,
        pending: list[dict[str, Any]] | None = None,
        *,
        keep_frames: bool = False,
    ) -> None:
        self.resp = resp
        self.frames = frames
        self.decoder = decoder
        self.pending: list[dict[str, Any]] = pending or []
        # The provider's own frames, kept for a client that speaks its API (`take_frames`).
        self.kept: list[tuple[str | None, bytes]] | None = [] if keep_frames else None
        self._chunks = self._read() if resp is not None else None
        self._complete = False

    @classmethod
    def replay(cls, chunks: list[dict[str, Any]]) -> LiveStream:
        """A stream made of chunks already in hand (a whole answer to a stream request)."""
        return cls(None, None, None, chunks)

    @property
    def replayed(self) -> bool:
        """Whether this is a whole answer replayed as chunks, not a provider's stream."""
        return self.resp is None

    async def _read(self) -> AsyncGenerator[dict[str, Any], None]:
        assert self.resp is not None
        kept = self.kept
        async for line in self.resp.content:
            frame = self.frames.line(line)
            if frame is not None:
                if kept is not None:
                    kept.append(frame)
                for chunk in self.decoder.feed(*frame):
                    yield _carried(chunk)
        frame = self.frames.flush()
        if frame is not None:
            if kept is not None:
                kept.append(frame)
            for chunk in self.decoder.feed(*frame):
                yield _carried(chunk)
        if not self.decoder.finished:
            raise aiohttp.ServerDisconnectedError("stream ended before the answer was complete")
        self._complete = True

    async def first_content(self) -> bool:
        """Read until a chunk carries content (buffering the ones before); False if the
        stream ended without any."""
        assert self._chunks is not None
        async for chunk in self._chunks:
            self.pending.append(chunk)
            if completion.has_content(chunk):
                return True
        return False

    async def rest(self) -> AsyncIterator[dict[str, Any]]:
        """Every chunk: the buffered ones, then the rest as they arrive."""
        pending, self.pending = self.pending, []
        for chunk in pending:
            yield chunk
        if self._chunks is not None:
            async for chunk in self._chunks:
                yield chunk

    async def aclose(self) -> None:
        if self._chunks is not None:
            await self._chunks.aclose()
        if self.resp is not None:
            if self._complete:
                self.resp.release()  # the connection goes back to the pool
            else:
                self.resp.close()


class Recorder(Protocol):
    """Who ran the request: told when its stream fails after the first chunk."""

    async def cut(
        self, run: Run, prepared: PreparedProvider, exc: BaseException, ms: float
    ) -> Attempt:
        """Record the failure (its attempt, the circuit); the attempt recorded."""
        ...

    async def resume(self, run: Run, partial: str) -> tuple[PreparedProvider, LiveStream] | None:
        """The next provider's stream finishing the answer cut after `partial`, or None."""
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

    def take_frames(self) -> list[tuple[str | None, bytes]]:
        """The provider's (event, data) frames read since the last call, in order; the
        chunks yielded so far came from them (or from frames before them)."""
        kept = self.live.kept
        if not kept:
            return []
        out = kept.copy()
        kept.clear()
        return out

    async def __aiter__(self) -> AsyncIterator[dict[str, Any]]:
        said = Said(keep=self.run.policy.continue_on_cut and not self.native)
        try:
            while True:
                start = time.perf_counter()
                try:
                    async for chunk in self.live.rest():
                        yield said.passed(chunk)
                    return
                except STREAM_FAILURES as exc:
                    ms = (time.perf_counter() - start) * 1000
                    attempt = await self.recorder.cut(self.run, self.prepared, exc, ms)
                    if not await self._continue(said):
                        detail = f"{attempt.reason} ({attempt.detail})"
                        message = f"{self.provider} failed mid-stream: {detail}"
                        raise StreamInterrupted(self.trace, message) from exc
        finally:
            await self.live.aclose()

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
        said.continuing = True
        return True

    async def aclose(self) -> None:
        await self.live.aclose()


class Said:
    """What a stream has sent its client: whether text went, and the text itself when a cut
    may be continued (`keep`: else an unread stream would hold every piece it wrote, 250 KB
    more per stream in bench/abuse.py); whether anything else (a tool call, reasoning) went
    too; and the first chunk's id, model and time, which a continuation's chunks take so that
    the client sees one stream."""

    __slots__ = ("_blocks", "_recent", "continuing", "head", "keep", "other", "texted")

    def __init__(self, keep: bool) -> None:
        self.keep = keep
        self.texted = False
        self._blocks: list[str] = []  # the kept text, joined 256 pieces at a time
        self._recent: list[str] = []
        self.other = False
        self.head: dict[str, Any] | None = None
        self.continuing = False

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

    def passed(self, chunk: dict[str, Any]) -> dict[str, Any]:
        """Note `chunk`, as the client will see it."""
        if self.head is None:
            self.head = {k: chunk[k] for k in ("id", "model", "created") if k in chunk}
        elif self.continuing:
            chunk = {**chunk, **self.head, "choices": [_without_role(c) for c in chunk["choices"]]}
        for c in chunk.get("choices") or ():
            delta = c.get("delta") or {}
            if delta.get("content"):
                self._note(delta["content"])
            if (
                delta.get("tool_calls")
                or delta.get("reasoning_content")
                or delta.get("function_call")
            ):
                self.other = True
        return chunk


def _carried(chunk: dict[str, Any]) -> dict[str, Any]:
    """`chunk`, if the faces can carry it; else `Mismatch` (a `schema_mismatch`)."""
    problem = completion.malformed(chunk, chunk=True)
    if problem is not None:
        raise Mismatch(problem)
    return chunk


def _without_role(choice: dict[str, Any]) -> dict[str, Any]:
    delta = choice.get("delta") or {}
    if "role" not in delta:
        return choice
    return {**choice, "delta": {k: v for k, v in delta.items() if k != "role"}}
