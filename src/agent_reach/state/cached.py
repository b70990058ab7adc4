"""The common part of the shared stores (SQLite, Redis): an in-memory view that requests read,
kept in sync with the backend off the request path.

- Reads: the view, refreshed from the backend at most every `refresh_s`; the first read of a
  process waits for the first load (a fresh CLI run must see what earlier runs left), later
  refreshes run in the background.
- Writes: applied to the view at once, then queued for a writer task that sends them to the
  backend in order: circuits in a lane of their own (a circuit change never waits behind a
  batch of log lines), everything else in another. A circuit written here is not overwritten
  by a refresh until its write has landed; of two health results for a provider, the more
  recent check wins.
- Budget counters and the attempt log are batched: increments add up in memory and go out as
  one increment per counter, with the log lines, every `flush_s` (or at `batch` log lines), so
  the backend sees a few writes a second however busy the proxy is. Counters merge by maximum
  (within a window they only grow); processes sharing a store see each other's counts within
  `flush_s + refresh_s`, so a shared budget can be overshot by the requests of that moment.
- When the backend fails, the store logs it once, keeps serving from the view, and tries again
  after `retry_s`; when it answers again, it says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

from ..core.breaker import CLOSED, CircuitState
from ..core.routing import Health
from .memory import MemoryStore
from .store import ANYONE, Keep, LearnedCap, LoggedAttempt

log = logging.getLogger("agent_reach")
Work = Callable[[], Awaitable[Any]]


class Lane:
    """A queue of backend writes and the one task that sends them, in order, through `safe`."""

    def __init__(self, safe: Callable[[Awaitable[Any]], Awaitable[Any]]) -> None:
        self.queue: asyncio.Queue[Work] = asyncio.Queue()
        self.task = asyncio.create_task(self._run(safe))

    def put(self, work: Work) -> None:
        self.queue.put_nowait(work)

    async def _run(self, safe: Callable[[Awaitable[Any]], Awaitable[Any]]) -> None:
        while True:
            work = await self.queue.get()
            try:
                await safe(work())
            finally:
                self.queue.task_done()


class Snapshot(NamedTuple):
    """What a backend holds that requests read: circuits, live health results, counters and
    learned output caps."""

    circuits: dict[str, CircuitState]
    health: dict[str, Health]
    used: dict[tuple[str, str], int]
    caps: dict[str, LearnedCap]  # those not expired


class CachedStore(MemoryStore, ABC):
    """A shared store seen through a local view; subclasses provide the backend primitives."""

    refresh_s = 1.0
    flush_s = 0.5
    batch = 500
    retry_s = 5.0

    def __init__(self, where: str, retention_s: float) -> None:
        super().__init__()
        self.where = where  # for log lines: a path, or a URL without its password
        self.retention_s = retention_s
        self._loaded_at = float("-inf")
        self._refreshing: asyncio.Task[None] | None = None
        self._lanes: dict[str, Lane] = {}
        self._dirty: dict[str, int] = {}  # circuits with writes in flight
        self._caps_pending: dict[str, int] = {}  # learned caps with writes in flight
        self._buffer: list[LoggedAttempt] = []
        self._increments: dict[tuple[str, str], tuple[int, float]] = {}  # amount, ttl
        self._flusher: asyncio.TimerHandle | None = None
        self._down_until = 0.0

    # -- the backend ---------------------------------------------------------------------------

    @abstractmethod
    async def _load(self) -> Snapshot:
        """Every circuit, every health result not yet expired, every live budget counter."""

    @abstractmethod
    async def _save_circuit(self, provider: str, state: CircuitState, before: CircuitState) -> None:
        """Write a circuit that changed from `before` (as this view had it) to `state`."""

    @abstractmethod
    async def _save_health(self, provider: str, health: Health, ttl_s: float) -> None:
        """Keep the result, expiring after `ttl_s`."""

    @abstractmethod
    async def _incr(self, provider: str, key: str, amount: int, ttl_s: float) -> int:
        """Add to a counter; its new total."""

    @abstractmethod
    async def _save_cap(self, key: str, cap: LearnedCap) -> None:
        """Keep a learned output cap until it expires (the lower of it and a live one kept)."""

    @abstractmethod
    async def _forget_caps(self, now: float, prefix: str) -> int:
        """Delete the learned caps whose keys start with `prefix`; how many had not expired."""

    @abstractmethod
    async def _append(self, records: list[LoggedAttempt]) -> None: ...

    @abstractmethod
    async def _read(self, since: float) -> list[LoggedAttempt]: ...

    @abstractmethod
    async def _claim(self, key: str, until: float, now: float) -> bool: ...

    @abstractmethod
    async def _put_response(self, id: str, data: str, expires: float, keep: Keep) -> None:
        """Store it, then evict the oldest past `keep`'s caps (`memory.overflow`)."""

    @abstractmethod
    async def _get_response(self, id: str, now: float) -> str | None: ...

    @abstractmethod
    async def _delete_response(self, id: str) -> bool: ...

    @abstractmethod
    async def _close(self) -> None: ...

    # -- failing safe --------------------------------------------------------------------------

    @property
    def down(self) -> bool:
        return time.monotonic() < self._down_until

    async def _safe(self, work: Awaitable[Any]) -> Any:
        """Run a backend call; None (and a log line the first time) when the backend fails."""
        if self.down:
            if asyncio.iscoroutine(work):
                work.close()
            return None
        try:
            result = await work
        except Exception as exc:
            if self._down_until == 0.0:
                log.warning(
                    "agent-reach: state store %s is down (%s); routing on in-memory state",
                    self.where,
                    str(exc) or ("timed out" if isinstance(exc, TimeoutError) else "no answer"),
                )
            self._down_until = time.monotonic() + self.retry_s
            return None
        if self._down_until:
            log.warning("agent-reach: state store %s is back", self.where)
            self._down_until = 0.0
        return result

    # -- reads ---------------------------------------------------------------------------------

    async def _sync(self) -> None:
        now = time.monotonic()
        if now - self._loaded_at < self.refresh_s:
            return
        first = self._loaded_at == float("-inf")
        self._loaded_at = now
        if first:
            await self._refresh()
        elif self._refreshing is None or self._refreshing.done():
            self._refreshing = asyncio.create_task(self._refresh())

    async def refresh(self) -> None:
        """Re-read the backend now (for views that must be current, such as `status`)."""
        self._loaded_at = time.monotonic()
        await self._refresh()

    async def _refresh(self) -> None:
        loaded = await self._safe(self._load())
        if loaded is None:
            return
        circuits, health, used, caps = loaded
        for name in set(self.circuits) | set(circuits):
            if not self._pinned(name):
                await MemoryStore.set_circuit(self, name, circuits.get(name, CircuitState()))
        for name, result in health.items():
            mine = self.healths.get(name)
            if mine is None or result.checked_at > mine.checked_at:
                self.healths[name] = result
        for key, total in used.items():
            self.used[key] = max(total, self.used.get(key, 0))
        # The backend's caps replace the view's (a `caps --forget` elsewhere reaches this
        # process), but for those whose write has not landed yet.
        self.caps = {**caps, **{k: self.caps[k] for k in self._caps_pending if k in self.caps}}

    def _pinned(self, provider: str) -> bool:
        """Whether a refresh must leave this circuit's view alone (its write is in flight)."""
        return provider in self._dirty

    async def circuit(self, provider: str) -> CircuitState:
        await self._sync()
        return await super().circuit(provider)

    async def health(self, provider: str) -> Health | None:
        await self._sync()
        return await super().health(provider)

    async def usage(self, provider: str, key: str) -> int:
        await self._sync()
        return await super().usage(provider, key)

    async def cap(self, key: str, now: float) -> int | None:
        await self._sync()
        return await super().cap(key, now)

    async def learned_caps(self, now: float) -> dict[str, LearnedCap]:
        await self._sync()
        return await super().learned_caps(now)

    async def entries(self) -> tuple[dict[str, CircuitState], dict[tuple[str, str], int]]:
        await self._sync()
        return await super().entries()

    async def attempts(self, since: float) -> list[LoggedAttempt]:
        await self._flush()
        return list(await self._safe(self._read(since)) or [])

    # -- writes --------------------------------------------------------------------------------

    def _enqueue(self, work: Work, lane: str = "bulk") -> None:
        found = self._lanes.get(lane)
        if found is None:
            found = self._lanes[lane] = Lane(self._safe)
        found.put(work)

    async def settle(self) -> None:
        """Wait (a few seconds at most) until every queued write has been sent."""
        for lane in list(self._lanes.values()):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(lane.queue.join(), 3.0)

    async def set_circuit(self, provider: str, state: CircuitState) -> None:
        before = self.circuits.get(provider, CLOSED)
        await super().set_circuit(provider, state)
        self._write_circuit(provider, lambda: self._save_circuit(provider, state, before))

    def _write_circuit(self, provider: str, work: Work) -> None:
        """Queue a circuit's write; until it has landed, refreshes leave its view alone."""
        self._enqueue(_pending(self._dirty, provider, work), "circuits")

    async def set_health(self, provider: str, health: Health, ttl_s: float) -> None:
        await super().set_health(provider, health, ttl_s)
        self._enqueue(lambda: self._save_health(provider, health, ttl_s))

    async def set_cap(self, key: str, cap: LearnedCap, now: float) -> int | None:
        before = await super().set_cap(key, cap, now)
        if self.caps.get(key) is cap:  # kept: refreshes leave it alone until it has landed
            self._enqueue(_pending(self._caps_pending, key, lambda: self._save_cap(key, cap)))
        return before

    async def forget_caps(self, now: float, prefix: str = "") -> int:
        """Forget them in the view and, at once, in the backend (a CLI run ends right after)."""
        here = await super().forget_caps(now, prefix)
        there = await self._safe(self._forget_caps(now, prefix))
        return here if there is None else int(there)

    async def add_usage(self, provider: str, key: str, amount: int, ttl_s: float) -> int:
        total = await super().add_usage(provider, key, amount, ttl_s)
        pending = self._increments.get((provider, key), (0, ttl_s))[0]
        self._increments[(provider, key)] = (pending + amount, ttl_s)
        self._schedule_flush()
        return total

    async def reserve(
        self, provider: str, key: str, limit: int, ttl_s: float, amount: int = 1
    ) -> int | None:
        """Taken in the backend itself, on the request path (an increment that passes `limit`
        is taken back); in this process's view while the backend is down."""
        shared = await self._safe(self._incr(provider, key, amount, ttl_s))
        if shared is None:
            return await super().reserve(provider, key, limit, ttl_s, amount)
        if shared > limit:  # they do not fit: taken back, and what is there now is known
            await self._safe(self._incr(provider, key, -amount, ttl_s))
            self.used[(provider, key)] = min(max(0, shared - amount), limit)
            return None
        self.used[(provider, key)] = int(shared)
        return int(shared)

    async def release(self, provider: str, key: str, ttl_s: float, amount: int = 1) -> None:
        shared = await self._safe(self._incr(provider, key, -amount, ttl_s))
        if shared is None:
            await super().release(provider, key, ttl_s, amount)
        else:
            self.used[(provider, key)] = max(0, shared)

    async def claim(self, key: str, until: float, now: float) -> bool:
        if self.down:
            return await super().claim(key, until, now)
        shared = await self._safe(self._claim(key, until, now))
        return await super().claim(key, until, now) if shared is None else bool(shared)

    # Stored responses are written in the background; the view holds them until their write
    # has landed (so a store that is down loses none of this process's), and reads go to the
    # backend for the rest (so a DELETE on one instance is seen by all).

    async def save_response(
        self, id: str, data: str, now: float, ttl_s: float, keep: Keep = ANYONE
    ) -> None:
        await super().save_response(id, data, now, ttl_s, keep)

        async def write() -> None:
            await self._put_response(id, data, now + ttl_s, keep)
            self.responses.forget(id)

        self._enqueue(write)

    async def load_response(self, id: str, now: float) -> str | None:
        found = await super().load_response(id, now)
        if found is None:
            found = await self._safe(self._get_response(id, now))
        return found

    async def delete_response(self, id: str, now: float) -> bool:
        local = await super().delete_response(id, now)
        shared = await self._safe(self._delete_response(id))
        return local or bool(shared)

    def record(self, attempt: LoggedAttempt) -> None:
        self._buffer.append(attempt)
        if len(self._buffer) >= self.batch:
            self._enqueue(self._flush)
        else:
            self._schedule_flush()

    def _schedule_flush(self) -> None:
        if self._flusher is None:
            loop = asyncio.get_running_loop()
            self._flusher = loop.call_later(self.flush_s, self._enqueue, self._flush)

    async def _flush(self) -> None:
        """Send the batched counter increments and log lines."""
        if self._flusher is not None:
            self._flusher.cancel()
            self._flusher = None
        increments, self._increments = self._increments, {}
        for (provider, key), (amount, ttl_s) in increments.items():
            shared = await self._safe(self._incr(provider, key, amount, ttl_s))
            if shared is not None:
                self.used[(provider, key)] = max(shared, self.used.get((provider, key), 0))
        if self._buffer:
            records, self._buffer = self._buffer, []
            await self._safe(self._append(records))

    async def flush(self) -> None:
        """Write what is pending (waiting a few seconds at most) and stop the background tasks,
        which start again on the next use (perhaps in another event loop)."""
        await self._flush()
        await self.settle()
        tasks = [lane.task for lane in self._lanes.values()]
        if self._refreshing is not None:
            tasks.append(self._refreshing)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)  # connections close on the way out
        self._lanes = {}
        self._refreshing = None

    async def aclose(self) -> None:
        """Write what is pending, then close the backend."""
        await self.flush()
        with contextlib.suppress(Exception):
            await self._close()


def _pending(counts: dict[str, int], key: str, work: Work) -> Work:
    """`work`, counted in `counts[key]` from now until it has run (a write in flight)."""
    counts[key] = counts.get(key, 0) + 1

    async def write() -> None:
        try:
            await work()
        finally:
            left = counts.pop(key, 1) - 1
            if left:
                counts[key] = left

    return write
