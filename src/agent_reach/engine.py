"""The one I/O loop: every request of every face (library, CLI, proxy) runs through `Engine`.

For each provider that `routing` hands out, the engine gathers the facts the pure core asks
for (circuit, key, health), does what it decides (probe, send, retry, move on), classifies
what came back through `outcomes`, and records an `Attempt`. Timeouts: each attempt has its
provider's connect and read timeouts, both capped by what is left of the request's deadline.
Streams fail over until the first content chunk; after it, a failure ends the stream with
`StreamInterrupted` (the proxy turns it into a final SSE error event).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import aiohttp

from . import breaker, completion, identity
from .backend import Backend
from .breaker import CircuitState
from .config import Config
from .dialects import Mismatch, ProviderError
from .dialects.base import framer
from .errors import AllProvidersFailed, StreamInterrupted
from .events import AttemptEvent, CircuitEvent, Event, Observer, QuotaEvent, RequestEvent
from .health import CheckResult, HealthMonitor, check_provider
from .outcomes import Outcome, Transport, classify, filtered, mismatch
from .quota import Budget
from .request import ChatRequest
from .routing import Skip, Walk, attempt_order, health_verdict, precheck, retry_delay
from .state import LoggedAttempt, StateStore, open_store
from .trace import Attempt, Reason, Result
from .transport import CLIENT_ERRORS, kind_of, new_session, timeouts

T = TypeVar("T")
# One try of one provider: (outcome, what it produced when ok, raw body when it failed).
Send = Callable[
    [Backend, ChatRequest, str, float], Awaitable[tuple[Outcome, T | None, bytes | None]]
]

_STREAM_FAILURES = (*CLIENT_ERRORS, ProviderError, Mismatch)
HEDGE_LOST = "agent-reach: hedge lost"


@dataclass(slots=True)
class Run:
    """One request on its way: its id, route label and the trace so far."""

    id: str
    route: str
    api: str = "chat"
    trace: list[Attempt] = field(default_factory=list)


class Engine:
    """Runs requests against a config's providers. Create inside or outside a loop; the HTTP
    session is opened on first use and closed by `aclose`."""

    def __init__(
        self,
        config: Config,
        *,
        store: StateStore | None = None,
        clock: Callable[[], float] = time.time,
        environ: dict[str, str] | None = None,
    ) -> None:
        self.config = config
        env = os.environ if environ is None else environ
        self.backends = {
            p.name: Backend.prepare(
                p,
                env,
                config.hook(p.name, "preprocess_hook"),
                config.hook(p.name, "post_process_hook"),
            )
            for p in config.providers
        }
        self.table = config.route_table()
        self._hedge_ms = {n: r.hedge_after_ms for n, r in config.routes.items() if r.hedge_after_ms}
        retention_s = config.retention_days * 86400
        self.store: StateStore = store or open_store(config.state, retention_s=retention_s)
        self.health = HealthMonitor(config.health.mode, config.health.ttl_s, self.store)
        self.clock = clock
        self.tz = config.tz
        self._spans: dict[Budget, tuple[str, float, float]] = {}
        self.observers: list[Observer] = [self._log_attempt]
        self._names = {b.state_key: b.name for b in self.backends.values()}
        self.store.follow(config.circuit, self._circuit_changed)
        self._session: aiohttp.ClientSession | None = None
        self._ids = itertools.count(1)
        self._id_prefix = os.urandom(4).hex()

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = new_session()
        return self._session

    async def aclose(self) -> None:
        """Close the HTTP session (the engine can still be used; it opens a new one)."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def check(self, name: str, model: str | None = None) -> CheckResult:
        """Check provider `name`'s health now (see `health.check_provider`)."""
        return await check_provider(self.session, self.backends[name], model, self.clock())

    def adopt(self, old: Engine) -> None:
        """Take over from the engine of the config this one replaces (a reload) what outlives
        it: the HTTP session with its pooled connections, and the health results of providers
        whose identity did not change. Circuits and quotas live in the shared store by
        identity, so an unchanged provider keeps them and an edited one starts fresh."""
        self._session = old._session
        mine = set(self._names)
        self.health.results.update(
            (key, result) for key, result in old.health.results.items() if key in mine
        )

    def order(self, req: ChatRequest) -> tuple[str, ...]:
        """The providers this request will walk through (spec §3)."""
        return attempt_order(
            self.table,
            self.backends,
            fallback_order=req.fallback_order,
            provider_route=req.provider_route,
            model=req.model,
        )

    # -- the two kinds of request ------------------------------------------------------------

    async def chat(self, req: ChatRequest) -> Result:
        """One non-streamed request with failover."""
        response, provider, run = await self._drive(req, self._send)
        return Result(response, provider, run.trace, self.backends[provider].speaks(req))

    async def stream(self, req: ChatRequest) -> ChatStream:
        """A streamed request, returned once a provider has produced its first content chunk
        (every failure before that fails over)."""
        live, provider, run = await self._drive(req, self._open)
        return ChatStream(self, self.backends[provider], live, run)

    def route_label(self, req: ChatRequest) -> str:
        """The route a request takes, by name, for metrics and events."""
        label = req.route_label
        if label == "default" and req.model and req.model in self.table.routes:
            return req.model  # a model alias (spec §3)
        return label

    # -- the loop ----------------------------------------------------------------------------

    async def step(self, req: ChatRequest, provider: str) -> tuple[Attempt, dict[str, Any] | None]:
        """One provider, one attempt, no failover (spec §9 step mode): the attempt and, when it
        succeeded, the response."""
        try:
            response, _, run = await self._drive(req, self._send, order=(provider,))
        except AllProvidersFailed as exc:
            return exc.attempts[-1], None
        return run.trace[-1], response

    async def _drive(
        self, req: ChatRequest, send: Send[T], order: tuple[str, ...] | None = None
    ) -> tuple[T, str, Run]:
        """Walk the request's providers (or exactly `order`): each in turn, then the ones
        skipped only for remembered state as last resort (spec §4.2)."""
        walk = Walk(self.order(req) if order is None else order)
        run = Run(f"{self._id_prefix}-{next(self._ids)}", self.route_label(req), req.api)
        deadline = time.perf_counter() + (req.deadline_ms or self.config.deadline_ms) / 1000
        while (step := walk.next()) is not None:
            name, last_resort = step
            if time.perf_counter() >= deadline:
                for rest in (name, *walk.drain()):
                    self._record(run, Attempt(rest, Reason.TIMEOUT, detail="deadline"))
                break
            hedge_ms = self._hedge_ms.get(req.provider_route or "") or (
                self.backends[name].spec.hedge_after_ms
            )
            if hedge_ms and order is None:
                payload, name = await self._hedged(
                    name, last_resort, hedge_ms / 1000, req, deadline, run, send, walk
                )
            else:
                payload = await self._turn(name, last_resort, req, deadline, run, send, walk)
            if payload is not None:
                trace = tuple(run.trace)
                self._emit(
                    RequestEvent(
                        run.route, name, trace, req.stream, run.id, run.api, req.model, payload
                    )
                )
                return payload, name, run
        trace = tuple(run.trace)
        self._emit(RequestEvent(run.route, None, trace, req.stream, run.id, run.api, req.model))
        raise AllProvidersFailed(run.trace)

    async def _turn(
        self,
        name: str,
        last_resort: bool,
        req: ChatRequest,
        deadline: float,
        run: Run,
        send: Send[T],
        walk: Walk,
    ) -> T | None:
        """One provider's turn: its skip checks (unless last resort), then its tries."""
        backend = self.backends[name]
        model = backend.model_for(req.model)
        if not last_resort:
            skip = await self._precheck(backend, req, model, deadline, run)
            if skip is not None:
                if skip.deferrable:
                    walk.defer(name)
                return None
        return await self._tries(backend, req, model, deadline, last_resort, run, send)

    async def _hedged(
        self,
        name: str,
        last_resort: bool,
        hedge_s: float,
        req: ChatRequest,
        deadline: float,
        run: Run,
        send: Send[T],
        walk: Walk,
    ) -> tuple[T | None, str]:
        """Spec §4.3: when `name` has not answered after `hedge_s`, the next provider starts
        too; the first valid answer wins and the other try is cancelled."""
        tasks = {
            asyncio.ensure_future(
                self._turn(name, last_resort, req, deadline, run, send, walk)
            ): name
        }
        done, _ = await asyncio.wait(tasks, timeout=hedge_s)
        if not done and (step := walk.next()) is not None:
            extra = self._turn(step[0], step[1], req, deadline, run, send, walk)
            tasks[asyncio.ensure_future(extra)] = step[0]
        winner: tuple[T, str] | None = None
        try:
            while tasks and winner is None:
                done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    provider, payload = tasks.pop(task), task.result()
                    if payload is not None and winner is None:
                        winner = (payload, provider)
                    elif isinstance(payload, LiveStream):  # a second stream that also started
                        await payload.aclose()
        finally:
            for task in tasks:
                task.cancel(HEDGE_LOST)
            for late in await asyncio.gather(*tasks, return_exceptions=True):
                if isinstance(late, LiveStream):
                    await late.aclose()
        return winner if winner is not None else (None, name)

    async def _precheck(
        self,
        backend: Backend,
        req: ChatRequest,
        model: str,
        deadline: float,
        run: Run,
    ) -> Skip | None:
        """Skip decisions (spec §4 steps 1-2), the health check, and the circuit's admission."""
        now = self.clock()
        circuit = await self.store.circuit(backend.state_key)
        skip = precheck(
            serves_model=backend.serves(req.model),
            model=req.model,
            circuit=circuit,
            exhausted=await self._exhausted(backend, now),
            missing_key=backend.missing_key,
            now=now,
        )
        if skip is None:
            checked = await self.health.check(
                self.session, backend, now, deadline - time.perf_counter()
            )
            if checked is not None:
                health, probed = checked
                verdict = health_verdict(health, model=model, probed_now=probed, now=now)
                if verdict is not None:
                    ms = health.ms if probed else 0.0
                    self._record(run, self._attempt(backend, verdict, ms, False))
                    await self._update_circuit(backend, verdict)
                    return Skip(verdict.reason, verdict.detail)
        else:
            self._record(run, Attempt(backend.name, skip.reason, None, 0.0, skip.detail))
            return skip
        lease = (backend.connect_s + backend.read_s) * (backend.spec.retries + 1)
        _, leased = breaker.admit(circuit, now, max(lease, 1.0))
        if leased != circuit and not await self.store.lease(backend.state_key, leased):
            skip = Skip(Reason.CIRCUIT_OPEN, "half-open: the one trial is another instance's")
            self._record(run, Attempt(backend.name, skip.reason, None, 0.0, skip.detail))
            return skip
        return None

    async def _tries(
        self,
        backend: Backend,
        req: ChatRequest,
        model: str,
        deadline: float,
        last_resort: bool,
        run: Run,
        send: Send[T],
    ) -> T | None:
        """Send to one provider, retrying as its `retries` say; the payload, or None."""
        tries = 0
        while True:
            start = time.perf_counter()
            if start >= deadline:
                self._record(run, Attempt(backend.name, Reason.TIMEOUT, detail="deadline"))
                return None
            try:
                outcome, payload, raw = await send(backend, req, model, deadline - start)
            except asyncio.CancelledError as exc:
                if exc.args[:1] == (HEDGE_LOST,):  # honest about the try that lost the race
                    ms = (time.perf_counter() - start) * 1000
                    lost = Outcome(
                        Reason.TIMEOUT, None, "hedged: cancelled, another provider answered first"
                    )
                    self._record(run, self._attempt(backend, lost, ms, last_resort))
                raise
            ms = (time.perf_counter() - start) * 1000
            attempt = self._attempt(backend, outcome, ms, last_resort)
            self._record(run, attempt, backend.excerpt(raw))
            await self._update_circuit(backend, outcome)
            if backend.budgets and outcome.reason is not Reason.CONNECT_FAILED:
                await self._count(backend, payload if isinstance(payload, dict) else None)
            if outcome.reason is Reason.OK:
                return payload
            delay = retry_delay(
                outcome,
                tries=tries,
                retries=backend.spec.retries,
                remaining_s=deadline - time.perf_counter(),
            )
            if delay is None:
                return None
            await asyncio.sleep(delay)
            tries += 1

    # -- sending -----------------------------------------------------------------------------

    async def _send(
        self, backend: Backend, req: ChatRequest, model: str, remaining_s: float
    ) -> tuple[Outcome, dict[str, Any] | None, bytes | None]:
        """One non-streamed try: the answer normalized, or as the provider gave it when the
        request asks for that (`raw_response`) or the provider speaks the request's API."""
        raw = req.raw_response or backend.speaks(req)
        return await self._fetch(backend, req, model, remaining_s, raw)

    async def _fetch(
        self, backend: Backend, req: ChatRequest, model: str, remaining_s: float, raw_body: bool
    ) -> tuple[Outcome, dict[str, Any] | None, bytes | None]:
        """POST, read the whole answer, judge it."""
        limit = asyncio.timeout(remaining_s)
        try:
            async with (
                limit,
                self.session.post(
                    backend.url(model, False),
                    data=backend.body(req, model, False),
                    headers=backend.headers_for(req, False),
                    timeout=timeouts(backend.connect_s, backend.read_s, remaining_s),
                    allow_redirects=False,
                ) as resp,
            ):
                raw = await resp.read()
        except CLIENT_ERRORS as exc:
            return self._transport_failure(exc, limit), None, None
        outcome, response = backend.judge(
            status=resp.status,
            content_type=resp.content_type,
            raw=raw,
            retry_after=resp.headers.get("Retry-After"),
            model=model,
            requested=req.model,
            raw_response=raw_body,
            now=self.clock(),
        )
        return outcome, response, None if outcome.reason is Reason.OK else raw

    async def _open(
        self, backend: Backend, req: ChatRequest, model: str, remaining_s: float
    ) -> tuple[Outcome, LiveStream | None, bytes | None]:
        """One streamed try, up to its first content chunk (spec §10 "Streaming")."""
        if backend.has_hooks:  # hooks transform whole answers: ask for one, replay it
            outcome, body, raw = await self._fetch(backend, req, model, remaining_s, False)
            return (
                outcome,
                None if body is None else LiveStream.replay(completion.as_chunks(body)),
                raw,
            )
        limit = asyncio.timeout(remaining_s)
        resp: aiohttp.ClientResponse | None = None
        live: LiveStream | None = None
        status: int | None = None
        handed_over = False
        try:
            async with limit:
                resp = await self.session.post(
                    backend.url(model, True),
                    data=backend.body(req, model, True),
                    headers=backend.headers_for(req, True),
                    timeout=timeouts(backend.connect_s, backend.read_s, remaining_s),
                    allow_redirects=False,
                )
                status = resp.status
                ctype = resp.content_type
                if not 200 <= status < 300 or ctype == "application/json" or "html" in ctype:
                    # An error, or a whole answer to a stream request: judge it as one.
                    raw = await resp.read()
                    outcome, body = backend.judge(
                        status=status,
                        content_type=ctype,
                        raw=raw,
                        retry_after=resp.headers.get("Retry-After"),
                        model=model,
                        requested=req.model,
                        raw_response=False,
                        now=self.clock(),
                    )
                    if body is None:
                        return outcome, None, raw
                    return outcome, LiveStream.replay(completion.as_chunks(body)), None
                ctx = backend.context(model, int(self.clock()))
                live = LiveStream(
                    resp,
                    framer(backend.dialect.framing),
                    backend.dialect.decoder(ctx),
                    keep_frames=backend.speaks(req),
                )
                if not await live.first_content():
                    choices = [c for chunk in live.pending for c in chunk.get("choices") or ()]
                    if completion.filtered(choices):
                        return filtered(status), None, None
                    return mismatch("stream ended without content", status), None, None
                handed_over = True
                return Outcome(Reason.OK, status), live, None
        except _STREAM_FAILURES as exc:
            return self._stream_failure(exc, limit, status), None, None
        finally:  # also on cancellation: nothing of a failed try stays open
            if not handed_over:
                if live is not None:
                    await live.aclose()
                elif resp is not None:
                    resp.close()

    def _transport_failure(self, exc: BaseException, limit: asyncio.Timeout) -> Outcome:
        kind, text = (Transport.DEADLINE, "") if limit.expired() else kind_of(exc)
        return classify(transport=kind, transport_detail=text)

    def _stream_failure(
        self, exc: BaseException, limit: asyncio.Timeout | None, status: int | None
    ) -> Outcome:
        if isinstance(exc, ProviderError):
            return classify(status=status, error=exc.info, now=self.clock())
        if isinstance(exc, Mismatch):
            return mismatch(str(exc), status)
        if limit is None:
            kind, text = kind_of(exc)
            return classify(transport=kind, transport_detail=text)
        return self._transport_failure(exc, limit)

    # -- bookkeeping -------------------------------------------------------------------------

    def _attempt(self, backend: Backend, outcome: Outcome, ms: float, last_resort: bool) -> Attempt:
        return Attempt(
            backend.name,
            outcome.reason,
            outcome.status,
            ms,
            backend.redact(outcome.detail),
            last_resort,
        )

    def _record(self, run: Run, attempt: Attempt, raw: str | None = None) -> None:
        run.trace.append(attempt)
        self._emit(AttemptEvent(run.route, attempt, raw, run.id))

    def _log_attempt(self, event: Event) -> None:
        """The attempt log (spec §12), by provider identity, written by the store in batches."""
        if isinstance(event, AttemptEvent):
            a = event.attempt
            self.store.record(
                LoggedAttempt(
                    self.clock(),
                    event.request,
                    event.route,
                    self.backends[a.provider].state_key,
                    a.reason.value,
                    a.status,
                    a.ms,
                    a.last_resort,
                )
            )

    # -- budgets (spec §12) ----------------------------------------------------------------

    def _windows(self, backend: Backend, now: float) -> list[tuple[Budget, str, float]]:
        """(budget, store key, window end) of each budget's current window; a window is
        worked out once and reused until the clock leaves it."""
        out = []
        for budget in backend.budgets:
            span = self._spans.get(budget)
            if span is None or not span[1] <= now < span[2]:
                span = self._spans[budget] = budget.span(now, self.tz)
            out.append((budget, f"{span[0]}|{budget.unit}", span[2]))
        return out

    async def _exhausted(self, backend: Backend, now: float) -> str | None:
        """Which budget of the provider is used up in its current window, if any."""
        for budget, key, _ in self._windows(backend, now):
            if await self.store.usage(backend.quota_key, key) >= budget.limit:
                return f"{budget} used up until the {budget.window} ends"
        return None

    async def quota_use(self, name: str) -> list[dict[str, Any]]:
        """The provider's budgets and how much of each its current window has used."""
        now = self.clock()
        backend = self.backends[name]
        return [
            {
                "budget": str(budget),
                "window": key.rpartition("|")[0],
                "used": (used := await self.store.usage(backend.quota_key, key)),
                "limit": budget.limit,
                "ratio": round(used / budget.limit, 4),
            }
            for budget, key, _ in self._windows(backend, now)
        ]

    # -- what the store remembers (spec §12 identity) ------------------------------------------

    async def remembered(self, name: str) -> dict[str, Any]:
        """A configured provider's remembered state: its fingerprint, circuit and budget use."""
        backend = self.backends[name]
        circuit = await self.store.circuit(backend.state_key)
        return {
            "fingerprint": identity.split(backend.state_key)[1],
            "circuit": circuit.view(self.clock()),
            "quota": await self.quota_use(name),
        }

    async def remembered_elsewhere(self) -> list[dict[str, Any]]:
        """What the store holds for identities outside this config (other configs, or this
        one's providers before their endpoint or key changed): circuits and budget counters,
        each with its provider name and fingerprint."""
        mine = {b.state_key for b in self.backends.values()}
        mine |= {b.quota_key for b in self.backends.values()}
        circuits, used = await self.store.entries()
        now = self.clock()
        rows: list[dict[str, Any]] = []
        for key, state in sorted(circuits.items()):
            if key not in mine:
                name, fp = identity.split(key)
                rows.append({"provider": name, "fingerprint": fp, "circuit": state.view(now)})
        for (key, window), count in sorted(used.items()):
            if key not in mine:
                name, fp = identity.split(key)
                rows.append(
                    {
                        "provider": name,
                        "fingerprint": fp,
                        "quota": [{"window": window.rpartition("|")[0], "used": count}],
                    }
                )
        return rows

    async def logged(self, since: float, everything: bool = False) -> list[LoggedAttempt]:
        """The attempt log since `since`, by provider name: this config's providers (lines
        written before identities count by name), or with `everything` every line, those of
        other identities named `NAME@FINGERPRINT`."""
        names = dict(self._names)
        names.update((n, n) for n in self.backends)
        out = []
        for a in await self.store.attempts(since):
            name = names.get(a.provider)
            if name is not None:
                out.append(a if name == a.provider else replace(a, provider=name))
            elif everything:
                out.append(a)
        return out

    async def _count(self, backend: Backend, response: dict[str, Any] | None) -> None:
        """Count one request (and its tokens) into the provider's budgets."""
        now = self.clock()
        tokens = ((response or {}).get("usage") or {}).get("total_tokens")
        for budget, key, end in self._windows(backend, now):
            amount = 1 if budget.unit == "req" else tokens if isinstance(tokens, int) else 0
            if amount:
                used = await self.store.add_usage(backend.quota_key, key, amount, end - now)
                self._emit(QuotaEvent(backend.name, budget, key, used, now))

    def _emit(self, event: Event) -> None:
        for observer in self.observers:
            observer(event)

    async def _update_circuit(self, backend: Backend, outcome: Outcome) -> None:
        now = self.clock()
        before = await self.store.circuit(backend.state_key)
        after = breaker.record(
            before, outcome.reason, now, self.config.circuit, outcome.retry_after
        )
        if after == before:
            return
        await self.store.set_circuit(backend.state_key, after)
        self._circuit_changed(backend.state_key, before, after)

    def _circuit_changed(self, key: str, before: CircuitState, after: CircuitState) -> None:
        """Tell observers when a circuit opened or closed, here or (through the store)
        elsewhere in a fleet."""
        name = self._names.get(key)
        if name is None:
            return
        now = self.clock()
        if after.is_open(now) and not before.is_open(now):
            self._emit(CircuitEvent(name, True, after))
        elif after.closed and not before.closed:
            self._emit(CircuitEvent(name, False, after))


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

    async def _read(self) -> AsyncGenerator[dict[str, Any], None]:
        assert self.resp is not None
        kept = self.kept
        async for line in self.resp.content:
            frame = self.frames.line(line)
            if frame is not None:
                if kept is not None:
                    kept.append(frame)
                for chunk in self.decoder.feed(*frame):
                    yield chunk
        frame = self.frames.flush()
        if frame is not None:
            if kept is not None:
                kept.append(frame)
            for chunk in self.decoder.feed(*frame):
                yield chunk
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


