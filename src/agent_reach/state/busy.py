"""Requests in flight by provider, for `balance: least_busy` (protocol §3): this process's own,
counted by the engine around each try (`enter`, `leave`: from its send to its answer, or a
stream's first content), and, for a fleet on Redis, every other instance's as last heard.

An instance that balances by `least_busy` swaps its counts with the fleet at most every
`EVERY_S`, off the request path: its own go to `agent-reach:busy:INSTANCE` (a hash that
expires after `TTL_MS`, so a stopped instance's counts vanish), the others' are read and
summed. A Redis that fails leaves the last figures heard: the order is only an order.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from typing import Any

from .redis_layout import PREFIX
from .store import StateStore

EVERY_S = 0.25  # how often an instance swaps its counts with the fleet, at most
TTL_MS = 2000  # an instance's counts are forgotten this long after it last sent them


class Busy(dict[str, float]):
    """Requests in flight by provider name: this process's and the fleet's (`swap`)."""

    def __init__(self, redis: Any = None, instance: str = "") -> None:
        super().__init__()
        self._own: Counter[str] = Counter()
        self._others: dict[str, float] = {}
        self._redis = redis
        self._instance = instance
        self._at = 0.0
        self._task: asyncio.Task[None] | None = None

    def enter(self, name: str) -> None:
        self._own[name] += 1
        self[name] = self._own[name] + self._others.get(name, 0.0)
        self._exchange()

    def leave(self, name: str) -> None:
        self._own[name] -= 1
        self[name] = self._own[name] + self._others.get(name, 0.0)

    def _exchange(self) -> None:
        """Swap counts with the fleet, if it is time and none is under way."""
        if self._redis is None or (self._task is not None and not self._task.done()):
            return
        now = time.monotonic()
        if now - self._at < EVERY_S:
            return
        self._at = now
        self._task = asyncio.get_running_loop().create_task(self._swap())

    async def _swap(self) -> None:
        mine = f"{PREFIX}busy:{self._instance}"
        with contextlib.suppress(Exception):  # a store that fails keeps the last figures
            async with self._redis.pipeline(transaction=False) as pipe:
                pipe.delete(mine)
                pipe.hset(mine, mapping={"": 0, **dict(self._own)})  # never empty
                pipe.pexpire(mine, TTL_MS)
                await pipe.execute()
            others: dict[str, float] = {}
            async for key in self._redis.scan_iter(match=f"{PREFIX}busy:*", count=100):
                if key != mine:
                    for name, n in (await self._redis.hgetall(key)).items():
                        others[name] = others.get(name, 0.0) + float(n)
            self._others = others
            for name in {*self, *others}:
                self[name] = self._own.get(name, 0) + others.get(name, 0.0)

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task


def busy_for(store: StateStore, fleet: bool) -> Busy:
    """The counts of a process whose routes balance by `least_busy` (`fleet`): shared through
    Redis when the state is there, else its own."""
    from .redis import RedisStore

    if fleet and isinstance(store, RedisStore):
        return Busy(store.redis, store.instance)
    return Busy()
