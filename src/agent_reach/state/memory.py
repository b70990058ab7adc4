"""State in this process only (`state: memory://`), and the in-memory view of shared stores."""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..breaker import CLOSED, CircuitPolicy, CircuitState

if TYPE_CHECKING:
    from ..routing import Health
    from . import LoggedAttempt

# Told when a circuit changed without this process deciding it: (key, before, after).
CircuitChanged = Callable[[str, CircuitState, CircuitState], None]


class MemoryStore:
    """Circuits, health results, budget counters, claims, stored responses (the latest
    `responses_kept`) and a bounded attempt log, in dicts."""

    responses_kept = 1000

    def __init__(self, log_size: int = 10_000) -> None:
        self.circuits: dict[str, CircuitState] = {}
        self.healths: dict[str, Health] = {}
        self.used: dict[tuple[str, str], int] = {}
        self.claims: dict[str, float] = {}
        self.log: deque[LoggedAttempt] = deque(maxlen=log_size)
        self.responses: OrderedDict[str, tuple[float, str]] = OrderedDict()  # id → expiry, JSON
        self.policy: CircuitPolicy | None = None
        self.changed: CircuitChanged | None = None

    def follow(self, policy: CircuitPolicy, changed: CircuitChanged) -> None:
        self.policy, self.changed = policy, changed

    async def circuit(self, provider: str) -> CircuitState:
        return self.circuits.get(provider, CLOSED)

    async def set_circuit(self, provider: str, state: CircuitState) -> None:
        if state == CLOSED:
            self.circuits.pop(provider, None)
        else:
            self.circuits[provider] = state

    async def health(self, provider: str) -> Health | None:
        return self.healths.get(provider)

    async def set_health(self, provider: str, health: Health, ttl_s: float) -> None:
        self.healths[provider] = health  # readers judge its age by `checked_at`

    async def lease(self, provider: str, state: CircuitState) -> bool:
        await self.set_circuit(provider, state)
        return True

    async def usage(self, provider: str, key: str) -> int:
        return self.used.get((provider, key), 0)

    async def add_usage(self, provider: str, key: str, amount: int, ttl_s: float) -> int:
        total = self.used.get((provider, key), 0) + amount
        self.used[(provider, key)] = total
        return total

    async def release(self, provider: str, key: str, ttl_s: float) -> None:
        self.used[(provider, key)] = max(0, self.used.get((provider, key), 0) - 1)

    async def reserve(self, provider: str, key: str, limit: int, ttl_s: float) -> int | None:
        total = self.used.get((provider, key), 0) + 1
        if total > limit:
            return None
        self.used[(provider, key)] = total
        return total

    async def entries(self) -> tuple[dict[str, CircuitState], dict[tuple[str, str], int]]:
        return dict(self.circuits), dict(self.used)

    async def claim(self, key: str, until: float, now: float) -> bool:
        if self.claims.get(key, 0.0) > now:
            return False
        self.claims = {k: t for k, t in self.claims.items() if t > now}  # stays small
        self.claims[key] = until
        return True

    async def save_response(self, id: str, data: str, now: float, ttl_s: float) -> None:
        self.responses[id] = (now + ttl_s, data)
        self.responses.move_to_end(id)
        while len(self.responses) > self.responses_kept:
            self.responses.popitem(last=False)

    async def load_response(self, id: str, now: float) -> str | None:
        kept = self.responses.get(id)
        if kept is None or kept[0] <= now:
            return None
        return kept[1]

    async def delete_response(self, id: str, now: float) -> bool:
        kept = self.responses.pop(id, None)
        return kept is not None and kept[0] > now

    def record(self, attempt: LoggedAttempt) -> None:
        self.log.append(attempt)

    async def attempts(self, since: float) -> list[LoggedAttempt]:
        return [a for a in self.log if a.ts >= since]

    async def flush(self) -> None:
        return None

    async def refresh(self) -> None:
        return None

    async def aclose(self) -> None:
        return None
