"""State in this process only (`state: memory://`), and the in-memory view of shared stores."""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterable
from typing import TYPE_CHECKING

from ..core.breaker import CLOSED, CircuitPolicy, CircuitState
from .store import ANYONE, CircuitChanged, Keep, LearnedCap, LoggedAttempt

if TYPE_CHECKING:
    from ..core.routing import Health

MAX_CAPS = 1_000  # learned output caps a store keeps: past it, the one to expire first goes


def keep_cap(caps: dict[str, LearnedCap], key: str, cap: LearnedCap, now: float) -> None:
    """Keep `cap` for `key` in `caps` unless a lower one is kept that has not expired (of two,
    the lower; an equal one is renewed), within `MAX_CAPS`."""
    kept = caps.get(key)
    if kept is not None and kept.until > now and kept.tokens < cap.tokens:
        return
    if kept is None and len(caps) >= MAX_CAPS:
        expired = [k for k, c in caps.items() if c.until <= now]
        for old in expired or [min(caps, key=lambda k: caps[k].until)]:
            del caps[old]
    caps[key] = cap


def overflow(rows: Iterable[tuple[str, str, int]], keep: Keep) -> list[str]:
    """The stored responses to evict so that `keep.owner`'s and the store's are within `keep`:
    `rows` are (id, owner, size), oldest first; the oldest go first. The newest alone over a
    bytes cap is the one evicted (it is not kept, and takes nothing else with it)."""
    rows = list(rows)
    out: set[str] = set()
    if rows and rows[-1][2] > min(keep.max_bytes, keep.owner_max_bytes):
        return [rows[-1][0]]

    def trim(chosen: list[tuple[str, str, int]], max_count: int, max_bytes: int) -> None:
        count, total = len(chosen), sum(size for _, _, size in chosen)
        for id, _, size in chosen:
            if count <= max_count and total <= max_bytes:
                return
            out.add(id)
            count, total = count - 1, total - size

    trim([r for r in rows if r[1] == keep.owner], keep.owner_max_count, keep.owner_max_bytes)
    trim([r for r in rows if r[0] not in out], keep.max_count, keep.max_bytes)
    return [id for id, _, _ in rows if id in out]


class Kept:
    """Stored responses (id → expiry, JSON, owner; oldest first) within their `Keep`, with the
    counts and bytes `overflow` would sum kept as they change: a save costs what it evicts and
    expires, not a walk over every stored response (a walk cost a third of the proxy's CPU
    per Responses request with a few thousand stored)."""

    def __init__(self) -> None:
        self.rows: OrderedDict[str, tuple[float, str, str]] = OrderedDict()
        self.bytes = 0
        self.owners: dict[str, OrderedDict[str, None]] = {}  # owner → its ids, oldest first
        self.owner_bytes: dict[str, int] = {}
        self.latest = 0.0  # the latest expiry of all
        self.sweep_until = 0.0  # until then, expiries are out of order: expire by a full walk

    def save(self, id: str, data: str, expiry: float, now: float, keep: Keep) -> None:
        """Keep it after the expired ones go; then the oldest past `keep` (as `overflow`)."""
        self.forget(id)
        self.expire(now)
        if expiry < self.latest:
            self.sweep_until = max(self.sweep_until, self.latest)
        self.latest = max(self.latest, expiry)
        self.rows[id] = (expiry, data, keep.owner)
        self.bytes += len(data)
        self.owners.setdefault(keep.owner, OrderedDict())[id] = None
        self.owner_bytes[keep.owner] = self.owner_bytes.get(keep.owner, 0) + len(data)
        if len(data) > min(keep.max_bytes, keep.owner_max_bytes):
            self.forget(id)
            return
        mine = self.owners[keep.owner]
        while (
            len(mine) > keep.owner_max_count or self.owner_bytes[keep.owner] > keep.owner_max_bytes
        ):
            self.forget(next(iter(mine)))
        while len(self.rows) > keep.max_count or self.bytes > keep.max_bytes:
            self.forget(next(iter(self.rows)))

    def expire(self, now: float) -> None:
        """Forget the expired: the oldest while their expiries are in order, else all."""
        if now < self.sweep_until:
            for old in [i for i, (expiry, _, _) in self.rows.items() if expiry <= now]:
                self.forget(old)
            return
        while self.rows:
            oldest, (expiry, _, _) = next(iter(self.rows.items()))
            if expiry > now:
                return
            self.forget(oldest)

    def load(self, id: str, now: float) -> str | None:
        kept = self.rows.get(id)
        return None if kept is None or kept[0] <= now else kept[1]

    def forget(self, id: str) -> tuple[float, str, str] | None:
        """Drop `id` if kept; what was kept."""
        kept = self.rows.pop(id, None)
        if kept is not None:
            owner = kept[2]
            self.bytes -= len(kept[1])
            self.owner_bytes[owner] -= len(kept[1])
            mine = self.owners[owner]
            del mine[id]
            if not mine:
                del self.owners[owner], self.owner_bytes[owner]
        return kept


