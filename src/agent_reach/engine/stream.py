"""The stream a caller iterates (`ChatStream`, over one provider's `live.LiveStream`), which
reports a failure after its first chunk to whoever ran the request.

Failover is allowed until the first content chunk (protocol §10 "Streaming"), so a `LiveStream`
reads ahead to its first content, buffering what came before; the engine hands it over only
then. After that point a failure cannot be hidden: `ChatStream` records it (`Recorder.cut`)
and raises `StreamInterrupted`, unless the next provider finishes the answer (continuation,
`Recorder.resume`), its opening trimmed of what it repeats (`resume.Seam`). After the first
content a stream that sends nothing for its `stall_ms` is cut (`live.Stalled`), and one
malformed frame is skipped when the frame after it is sound (`Recorder.skipped`)."""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import TYPE_CHECKING, Any, Protocol

from ..chat import callids
from ..core.errors import StreamInterrupted
from ..core.trace import Attempt
from ..dialects import Mismatch, artifacts
from .hold import Held
from .live import STREAM_FAILURES, Batch, Frame, LiveStream
from .resume import Said, Seam
from .run import Run

if TYPE_CHECKING:
    from .prepared import PreparedProvider


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
        self.ids: callids.CallIds | None = None  # the conversation's tool-call ids, once needed
        self.held = Held(self._fresh)  # a chat stream's tool calls, until whole

    @property
    def trace(self) -> list[Attempt]:
        return self.run.trace

    @property
    def provider(self) -> str:
        return self.prepared.name

    def echoed(self, names: tuple[str, ...]) -> dict[str, str]:
        """The provider's own answer headers among `names` (lowercase), when it speaks the
        request's API itself: for a client of that API (Codex's `x-codex-turn-state`)."""
        resp = self.live.resp
        if resp is None or not names or not self.prepared.speaks(self.run.req):
            return {}
        return {name: resp.headers[name] for name in names if name in resp.headers}

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
                        if not self.native:
                            out = self.held.batch(out)
                        if out:
                            yield passed(out)
                    if seam is not None and (held := seam.end()):
                        yield passed(held)
                    if rest := self.held.rest():
                        yield passed(rest)
                    if said.reasoning is not None and not self.native:
                        self.recorder.origins.note(said.reasoning.digest(), self.prepared.origin)
                    return
                except STREAM_FAILURES as exc:
                    ms = (time.perf_counter() - start) * 1000
                    attempt = await self.recorder.cut(self.run, self.prepared, exc, ms)
                    first_cut = first_cut or attempt
                    seam = None  # what it held never reached the client
                    self.held = Held(self._fresh)  # nor did a tool call not yet whole
                    if not await self._continue(said):
                        detail = f"{first_cut.reason} ({first_cut.detail})"
                        message = f"{first_cut.provider} failed mid-stream: {detail}"
                        raise StreamInterrupted(self.trace, message, cut=first_cut) from exc
                    prefilled = self.prepared.prefill and bool(self.run.req.continuing)
                    seam = Seam.after(said.text, prefilled)
        finally:
            await self.live.aclose()

    def _fresh(self, call_id: Any) -> Any:
        """A chat provider's tool-call id, renamed when the conversation holds it already
        (`callids`; its ids are read at the first call)."""
        self.ids = self.ids or callids.CallIds.of(self.run.req.body)
        return self.ids.fresh(call_id)

    def _stall_s(self) -> float | None:
        ms = self.run.policy.stall_ms or self.prepared.spec.stall_ms
        return ms / 1000 if ms else None

    def _skipped(self, exc: Mismatch) -> None:
        self.recorder.skipped(self.run, self.prepared, exc)

    async def _continue(self, said: Said) -> bool:
        """Protocol §10, continuation: when the policy allows it and only text was sent, the next
        provider finishes the answer in this same stream."""
        if not said.keep or said.other:  # nothing sent, or text only: the next one goes on
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