class ChatStream:
    """A stream that has started: who answers (`provider`), the trace so far, and the chunks.

    Iterate it once. A failure after the first chunk records an attempt and raises
    `StreamInterrupted`; leaving early (or a cancelled task) closes the upstream at once.
    """

    def __init__(self, engine: Engine, backend: Backend, live: LiveStream, run: Run) -> None:
        self.engine = engine
        self.backend = backend
        self.live = live
        self.run = run

    @property
    def trace(self) -> list[Attempt]:
        return self.run.trace

    @property
    def provider(self) -> str:
        return self.backend.name

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
        start = time.perf_counter()
        try:
            async for chunk in self.live.rest():
                yield chunk
        except _STREAM_FAILURES as exc:
            outcome = self.engine._stream_failure(exc, None, None)
            detail = f"after the first chunk: {outcome.detail}"
            cut = Outcome(outcome.reason, outcome.status, detail)
            ms = (time.perf_counter() - start) * 1000
            attempt = self.engine._attempt(self.backend, cut, ms, False)
            self.engine._record(self.run, attempt)
            await self.engine._update_circuit(self.backend, cut)
            raise StreamInterrupted(
                self.trace,
                f"{self.provider} failed mid-stream: {attempt.reason} ({attempt.detail})",
            ) from exc
        finally:
            await self.live.aclose()

    async def aclose(self) -> None:
        await self.live.aclose()
