"""The one I/O loop: every request of every face (library, CLI, proxy) runs through `Engine`.

The engine decides nothing itself. It walks the request's providers as `routing.Walk` hands
them out, and runs each provider's turn as `turn.Turn` says: it gathers the free facts the
machine asks for (circuit, key, budgets, model), consults the health check, sends (`send`),
sleeps before a retry, and feeds each outcome back. What an outcome does to the circuit is
`breaker`'s to decide, and whether it counts against budgets `quota`'s; the engine applies both
and records an `Attempt`. Timeouts: each try has its provider's connect and read timeouts,
both capped by what is left of the request's deadline, which is kept on an injectable
monotonic clock (`monotonic`). Streams fail over until their first content chunk (`stream`).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any, TypeVar

import aiohttp

from . import breaker, quota
from .backend import Backend
from .breaker import CircuitState
from .config import Config
from .errors import AllProvidersFailed
from .events import AttemptEvent, CircuitEvent, Event, Observer, QuotaEvent, RequestEvent
from .health import CheckResult, HealthMonitor, check_provider
from .outcomes import Outcome
from .request import ChatRequest
from .routing import Expired, Run, Walk, attempt_order
from .send import Target, Tried, fetch, open_stream, stream_failure
from .state import StateStore, open_store
from .state.log import AttemptLog
from .stream import ChatStream, LiveStream
from .trace import Attempt, Reason, Result
from .transport import new_session
from .turn import DEADLINE, Action, Done, Facts, Gather, Probe, Send, Skip, Sleep, Turn

T = TypeVar("T")
Sender = Callable[[aiohttp.ClientSession, Target, float, float], Awaitable[Tried[T]]]
Step = tuple[str, bool]  # (provider, is a last resort)

HEDGE_LOST = "agent-reach: hedge lost"
LOST = Outcome(Reason.TIMEOUT, None, "hedged: cancelled, another provider answered first")


class Engine:
    """Runs requests against a config's providers. Create inside or outside a loop; the HTTP
    session is opened on first use and closed by `aclose`. `clock` is the wall clock (circuits
    and budgets are kept in it, shared between processes); `monotonic` times deadlines."""

    def __init__(
        self,
        config: Config,
        *,
        store: StateStore | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.perf_counter,
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
        self.monotonic = monotonic
        self.windows = quota.Windows(config.tz)
        keys = {name: b.state_key for name, b in self.backends.items()}
        self.observers: list[Observer] = [AttemptLog(self.store, keys, clock)]
        self.names = {key: name for name, key in keys.items()}
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

    async def refresh_health(self) -> None:
        """Run every enabled provider's health check now (health mode `background`)."""
        enabled = [b for b in self.backends.values() if self.health.enabled(b)]
        now = self.clock()
        await asyncio.gather(
            *(self.health.refresh(self.session, b, now, b.connect_s + b.read_s) for b in enabled)
        )

    def adopt(self, old: Engine) -> None:
        """Take over from the engine of the config this one replaces (a reload) what outlives
        it: the HTTP session with its pooled connections, and the health results of providers
        whose identity did not change. Circuits and quotas live in the shared store by
        identity, so an unchanged provider keeps them and an edited one starts fresh."""
        self._session = old._session
        self.health.results.update(
            (key, result) for key, result in old.health.results.items() if key in self.names
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

    def route_label(self, req: ChatRequest) -> str:
        """The route a request takes, by name, for metrics and events."""
        label = req.route_label
        if label == "default" and req.model and req.model in self.table.routes:
            return req.model  # a model alias (spec §3)
        return label

    # -- the three kinds of request ------------------------------------------------------------

    async def chat(self, req: ChatRequest) -> Result:
        """One non-streamed request with failover."""
        response, provider, run = await self._drive(self._run(req), fetch)
        return Result(response, provider, run.trace, self.backends[provider].speaks(req))

    async def stream(self, req: ChatRequest) -> ChatStream:
        """A streamed request, returned once a provider has produced its first content chunk
        (every failure before that fails over)."""
        live, provider, run = await self._drive(self._run(req), open_stream)
        return ChatStream(self, self.backends[provider], live, run)

    async def resume(self, run: Run, partial: str) -> tuple[Backend, LiveStream] | None:
        """A stream was cut after `partial` (text only): the next providers of its walk, asked
        to finish that answer (spec §10, continuation); None when none can."""
        run.req = replace(run.req, continuing=partial)
        found = await self._walk(run, open_stream)
        return None if found is None else (self.backends[found[1]], found[0])

    def continues(self, run: Run) -> bool:
        """Whether a stream cut mid-answer is finished by the next provider: the route's
        `continue_on_cut`, else the config's."""
        route = self.config.routes.get(run.route)
        chosen = route.continue_on_cut if route is not None else None
        return self.config.continue_on_cut if chosen is None else chosen

    async def step(self, req: ChatRequest, provider: str) -> tuple[Attempt, dict[str, Any] | None]:
        """One provider, no failover (spec §9 step mode): the attempt and, when it succeeded,
        the response. A provider skipped for remembered state is still tried (last resort)."""
        try:
            response, _, run = await self._drive(self._run(req, provider), fetch)
        except AllProvidersFailed as exc:
            return exc.attempts[-1], None
        return run.trace[-1], response

    def _run(self, req: ChatRequest, only: str | None = None) -> Run:
        """A request's run: its walk (`only` one provider, in step mode), its deadline."""
        budget_s = (req.deadline_ms or self.config.deadline_ms) / 1000
        run_id = f"{self._id_prefix}-{next(self._ids)}"
        walk = Walk(self.order(req) if only is None else (only,))
        deadline = self.monotonic() + budget_s
        return Run(req, run_id, self.route_label(req), walk, deadline, hedged=only is None)

    # -- the walk ----------------------------------------------------------------------------

    async def _drive(self, run: Run, send: Sender[T]) -> tuple[T, str, Run]:
        """Walk the request's providers; an event when the request ends."""
        found = await self._walk(run, send)
        if found is None:
            self._ended(run, None, None)
            raise AllProvidersFailed(run.trace, stopped=run.walk.stopped)
        payload, name = found
        self._ended(run, name, payload)
        return payload, name, run

    async def _walk(self, run: Run, send: Sender[T]) -> tuple[T, str] | None:
        """Each of the walk's providers in turn, then the ones skipped only for remembered
        state as last resort (spec §4.2): the first answer and who gave it, or None."""
        while (step := run.walk.next(run.left(self.monotonic()))) is not None:
            if isinstance(step, Expired):
                for name in step.providers:
                    self._record(run, Attempt(name, DEADLINE.reason, detail=DEADLINE.detail))
                break
            hedge_ms = self._hedge_ms.get(run.req.provider_route or "") or (
                self.backends[step[0]].spec.hedge_after_ms
            )
            if hedge_ms and run.hedged:
                payload, name = await self._hedged(run, step, hedge_ms / 1000, send)
            else:
                payload, name = await self._turn(run, step, send), step[0]
            if payload is not None:
                return payload, name
        return None

    def _ended(self, run: Run, provider: str | None, payload: Any) -> None:
        req = run.req
        trace = tuple(run.trace)
        event = RequestEvent(
            run.route, provider, trace, req.stream, run.id, req.api, req.model, payload
        )
        self._emit(event)

    async def _hedged(
        self, run: Run, first: Step, hedge_s: float, send: Sender[T]
    ) -> tuple[T | None, str]:
        """Spec §4.3: when `first` has not answered after `hedge_s`, the next provider starts
        too; the first valid answer wins and the other try is cancelled."""
        tasks = {asyncio.ensure_future(self._turn(run, first, send)): first[0]}
        done, _ = await asyncio.wait(tasks, timeout=hedge_s)
        if not done and isinstance(step := run.walk.next(run.left(self.monotonic())), tuple):
            tasks[asyncio.ensure_future(self._turn(run, step, send))] = step[0]
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
        return winner if winner is not None else (None, first[0])

    # -- one provider's turn -----------------------------------------------------------------

    async def _turn(self, run: Run, step: Step, send: Sender[T]) -> T | None:
        """Do what the provider's `Turn` decides until it is done: the payload, or None."""
        backend = self.backends[step[0]]
        turn = Turn(backend.name, step[1], backend.spec.retries)
        target = Target.of(backend, run.req, self._first_token_s(run, backend))
        action: Action = turn.begin()
        while True:
            if isinstance(action, Gather):
                action = turn.consider(await self._facts(run, backend, target), self.clock())
            elif isinstance(action, Probe):
                left = run.left(self.monotonic())
                health, probed = await self.health.consult(
                    self.session, backend, self.clock(), left
                )
                action = turn.checked(health, probed, self.clock())
            elif isinstance(action, Skip):
                await self._skip(run, turn, backend, action)
                return None
            elif isinstance(action, Send):
                if action.lease is not None and not await self.store.lease(
                    backend.state_key, action.lease
                ):
                    action = turn.lease_lost()
                    continue
                tried = await self._try(run, target, send, step[1])
                if tried.outcome.reason is Reason.OK:
                    return tried.payload
                action = turn.sent(tried.outcome, run.left(self.monotonic()))
            elif isinstance(action, Sleep):
                await asyncio.sleep(action.seconds)
                action = turn.woke(run.left(self.monotonic()))
            else:
                assert isinstance(action, Done)
                return None

    async def _facts(self, run: Run, backend: Backend, target: Target) -> Facts:
        """The free facts a turn considers: model, circuit, budgets, key, health check."""
        now = self.clock()
        lease = (backend.connect_s + backend.read_s) * (backend.spec.retries + 1)
        exhausted = await self._exhausted(backend, now)
        return Facts(
            serves_model=backend.serves(target.req.model),
            model=target.req.model,
            sent_model=target.model,
            circuit=await self.store.circuit(backend.state_key),
            missing_key=backend.missing_key,
            exhausted=exhausted and exhausted[0],
            has_health=self.health.enabled(backend),
            lease_s=max(lease, 1.0),
            reopens_in=exhausted and exhausted[1],
            context_window=backend.spec.context_window,
            larger_than=run.walk.larger_than,
        )

    async def _skip(self, run: Run, turn: Turn, backend: Backend, skip: Skip) -> None:
        self._record(run, self._attempt(backend, skip.outcome, skip.ms, turn.last_resort))
        if skip.counts:
            await self._update_circuit(backend, skip.outcome)
        if skip.deferrable:
            run.walk.defer(backend.name)

    async def _try(self, run: Run, target: Target, send: Sender[T], last_resort: bool) -> Tried[T]:
        """One try: send, record the attempt, tell the circuit and the budgets."""
        backend = target.backend
        start = self.monotonic()
        try:
            tried = await send(self.session, target, run.left(start), self.clock())
        except asyncio.CancelledError as exc:
            if exc.args[:1] == (HEDGE_LOST,):  # honest about the try that lost the race
                ms = (self.monotonic() - start) * 1000
                self._record(run, self._attempt(backend, LOST, ms, last_resort))
            raise
        ms = (self.monotonic() - start) * 1000
        outcome = tried.outcome
        note = run.walk.refused(outcome.reason, backend.spec.context_window, self._stops(run))
        if outcome.reason is Reason.OK and run.req.continuing is not None:
            note = "continued the answer cut mid-stream"
        attempt = self._attempt(
            backend, replace(outcome, detail=outcome.detail + note), ms, last_resort
        )
        self._record(run, replace(attempt, sent=True), backend.excerpt(tried.raw))
        await self._update_circuit(backend, outcome)
        if backend.budgets and quota.counts(tried.outcome.reason):
            await self._count(backend, tried.payload)
        return tried

    def _first_token_s(self, run: Run, backend: Backend) -> float | None:
        """How long a stream may go without content (spec §10): the request's
        `first_token_ms`, else its route's, else the provider's; None for no limit."""
        route = self.config.routes.get(run.route)
        ms = run.req.first_token_ms or (route and route.first_token_ms)
        ms = ms or backend.spec.first_token_ms
        return ms / 1000 if ms and run.req.stream else None

    def _stops(self, run: Run) -> bool:
        """Whether a `content_blocked` refusal stops this request's walk: its route's
        `on_content_blocked`, else the config's (spec §5.1)."""
        route = self.config.routes.get(run.route)
        policy = route.on_content_blocked if route is not None else None
        return (policy or self.config.on_content_blocked) == "stop"

    async def cut(self, run: Run, backend: Backend, exc: BaseException, ms: float) -> Attempt:
        """A stream failed after its first chunk reached the caller: record it (the stream's
        `Recorder`)."""
        outcome = stream_failure(exc, None, None, self.clock())
        cut = Outcome(outcome.reason, outcome.status, f"after the first chunk: {outcome.detail}")
        attempt = replace(self._attempt(backend, cut, ms, False), sent=True)
        self._record(run, attempt)
        await self._update_circuit(backend, cut)
        return attempt

    # -- bookkeeping -------------------------------------------------------------------------

    def _attempt(self, backend: Backend, outcome: Outcome, ms: float, last_resort: bool) -> Attempt:
        detail = backend.redact(outcome.detail)
        return Attempt(
            backend.name,
            outcome.reason,
            outcome.status,
            ms,
            detail,
            last_resort,
            retry_after=outcome.retry_after,
        )

    def _record(self, run: Run, attempt: Attempt, raw: str | None = None) -> None:
        run.trace.append(attempt)
        self._emit(AttemptEvent(run.route, attempt, raw, run.id))

    def _emit(self, event: Event) -> None:
        for observer in self.observers:
            observer(event)

    async def _exhausted(self, backend: Backend, now: float) -> tuple[str, float] | None:
        """Which budget of the provider is used up in its current window, if any, and the
        seconds until that window ends."""
        for budget, key, end in self.windows.current(backend.budgets, now):
            if await self.store.usage(backend.quota_key, key) >= budget.limit:
                return f"{budget} used up until the {budget.window} ends", end - now
        return None

    async def _count(self, backend: Backend, response: Any) -> None:
        """Count one request (and its tokens) into the provider's budgets."""
        now = self.clock()
        for budget, key, end in self.windows.current(backend.budgets, now):
            amount = quota.spent(budget, response)
            if amount:
                used = await self.store.add_usage(backend.quota_key, key, amount, end - now)
                self._emit(QuotaEvent(backend.name, budget, key, used, now))

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
        name = self.names.get(key)
        if name is None:
            return
        now = self.clock()
        if after.is_open(now) and not before.is_open(now):
            self._emit(CircuitEvent(name, True, after))
        elif after.closed and not before.closed:
            self._emit(CircuitEvent(name, False, after))