class MemoryStore:
    """Circuits, health results, budget counters, learned caps, claims, stored responses (within
    their `Keep`) and a bounded attempt log, in dicts."""

    def __init__(self, log_size: int = 10_000) -> None:
        self.circuits: dict[str, CircuitState] = {}
        self.healths: dict[str, Health] = {}
        self.used: dict[tuple[str, str], int] = {}
        self.caps: dict[str, LearnedCap] = {}
        self.claims: dict[str, float] = {}
        self.log: deque[LoggedAttempt] = deque(maxlen=log_size)
        self.responses = Kept()
        self.policy: CircuitPolicy | None = None
        self.changed: CircuitChanged | None = None
        self.skipped = 0  # records of a shared backend it could not read (none here)

    @property
    def down(self) -> bool:
        return False  # no backend to lose

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

    async def release(self, provider: str, key: str, ttl_s: float, amount: int = 1) -> None:
        self.used[(provider, key)] = max(0, self.used.get((provider, key), 0) - amount)

    async def reserve(
        self, provider: str, key: str, limit: int, ttl_s: float, amount: int = 1
    ) -> int | None:
        total = self.used.get((provider, key), 0) + amount
        if total > limit:
            return None
        self.used[(provider, key)] = total
        return total

    async def cap(self, key: str, now: float) -> int | None:
        kept = self.caps.get(key)
        return kept.tokens if kept is not None and kept.until > now else None

    async def set_cap(self, key: str, cap: LearnedCap, now: float) -> int | None:
        before = await MemoryStore.cap(self, key, now)
        keep_cap(self.caps, key, cap, now)
        return before

    async def learned_caps(self, now: float) -> dict[str, LearnedCap]:
        return {k: c for k, c in self.caps.items() if c.until > now}

    async def forget_caps(self, now: float, prefix: str = "") -> int:
        gone = [k for k in self.caps if k.startswith(prefix)]
        return sum(self.caps.pop(k).until > now for k in gone)

    async def entries(self) -> tuple[dict[str, CircuitState], dict[tuple[str, str], int]]:
        return dict(self.circuits), dict(self.used)

    async def claim(self, key: str, until: float, now: float) -> bool:
        if self.claims.get(key, 0.0) > now:
            return False
        self.claims = {k: t for k, t in self.claims.items() if t > now}  # stays small
        self.claims[key] = until
        return True

    async def save_response(
        self, id: str, data: str, now: float, ttl_s: float, keep: Keep = ANYONE
    ) -> None:
        self.responses.save(id, data, now + ttl_s, now, keep)

    async def load_response(self, id: str, now: float) -> str | None:
        return self.responses.load(id, now)

    async def delete_response(self, id: str, now: float) -> bool:
        kept = self.responses.forget(id)
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
