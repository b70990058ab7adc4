"""What attempts leave behind in remembered state (protocol §5, §12): the providers' circuits and
budgets, kept in the state store, and the events that tell observers when a circuit opens or
closes (here, or elsewhere in a fleet) and when a budget grows. The engine calls it; what an
outcome does is `breaker`'s and `quota`'s to decide.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..config import Config
from ..core import breaker, quota
from ..core.breaker import CircuitState
from ..core.events import CircuitEvent, Event, Observer, QuotaEvent
from ..core.outcomes import Outcome
from ..core.trace import EFFECTS, Circuit
from ..state import StateStore
from .prepared import Pool, PreparedProvider

# The budget windows a try took requests from: each window's key, TTL and how many it took.
Reserved = list[tuple[str, float, int]]


class Ledger:
    """Circuits and budgets of one config's providers (`pools`: each provider's keys,
    prepared), by identity."""

    def __init__(
        self,
        store: StateStore,
        config: Config,
        clock: Callable[[], float],
        pools: Mapping[str, Pool],
    ) -> None:
        self.store = store
        self.policy = config.circuit
        self.windows = quota.Windows(config.tz)
        self.clock = clock
        self.pools = pools
        self.members = {m.state_key: m for pool in pools.values() for m in pool}
        self.observers: list[Observer] = []  # the engine's

    def emit(self, event: Event) -> None:
        for observer in self.observers:
            observer(event)

    async def exhausted(self, prepared: PreparedProvider, now: float) -> tuple[str, float] | None:
        """Which budget of the provider is used up in its current window, if any, and the
        seconds until that window ends."""
        for budget, key, end in self.windows.current(prepared.budgets, now):
            if await self.store.usage(prepared.quota_key, key) >= budget.limit:
                return f"{budget} used up until the {budget.window} ends", end - now
        return None

    async def reserve(
        self, prepared: PreparedProvider, requests: int = 1
    ) -> Reserved | tuple[str, float]:
        """Take the `requests` a try will send (one, or an embeddings try's batches) from each
        of the provider's request budgets before it, so that however many run at once at most
        `limit` are sent (protocol §12): what was taken, or which budget has not that many
        left and the seconds until its window ends."""
        now = self.clock()
        taken: Reserved = []
        for budget, key, end in self.windows.current(prepared.budgets, now):
            if budget.unit != "req":
                continue
            used = await self.store.reserve(
                prepared.quota_key, key, budget.limit, end - now, requests
            )
            if used is None:
                await self.refund(prepared, taken)
                more = f": fewer than the {requests} requests of this one left" * (requests > 1)
                return f"{budget} used up{more} until the {budget.window} ends", end - now
            taken.append((key, end - now, requests))
            self.emit(QuotaEvent(prepared.name, budget, key, used, now))
        return taken

    async def refund(self, prepared: PreparedProvider, taken: Reserved) -> None:
        """Give back what `reserve` took, for a try that sent nothing."""
        for key, ttl_s, requests in taken:
            await self.store.release(prepared.quota_key, key, ttl_s, requests)

    async def count(self, prepared: PreparedProvider, response: Any) -> None:
        """Count an answer's tokens into the provider's token budgets (requests were counted
        by `reserve`)."""
        now = self.clock()
        for budget, key, end in self.windows.current(prepared.budgets, now):
            amount = quota.spent(budget, response) if budget.unit == "tok" else 0
            if amount:
                used = await self.store.add_usage(prepared.quota_key, key, amount, end - now)
                self.emit(QuotaEvent(prepared.name, budget, key, used, now))

    async def record(
        self, prepared: PreparedProvider, outcome: Outcome, last_resort: bool = False
    ) -> None:
        """What an attempt's outcome does to the provider's circuit: to its seat's; for a
        failure of the endpoint (`Circuit.COUNTS`, not the key's own) to each seat of its
        pool, since they all reach that endpoint; for a limit (`Circuit.WAITS`) to each seat
        of its key's `group`, since they share that quota."""
        now = self.clock()
        for member in self._sharing(prepared, EFFECTS[outcome.reason].circuit):
            key = member.state_key
            before = await self.store.circuit(key)
            after = breaker.record(
                before, outcome.reason, now, self.policy, outcome.retry_after, last_resort
            )
            if after is before or after == before:  # most: the same closed circuit
                continue
            await self.store.set_circuit(key, after)
            self.changed(key, before, after)

    def _sharing(self, prepared: PreparedProvider, circuit: Circuit) -> Pool:
        """The seats an outcome with `circuit`'s effect on `prepared` applies to."""
        pool = self.pools.get(prepared.name, (prepared,))
        if circuit is Circuit.COUNTS:
            return pool
        group = prepared.key_group
        if circuit is Circuit.WAITS and group is not None:
            return tuple(m for m in pool if m.key_group == group)
        return (prepared,)

    def changed(self, key: str, before: CircuitState, after: CircuitState) -> None:
        """Tell observers when a circuit opened or closed, here or (through the store)
        elsewhere in a fleet."""
        member = self.members.get(key)
        if member is None:
            return
        now = self.clock()
        if after.is_open(now) and not before.is_open(now):
            self.emit(CircuitEvent(member.name, True, after, member.pool_key))
        elif after.closed and not before.closed:
            self.emit(CircuitEvent(member.name, False, after, member.pool_key))
