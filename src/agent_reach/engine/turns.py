"""One provider's turn (protocol §3, §4): what the engine does for each action its `turn.Turn`
asks for, until the turn is done: gather the free facts, consult the health check, skip, send
(within the budgets it reserves and the half-open lease it takes), clamp the output cap, sleep
before a retry; each try recorded and told to the circuit and the budgets. A provider with a
pool of keys has a turn for each of its seats (one key each) while each failure is the key's
own (`Effect.keyed`), in the order its balance gives (`Engine.arranged`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Protocol, TypeVar

from ..core import quota
from ..core.outcomes import Outcome
from ..core.routing import Pick
from ..core.trace import EFFECTS, Attempt, Reason
from ..core.turn import Action, Clamp, Consult, Done, Gather, Send, Skip, Sleep, Turn
from ..net.upstream import Client
from ..state import StateStore
from ..state.busy import Busy
from .facts import Knowledge
from .health import HealthMonitor
from .hedge import HEDGE_LOST
from .ledger import Ledger, Reserved
from .operation import Operation
from .prepared import Pool, PreparedProvider
from .run import Run
from .send import Target, Tried

T = TypeVar("T")
LOST = Outcome(Reason.TIMEOUT, None, "hedged: cancelled, another provider answered first")


class Engine(Protocol):
    """What a turn needs of the engine (`loop.Engine`)."""

    @property
    def pools(self) -> Mapping[str, Pool]: ...
    @property
    def busy(self) -> Busy: ...
    @property
    def known(self) -> Knowledge: ...
    @property
    def health(self) -> HealthMonitor: ...
    @property
    def ledger(self) -> Ledger: ...
    @property
    def store(self) -> StateStore: ...
    @property
    def session(self) -> Client: ...
    @property
    def clock(self) -> Callable[[], float]: ...
    @property
    def monotonic(self) -> Callable[[], float]: ...

    def record(
        self, run: Run, attempt: Attempt, raw: str | None = None, model: str | None = None
    ) -> None: ...

    def arranged(self, run: Run, pool: Pool) -> Pool: ...


async def turn(engine: Engine, run: Run, pick: Pick, op: Operation[T]) -> T | None:
    """The provider's turn: the payload, or None. A pool's seats each have theirs, while each
    failure is its key's own; as last resort, only those of its seats skipped for remembered
    state."""
    pool = engine.pools[pick[0]]
    if len(pool) == 1:
        return await _seat(engine, run, pool[0], pick, op)
    if pick[1]:
        pool = tuple(m for m in pool if m.state_key in run.passed)
    for prepared in engine.arranged(run, pool):
        payload = await _seat(engine, run, prepared, pick, op)
        if payload is not None or not EFFECTS[run.trace[-1].reason].keyed:
            return payload
    return None


async def _seat(
    engine: Engine, run: Run, prepared: PreparedProvider, pick: Pick, op: Operation[T]
) -> T | None:
    """Do what the seat's `Turn` decides until it is done: the payload, or None."""
    prefilled = bool(run.req.continuing) and prepared.prefill
    turn = Turn(prepared.name, pick[1], prepared.spec.retries if run.recorded else 0, prefilled)
    target, configured = await engine.known.target(run, prepared, op)
    action: Action = turn.begin()
    while True:
        if isinstance(action, Gather):
            facts = await engine.known.facts(run, prepared, target, op)
            action = turn.consider(facts, engine.clock())
        elif isinstance(action, Consult):
            left = run.left(engine.monotonic())
            health, checked_now = await engine.health.consult(
                engine.session, prepared, engine.clock(), left
            )
            action = turn.checked(health, checked_now, engine.clock())
        elif isinstance(action, Skip):
            await _skip(engine, run, turn, prepared, action)
            return None
        elif isinstance(action, Send):
            taken: Reserved | tuple[str, float] = []
            if prepared.budgets and run.recorded:
                sends = 1 if op.requests is None else op.requests(prepared, target.req)
                taken = await engine.ledger.reserve(prepared, sends)
            if isinstance(taken, tuple):
                action = turn.over_budget(*taken)
                continue
            if action.lease is not None and not await engine.store.lease(
                prepared.state_key, action.lease
            ):
                await engine.ledger.refund(prepared, taken)
                action = turn.lease_lost()
                continue
            if action.bare:
                target = replace(target, bare=True)
            if action.restart:  # the seam then drops what the client has of the new answer
                run.req = replace(run.req, continuing="")
                target = replace(target, req=run.req)
            tried = await _try(engine, run, target, op, pick[1], taken)
            if tried.outcome.reason is Reason.OK:
                if turn.clamped is not None and configured is None:
                    await engine.known.learn(prepared, target.model, turn.clamped)
                run.answered[prepared.name] = prepared
                return tried.payload
            left = run.left(engine.monotonic())
            action = turn.sent(tried.outcome, left, target.sent_cap, prepared.cap_fields)
        elif isinstance(action, Clamp):
            target = replace(target, max_output=action.tokens)
            action = Send(bare=turn.bare)
        elif isinstance(action, Sleep):
            await asyncio.sleep(action.seconds)
            action = turn.woke(run.left(engine.monotonic()))
        else:
            assert isinstance(action, Done)
            return None


async def _skip(
    engine: Engine, run: Run, turn: Turn, prepared: PreparedProvider, skip: Skip
) -> None:
    engine.record(run, prepared.attempt(skip.outcome, skip.ms, turn.last_resort))
    if (
        skip.counts
        and run.recorded
        and not run.own_limit(skip.outcome, prepared.spec.first_token_ms)
    ):
        await engine.ledger.record(prepared, skip.outcome)
    if skip.deferrable:
        run.walk.defer(prepared.name)
        run.passed.add(prepared.state_key)


async def _try(
    engine: Engine, run: Run, target: Target, op: Operation[T], last_resort: bool, taken: Reserved
) -> Tried[T]:
    """One try: send, record the attempt, tell the circuit and the budgets (`taken` is
    what it reserved of them, given back when nothing was sent), when `op` is recorded."""
    prepared = target.prepared
    start = engine.monotonic()
    engine.busy.enter(prepared.name)
    try:
        tried = await op.send(engine.session, target, run.left(start), engine.clock())
    except asyncio.CancelledError as exc:
        if exc.args[:1] == (HEDGE_LOST,):  # honest about the try that lost the race
            ms = (engine.monotonic() - start) * 1000
            engine.record(run, prepared.attempt(LOST, ms, last_resort, sent=True))
        raise
    finally:
        engine.busy.leave(prepared.name)
    ms = (engine.monotonic() - start) * 1000
    outcome = tried.outcome
    note = run.walk.refused(outcome.reason, target.window, run.policy.stop_on_blocked)
    if outcome.reason is Reason.OK and run.req.continuing is not None:
        again = "began again the answer cut mid-stream"
        note = "continued the answer cut mid-stream" if run.req.continuing else again
    noted = replace(outcome, detail=outcome.detail + note) if note else outcome
    attempt = prepared.attempt(noted, ms, last_resort, sent=True)
    engine.record(run, attempt, prepared.excerpt(tried.raw), target.model)
    if not run.recorded:
        return tried
    if not run.own_limit(outcome, prepared.spec.first_token_ms):
        await engine.ledger.record(prepared, outcome, last_resort)
    if prepared.budgets and quota.counts(tried.outcome.reason):
        await engine.ledger.count(prepared, tried.payload)
    elif taken:
        await engine.ledger.refund(prepared, taken)
    return tried
