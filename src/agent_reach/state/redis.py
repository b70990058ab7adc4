"""State in Redis (`state: redis://HOST:PORT/DB`): several proxy instances behave as one router
(protocol §12.1).

The keys, the channel and the message format: `redis_wire.py`.

The fleet's circuit: a counted failure is an INCRBY of `fails:` (one round trip, in the
background; failures that arrive while one is on its way go out together); the instance whose
count reaches `circuit.failures` opens the circuit and publishes it (a second round trip), so
the fleet sends about `failures` requests to a dead provider, not `failures` per instance.
The half-open trial is claimed by one atomic script: an instance that finds a circuit cooled
down skips the provider for that request and claims the trial in the background; the
winner's next request is the fleet's one trial. No request
waits on Redis. Writes are MULTI/EXEC pipelines or scripts, so each update is atomic.
Requires the `redis` package (`pip install 'agent-reach-router[redis]'`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any, TypeVar

from ..core import breaker
from ..core.breaker import CLOSED, CircuitState
from ..core.errors import quoted
from ..core.routing import Health
from .cached import CachedStore, Snapshot
from .memory import MemoryStore, overflow
from .redis_layout import (
    CHANNEL,
    CLAIM_TRIAL,
    PREFIX,
    attempt_fields,
    attempt_of,
    cap_of,
    cap_value,
    circuit_of,
    count_of,
    fields,
    glob_escaped,
    health_of,
    message,
    meta_of,
    meta_value,
    parse,
    public_url,
)
from .store import Keep, LearnedCap, LoggedAttempt

log = logging.getLogger("agent_reach")
T = TypeVar("T")
_LOG_CAP = 100_000
_KEEP_S = 3600  # circuit records and failure counts outlive their last change by an hour


class RedisStore(CachedStore):
    """Circuits, budgets, claims and the attempt log in Redis."""

    def __init__(self, url: str, retention_s: float = 7 * 86400) -> None:
        super().__init__(public_url(url), retention_s)
        import redis.asyncio as aioredis
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff
        from redis.exceptions import ConnectionError as Disconnected

        # One retry on a connection error: a pooled connection that died with a restarted
        # server is replaced at once instead of reporting the store down again.
        self.redis: Any = aioredis.from_url(
            url,
            socket_connect_timeout=1.0,
            socket_timeout=1.0,
            decode_responses=True,
            retry=Retry(NoBackoff(), 1),
            retry_on_error=[Disconnected],
        )
        self.instance = os.urandom(6).hex()
        self._listener: asyncio.Task[None] | None = None
        self._granted: dict[str, CircuitState] = {}  # trials this instance won, not yet used
        self._claiming: set[str] = set()
        self._failures: dict[str, int] = {}  # counted failures not yet sent, by circuit
        self._claim_script: Any = self.redis.register_script(CLAIM_TRIAL)

    async def _load(self) -> Snapshot:
        from redis.exceptions import ResponseError

        circuits: dict[str, CircuitState] = {}
        async for key in self.redis.scan_iter(match=f"{PREFIX}circuit:*", count=500):
            try:
                h = await self.redis.hgetall(key)
            except ResponseError:  # not a hash
                h = None
            if h == {}:
                continue  # it expired since the scan
            state = self._readable(key, None if h is None else circuit_of(h))
            if state is not None:
                circuits[key.removeprefix(f"{PREFIX}circuit:")] = state
        for name, count in await self._values("fails:", count_of):
            found = circuits.get(name, CLOSED)
            if count > found.failures:
                circuits[name] = replace(found, failures=count)
        used: dict[tuple[str, str], int] = {}
        for name, value in await self._values("usage:", count_of):
            provider, _, window = name.partition("|")
            used[(provider, window)] = value
        health = dict(await self._values("health:", health_of))
        caps = dict(await self._values("cap:", cap_of))
        return Snapshot(circuits, health, used, caps)

    async def _values(self, kind: str, read: Callable[[str], T | None]) -> list[tuple[str, T]]:
        """(key without `agent-reach:{kind}`, value as `read` reads it) of every live string
        key of a kind; one it cannot read is skipped (`_readable`)."""
        keys = [k async for k in self.redis.scan_iter(match=f"{PREFIX}{kind}*", count=500)]
        if not keys:
            return []
        values = await self.redis.mget(keys)
        found = []
        for key, value in zip(keys, values, strict=True):
            if value is not None and (read_value := self._readable(key, read(value))) is not None:
                found.append((key.removeprefix(f"{PREFIX}{kind}"), read_value))
        return found

    def _readable(self, where: str, value: T | None) -> T | None:
        """`value`, what a reader made of the record or message at `where`; None (counted in
        `skipped`, the first one logged) when the reader could not read it: one bad record
        is skipped, and the store reads on."""
        if value is None:
            self.skipped += 1
            if self.skipped == 1:
                log.warning(
                    "agent-reach: state store %s: skipped %s, which this version cannot read;"
                    " further ones are counted in agent_reach_state_skipped_records_total",
                    self.where,
                    quoted(where),
                )
        return value

    async def _save_health(self, provider: str, health: Health, ttl_s: float) -> None:
        value = json.dumps(health.to_dict())
        await self.redis.set(f"{PREFIX}health:{provider}", value, px=max(1, int(ttl_s * 1000)))

    # -- circuits, fleet-wide ------------------------------------------------------------------

    async def set_circuit(self, provider: str, state: CircuitState) -> None:
        """A counted failure goes to the fleet's counter (failures that pile up while one
        count is on its way go out together); any other change is written and published."""
        before = self.circuits.get(provider, CLOSED)
        if not breaker.counted(before, state):
            await super().set_circuit(provider, state)
            return
        await MemoryStore.set_circuit(self, provider, state)
        pending = self._failures.get(provider, 0)
        self._failures[provider] = pending + 1
        if not pending:
            self._write_circuit(
                provider, lambda: self._count_failures(provider, self._failures.pop(provider, 0))
            )

    async def _save_circuit(self, provider: str, state: CircuitState, before: CircuitState) -> None:
        key = f"{PREFIX}circuit:{provider}"
        async with self.redis.pipeline(transaction=True) as pipe:
            if state == CLOSED:
                pipe.delete(key, f"{PREFIX}fails:{provider}")
            else:
                pipe.hset(key, mapping=fields(state))
                pipe.expire(key, max(60, int(state.open_until - time.time()) + _KEEP_S))
            pipe.publish(CHANNEL, message(self.instance, provider, state))
            await pipe.execute()

    async def _count_failures(self, provider: str, failures: int) -> None:
        """Add failures to the fleet's count; open the circuit when it reaches the policy's
        threshold (and publish that)."""
        name = f"{PREFIX}fails:{provider}"
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.incrby(name, failures)
            pipe.expire(name, _KEEP_S)
            total, _ = await pipe.execute()
        if self.policy is None:
            return
        before = self.circuits.get(provider, CLOSED)
        after = breaker.fleet_count(before, int(total), time.time(), self.policy)
        if after == before:
            return
        await MemoryStore.set_circuit(self, provider, after)
        if not after.closed:
            self._write_circuit(provider, lambda: self._save_circuit(provider, after, before))
            if self.changed is not None:
                self.changed(provider, before, after)

    async def lease(self, provider: str, state: CircuitState) -> bool:
        """A trial this instance won (and has not used) goes out now; otherwise the trial is
        claimed in the background, and this request skips the provider."""
        granted = self._granted.pop(provider, None)
        if granted is not None and granted.is_open(time.time()):
            await MemoryStore.set_circuit(self, provider, granted)
            return True
        if self.down:  # no fleet to ask: this instance decides alone
            return await super().lease(provider, state)
        if provider not in self._claiming:
            self._claiming.add(provider)
            self._write_circuit(provider, lambda: self._claim_trial(provider, state))
        return False

    def _pinned(self, provider: str) -> bool:
        return provider in self._granted or super()._pinned(provider)

    async def _claim_trial(self, provider: str, state: CircuitState) -> None:
        try:
            won = await self._claim_script(
                keys=[f"{PREFIX}circuit:{provider}"],
                args=[
                    repr(time.time()),
                    max(60, int(state.open_until - time.time()) + _KEEP_S),
                    CHANNEL,
                    message(self.instance, provider, state),
                    *(item for pair in fields(state).items() for item in pair),
                ],
            )
        finally:
            self._claiming.discard(provider)
        if won:
            self._granted[provider] = state
        else:  # another instance has the trial: skip until its lease ends (or it reports)
            await MemoryStore.set_circuit(self, provider, state)

    # -- the subscription ----------------------------------------------------------------------

    async def _sync(self) -> None:
        if self._listener is None:
            self._listener = asyncio.create_task(self._listen_forever())
        await super()._sync()

    async def _listen_forever(self) -> None:
        """Apply peers' circuit changes as they are published; resubscribe after an outage
        (the store's down/back log lines say when)."""
        while True:
            pubsub = self.redis.pubsub()
            try:
                if await self._safe(self._subscribe(pubsub)):
                    await self._safe(self._receive(pubsub))
            finally:
                with contextlib.suppress(Exception):
                    await pubsub.aclose()
            await asyncio.sleep(max(0.1, self._down_until - time.monotonic()))

    async def _subscribe(self, pubsub: Any) -> bool:
        """Subscribed once Redis confirms it (a pooled connection may have died with the
        server: sending on it succeeds, reading the answer does not)."""
        await pubsub.subscribe(CHANNEL)
        async with asyncio.timeout(2.0):
            while True:
                message = await pubsub.get_message(timeout=1.0)
                if message is not None and message["type"] == "subscribe":
                    return True

    async def _receive(self, pubsub: Any) -> None:
        while True:
            message = await pubsub.get_message(timeout=5.0)
            if message is not None and message["type"] == "message":
                self._apply(message["data"])

    def _apply(self, message: str) -> None:
        """A peer's circuit change: an opening (or a lease) that ends later than what this view
        has wins; a close or a count applies unless this instance's own write is in flight.
        A message it cannot read is skipped."""
        change = self._readable(f"a message on {CHANNEL}", parse(message))
        if change is None:
            return
        instance, key, state = change
        if instance == self.instance:
            return
        before = self.circuits.get(key, CLOSED)
        if state.closed:
            if key in self._dirty:
                return
        elif state.open_until <= before.open_until:
            return
        if state == CLOSED:
            self.circuits.pop(key, None)
        else:
            self.circuits[key] = state
        self._granted.pop(key, None)
        if self.changed is not None:
            self.changed(key, before, state)

    async def flush(self) -> None:
        await super().flush()
        if self._listener is not None:
            await _stopped(self._listener)  # its subscription is closed on the way out
            self._listener = None

    async def _save_cap(self, key: str, cap: LearnedCap) -> None:
        keep_ms = int((cap.until - time.time()) * 1000)
        if keep_ms > 0:
            await self.redis.set(f"{PREFIX}cap:{key}", cap_value(cap), px=keep_ms)

    async def _forget_caps(self, now: float, prefix: str) -> int:
        match = f"{PREFIX}cap:{glob_escaped(prefix)}*"
        keys = [k async for k in self.redis.scan_iter(match=match, count=500)]
        return int(await self.redis.delete(*keys)) if keys else 0

    async def _incr(self, provider: str, key: str, amount: int, ttl_s: float) -> int:
        name = f"{PREFIX}usage:{provider}|{key}"
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.incrby(name, amount)
            pipe.expire(name, max(1, int(ttl_s) + 60))
            total, _ = await pipe.execute()
        return int(total)

    async def _append(self, records: list[LoggedAttempt]) -> None:
        stream = f"{PREFIX}attempts"
        min_id = int((time.time() - self.retention_s) * 1000)
        async with self.redis.pipeline(transaction=True) as pipe:
            for r in records:
                pipe.xadd(stream, attempt_fields(r), maxlen=_LOG_CAP, approximate=True)
            pipe.xtrim(stream, minid=min_id, approximate=True)
            await pipe.execute()

    async def _read(self, since: float) -> list[LoggedAttempt]:
        # Entry ids are insertion times; a record is written within seconds of its `ts`.
        stream = f"{PREFIX}attempts"
        rows = await self.redis.xrange(stream, min=int((since - 60) * 1000))
        records = [self._readable(f"{stream} entry {i}", attempt_of(f)) for i, f in rows]
        return [r for r in records if r is not None and r.ts >= since]

    async def _claim(self, key: str, until: float, now: float) -> bool:
        ttl_ms = max(1, int((until - now) * 1000))
        return bool(await self.redis.set(f"{PREFIX}claim:{key}", "1", nx=True, px=ttl_ms))

    async def _put_response(self, id: str, data: str, expires: float, keep: Keep) -> None:
        now = time.time()
        ttl_ms = int((expires - now) * 1000)
        if ttl_ms <= 0:  # one that has expired already is not written at all
            return
        index, meta = f"{PREFIX}responses", f"{PREFIX}responses:meta"
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.set(f"{PREFIX}response:{id}", data, px=ttl_ms)
            pipe.zadd(index, {id: now})
            pipe.hset(meta, id, meta_value(len(data), expires, keep.owner))
            for key in (index, meta):
                pipe.pexpire(key, ttl_ms)
            await pipe.execute()
        ids = await self.redis.zrange(index, 0, -1)  # oldest first
        found = await self.redis.hmget(meta, ids) if ids else []
        rows, expired = [], []
        for i, value in zip(ids, found, strict=True):
            entry = None if value is None else self._readable(f"{meta} {i}", meta_of(value))
            if entry is None or entry[1] <= now:
                expired.append(i)  # gone, or unreadable: evicted
            else:
                rows.append((i, entry[2], entry[0]))
        gone = [*expired, *overflow(rows, keep)]
        if gone:
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.delete(*(f"{PREFIX}response:{i}" for i in gone))
                pipe.zrem(index, *gone)
                pipe.hdel(meta, *gone)
                await pipe.execute()

    async def _get_response(self, id: str, now: float) -> str | None:
        found = await self.redis.get(f"{PREFIX}response:{id}")
        return None if found is None else str(found)

    async def _delete_response(self, id: str) -> bool:
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.delete(f"{PREFIX}response:{id}")
            pipe.zrem(f"{PREFIX}responses", id)
            pipe.hdel(f"{PREFIX}responses:meta", id)
            deleted, _, _ = await pipe.execute()
        return bool(deleted)

    async def _close(self) -> None:
        await self.redis.aclose()


async def _stopped(task: asyncio.Task[None], tries: int = 50) -> None:
    """Cancel `task` and wait for its end, cancelling again each 0.1 s (5 s at most): one
    cancel can be lost. redis-py sends a command inside `asyncio.wait_for`, which on Python
    3.11 drops a cancel that comes as the command is written; the subscription then reads on
    for ever, and `agent-reach report` (which closes the store right after it opened it)
    never returned."""
    for _ in range(tries):
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=0.1)
        if done:
            return
