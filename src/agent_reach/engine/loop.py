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
import logging
import os
import random
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any, TypeVar

from ..chat import callids
from ..chat.request import ChatRequest
from ..config import Config
from ..core.balance import Latencies, Signals, weighted
from ..core.errors import AllProvidersFailed, RequestError
from ..core.events import AttemptEvent, Event, Observer, RequestEvent
from ..core.outcomes import Outcome
from ..core.routing import Expired, Pick, Walk, attempt_order
from ..core.trace import Attempt, Result
from ..core.turn import (
    DEADLINE_SPENT,
)
from ..dialects import Mismatch
from ..net.transport import new_session
from ..net.upstream import Client
from ..state import StateStore, open_store
from ..state.busy import busy_for
from ..state.homes import Homes, homes_for
from ..state.log import AttemptLog
from . import affinity, hedge, turns
from .facts import Knowledge
from .health import CheckResult, HealthMonitor, check_provider
from .ledger import Ledger
from .live import LiveStream
from .operation import ANSWER, COUNT, EMBED, STREAM, Operation, for_request
from .prepared import Pool, PreparedProvider, prepare_all
from .run import Run
from .send import stream_failure
from .stream import ChatStream

T = TypeVar("T")
log = logging.getLogger("agent_reach")


class Engine:
    """Runs requests against a config's providers. Create inside or outside a loop; the HTTP
    session is opened on first use and closed by `aclose`. `clock` is the wall clock (circuits
    and budgets are kept in it, shared between processes); `monotonic` times deadlines; `draw`
    shares a balanced order's traffic."""

    def __init__(
        self,
        config: Config,
        *,
        store: StateStore | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.perf_counter,
        environ: dict[str, str] | None = None,
        draw: Callable[[], float] = random.random,
    ) -> None:
        self.config = config
        latency = Latencies()  # an observer: recent ms to a good answer, by provider
        env = os.environ if environ is None else environ
        self.pools = prepare_all(config, env)  # each provider once, or once for each key
        self.prepared = {name: pool[0] for name, pool in self.pools.items()}
        self.table = config.route_table()
        self.policies = config.policies()
        retention_s = config.retention_days * 86400
        self.store: StateStore = store or open_store(config.state, retention_s=retention_s)
        self.busy = busy_for(self.store, "least_busy" in self.table.balanced.values())
        self.signals = Signals(draw, latency, self.busy)  # what balanced orders are drawn from
        self.health = HealthMonitor(config.health.mode, config.health.ttl_s, self.store)
        self.clock = clock
        self.monotonic = monotonic
        self.seats = {m.seat: m for pool in self.pools.values() for m in pool}
        keys = {seat: m.state_key for seat, m in self.seats.items()}
        self.observers: list[Observer] = [AttemptLog(self.store, keys, clock), latency]
        self.ledger = Ledger(self.store, config, clock, self.pools)
        self.ledger.observers = self.observers
        self.store.follow(config.circuit, self.ledger.changed)
        self._session: Client | None = None
        self.known = Knowledge(config, self.store, self.ledger, self.health, clock, self._emit)
        self.origins = self.known.origins
        self.homes: Homes = homes_for(self.store, config.affinity_max_sessions)
        self._ids = itertools.count(1)
        self._id_prefix = os.urandom(4).hex()

    @property
    def session(self) -> Client:
        if self._session is None or self._session.closed:
            server = self.config.server
            self._session = new_session(
                server.max_upstream_connections, server.max_upstream_per_origin
            )
        return self._session

    async def aclose(self) -> None:
        """Close the HTTP session (the engine can still be used; it opens a new one)."""
        await self.busy.aclose()
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def check(self, name: str, model: str | None = None) -> CheckResult:
        """Consult provider `name`'s health now (see `health.check_provider`)."""
        return await check_provider(self.session, self.prepared[name], model, self.clock())

    async def refresh_health(self) -> None:
        """Run every enabled provider's health check now (health mode `background`)."""
        members = (b for pool in self.pools.values() for b in pool)  # each key of a pool
        enabled = [b for b in members if self.health.enabled(b)]
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
            (key, result)
            for key, result in old.health.results.items()
            if key in self.ledger.members
        )

    def arranged(self, run: Run, pool: Pool) -> Pool:
        """A pool's seats in the order the request's balance gives: drawn by their keys'
        weights when it is `weighted`, else as listed (one endpoint, so one latency); its
        session's home seat first."""
        if self.table.balanced.get(run.route) == "weighted" and len(pool) > 1:
            weights = {m.pool_key or "": m.key_weight for m in pool}
            drawn = weighted(tuple(weights), weights, self.signals.draw)
            by_key = {m.pool_key: m for m in pool}
            pool = tuple(by_key[k] for k in drawn)
        if run.home is not None and any(m.seat == run.home for m in pool):  # its home first
            pool = tuple(sorted(pool, key=lambda m: m.seat != run.home))
        return pool

    def order(self, req: ChatRequest) -> tuple[str, ...]:
        """The providers this request will walk through (protocol §3)."""
        return attempt_order(
            self.table,
            self.prepared,
            fallback_order=req.fallback_order,
            provider_route=req.provider_route,
            model=req.model,
            signals=self.signals,
        )

    async def count_tokens(self, req: ChatRequest) -> tuple[str, int] | None:
        """(provider, input tokens) of a request in a provider's own API, counted by the first
        provider of its order that counts in that API and can be tried now (protocol §10.1
        `count_tokens`), or None when there is none or it gave no count (`operation.COUNT`)."""
        try:
            counted, provider, _ = await self._drive(self._run(req, op=COUNT), COUNT)
        except AllProvidersFailed:
            return None
        return provider, counted

    # -- the three kinds of request ------------------------------------------------------------

    async def chat(self, req: ChatRequest) -> Result:
        """One non-streamed request with failover."""
        response, provider, run = await self._drive(self._run(req), ANSWER)
        answered = run.answered[provider]
        native = answered.speaks(req)
        if not native and not req.raw_response:
            self.origins.answered(response, answered.origin)
            if callids.has_calls(response):
                response = callids.CallIds.of(req.body).answer(response)
        return Result(response, provider, run.trace, native)

    async def stream(self, req: ChatRequest) -> ChatStream:
        """A streamed request, returned once a provider has produced its first content chunk
        (every failure before that fails over)."""
        live, provider, run = await self._drive(self._run(req), STREAM)
        return ChatStream(self, run.answered[provider], live, run)

    async def resume(self, run: Run, partial: str) -> tuple[PreparedProvider, LiveStream] | None:
        """A stream was cut after `partial` (text only): the next providers of its walk, asked
        to finish that answer (protocol §10, continuation); None when none can."""
        run.req = replace(run.req, continuing=partial)
        found = await self._walk(run, STREAM)
        return None if found is None else (run.answered[found[1]], found[0])

    async def embed(self, req: ChatRequest) -> Result:
        """An embeddings request (`req.model`: its space; `req.body`: its `input` list and the
        space's `dimensions`) with failover among the providers that serve the space."""
        answer, provider, run = await self._drive(self._run(req, op=EMBED), EMBED)
        return Result(answer, provider, run.trace)

    def candidates(self, req: ChatRequest) -> tuple[str, ...]:
        """The providers of the request's order that can do it: an embeddings request's are
        those of its space (step mode's choice when it names none)."""
        op = for_request(req)
        order = self.order(req)
        return (
            order
            if op.takes is None
            else tuple(n for n in order if op.takes(self.prepared[n], req))
        )

    async def step(self, req: ChatRequest, provider: str) -> tuple[Attempt, dict[str, Any] | None]:
        """One provider, no failover (protocol §9 step mode): the attempt and, when it succeeded,
        the response (a chat completion, or an embeddings request's vectors). A provider
        skipped for remembered state is still tried (last resort)."""
        op = for_request(req)
        if op.takes is not None and not op.takes(self.prepared[provider], req):
            raise RequestError(
                f"provider {provider!r} serves no model of embedding space {req.model!r}",
                param="provider",
            )
        try:
            response, _, run = await self._drive(self._run(req, provider, op), op)
        except AllProvidersFailed as exc:
            return exc.attempts[-1], None
        return run.trace[-1], response

    def _run(self, req: ChatRequest, only: str | None = None, op: Operation[Any] = ANSWER) -> Run:
        """A request's run for `op`: its walk (`only` one provider, in step mode), its
        deadline."""
        configured = self.config.deadline_ms
        own = req.deadline_ms is not None and req.deadline_ms < configured  # only shortens
        budget_s = (req.deadline_ms if own and req.deadline_ms else configured) / 1000
        run_id = f"{self._id_prefix}-{next(self._ids)}"
        walk = Walk(self.order(req) if only is None else (only,))
        deadline = self.monotonic() + budget_s
        route = self.table.label(req.route_label, req.model)
        policy = self.policies.get(route, self.policies[""])
        hedged = only is None and op.fails_over
        return Run(
            req,
            run_id,
            route,
            walk,
            deadline,
            policy,
            hedged,
            own_deadline=own,
            recorded=op.recorded,
        )

    # -- the walk ----------------------------------------------------------------------------

    async def _drive(self, run: Run, op: Operation[T]) -> tuple[T, str, Run]:
        """Walk the request's providers for `op` (its session's home first); an event when the
        request ends."""
        key = self._session_key(run, op)
        home = None if key is None else await self.homes.get(key, self.clock())
        if home is not None:
            run.home = home.seat
            run.walk.prefer(home.provider)
        found = await self._walk(run, op)
        if found is None:
            self._ended(run, op, None, None)
            raise AllProvidersFailed(run.trace, stopped=run.walk.stopped, model=run.req.model)
        payload, name = found
        self._ended(run, op, name, payload)
        if key is not None:
            config = self.config
            moved = affinity.after(home, run.answered[name].seat, config.affinity_move_after)
            if moved is not None:
                await self.homes.set(key, moved, self.clock(), config.affinity_ttl_s)
        return payload, name, run

    def _session_key(self, run: Run, op: Operation[Any]) -> str | None:
        """The key of the request's session's home, when affinity orders it: a chat request
        (whole or streamed) of a session, on an order the client did not fix."""
        req = run.req
        if req.affinity is None or req.fallback_order or not self.config.affinity:
            return None
        return req.affinity if op is ANSWER or op is STREAM else None

    async def _walk(self, run: Run, op: Operation[T]) -> tuple[T, str] | None:
        """Each of the walk's providers that can do `op` in turn, then the ones skipped only
        for remembered state as last resort (protocol §4.2): the first answer and who gave
        it, or None (at once after a failed try, for an operation that does not fail over)."""
        while (pick := run.walk.next(run.left(self.monotonic()))) is not None:
            if isinstance(pick, Expired):
                for name in pick.providers:
                    self.record(
                        run, Attempt(name, DEADLINE_SPENT.reason, detail=DEADLINE_SPENT.detail)
                    )
                break
            if op.takes is not None and not op.takes(self.prepared[pick[0]], run.req):
                continue
            hedge_ms = run.policy.hedge_after_ms or self.prepared[pick[0]].spec.hedge_after_ms
            if hedge_ms and run.hedged:
                payload, name = await hedge.race(
                    lambda s: turns.turn(self, run, s, op),
                    pick,
                    hedge_ms / 1000,
                    lambda: self._next(run),
                )
            else:
                payload, name = await turns.turn(self, run, pick, op), pick[0]
            if payload is not None:
                return payload, name
            if not op.fails_over and run.trace and run.trace[-1].sent:
                break
        return None

    def _next(self, run: Run) -> Pick | None:
        """The walk's next provider to hedge with, if any is left in time."""
        pick = run.walk.next(run.left(self.monotonic()))
        return pick if isinstance(pick, tuple) else None

    def _ended(self, run: Run, op: Operation[Any], provider: str | None, payload: Any) -> None:
        if not run.recorded:
            return
        req, trace = run.req, tuple(run.trace)
        sent = None if provider is None else op.model_for(self.prepared[provider], req.model)
        self._emit(
            RequestEvent(
                run.route, provider, trace, req.stream, run.id, req.api, req.model, payload, sent
            )
        )

    def skipped(self, run: Run, prepared: PreparedProvider, exc: Mismatch) -> None:
        """A malformed frame skipped mid-stream (the stream's `Recorder`): a warning."""
        detail = prepared.redact(str(exc))
        log.warning(
            "%s: skipped a malformed frame mid-stream (%s): %s", prepared.name, run.id, detail
        )

    async def cut(
        self, run: Run, prepared: PreparedProvider, exc: BaseException, ms: float
    ) -> Attempt:
        """A stream failed after its first chunk reached the caller: record it (the stream's
        `Recorder`)."""
        outcome = stream_failure(exc, None, None, self.clock())
        cut = Outcome(outcome.reason, outcome.status, f"after the first chunk: {outcome.detail}")
        attempt = prepared.attempt(cut, ms, False, sent=True)
        self.record(run, attempt)
        await self.ledger.record(prepared, cut)
        return attempt

    # -- bookkeeping -------------------------------------------------------------------------

    def record(
        self, run: Run, attempt: Attempt, raw: str | None = None, model: str | None = None
    ) -> None:
        """Add `attempt` to the run's trace, and tell the observers when the run is recorded
        (with the `model` a try asked for)."""
        run.trace.append(attempt)
        if run.recorded:
            self._emit(AttemptEvent(run.route, attempt, raw, run.id, model))

    def _emit(self, event: Event) -> None:
        for observer in self.observers:
            observer(event)
