"""State in Redis (`state: redis://HOST:PORT/DB`), one view for several proxy instances.

Keys (all under `agent-reach:`), each with a TTL so nothing grows without bound:
- `circuit:{provider}`   a hash (failures, open_until, trial, cause); expires an hour after it
                         would close; a closed circuit is deleted.
- `health:{provider}`    the latest health check result (JSON), expiring after `health.ttl_s`.
- `usage:{provider}:{window}` a counter (INCRBY), expiring when its window ends.
- `claim:{key}`          SET NX PX: the first instance to claim an alert sends it.
- `response:{id}`        a stored Responses-API response (JSON), expiring after
                         `server.responses_ttl_s`.
- `attempts`             a stream (XADD, trimmed to the retention with MINID and ~100k
                         entries), read by `agent-reach report`.
Writes are MULTI/EXEC pipelines, so each update is atomic. Requires the `redis` package
(`pip install 'agent-reach[redis]'`).
"""

from __future__ import annotations

import json
import time
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from ..breaker import CLOSED, CircuitState
from ..routing import Health
from . import LoggedAttempt
from .cached import CachedStore, Snapshot

PREFIX = "agent-reach:"
_LOG_CAP = 100_000


def _public(url: str) -> str:
    """The URL without its password, for log lines."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


class RedisStore(CachedStore):
    """Circuits, budgets, claims and the attempt log in Redis."""

    def __init__(self, url: str, retention_s: float = 7 * 86400) -> None:
        super().__init__(_public(url), retention_s)
        import redis.asyncio as aioredis

        self.redis: Any = aioredis.from_url(
            url, socket_connect_timeout=1.0, socket_timeout=1.0, decode_responses=True
        )

    async def _load(self) -> Snapshot:
        circuits: dict[str, CircuitState] = {}
        async for key in self.redis.scan_iter(match=f"{PREFIX}circuit:*", count=500):
            h = await self.redis.hgetall(key)
            if h:
                circuits[key.removeprefix(f"{PREFIX}circuit:")] = CircuitState(
                    int(h["failures"]), float(h["open_until"]), h["trial"] == "1", h["cause"]
                )
        used: dict[tuple[str, str], int] = {}
        for name, value in await self._values("usage:"):
            provider, _, window = name.partition("|")
            used[(provider, window)] = int(value)
        health = {
            name: Health.from_dict(json.loads(v)) for name, v in await self._values("health:")
        }
        return Snapshot(circuits, health, used)

    async def _values(self, kind: str) -> list[tuple[str, str]]:
        """(key without `agent-reach:{kind}`, value) of every live string key of a kind."""
        keys = [k async for k in self.redis.scan_iter(match=f"{PREFIX}{kind}*", count=500)]
        if not keys:
            return []
        values = await self.redis.mget(keys)
        return [
            (k.removeprefix(f"{PREFIX}{kind}"), v)
            for k, v in zip(keys, values, strict=True)
            if v is not None
        ]

    async def _save_health(self, provider: str, health: Health, ttl_s: float) -> None:
        value = json.dumps(health.to_dict())
        await self.redis.set(f"{PREFIX}health:{provider}", value, px=max(1, int(ttl_s * 1000)))

    async def _save_circuit(self, provider: str, state: CircuitState) -> None:
        key = f"{PREFIX}circuit:{provider}"
        async with self.redis.pipeline(transaction=True) as pipe:
            if state == CLOSED:
                pipe.delete(key)
            else:
                pipe.hset(
                    key,
                    mapping={
                        "failures": state.failures,
                        "open_until": state.open_until,
                        "trial": int(state.trial),
                        "cause": state.cause,
                    },
                )
                pipe.expire(key, max(60, int(state.open_until - time.time()) + 3600))
            await pipe.execute()

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
                fields = {
                    "ts": r.ts,
                    "request": r.request,
                    "route": r.route,
                    "provider": r.provider,
                    "reason": r.reason,
                    "status": "" if r.status is None else r.status,
                    "ms": r.ms,
                    "last_resort": int(r.last_resort),
                }
                pipe.xadd(stream, fields, maxlen=_LOG_CAP, approximate=True)
            pipe.xtrim(stream, minid=min_id, approximate=True)
            await pipe.execute()

    async def _read(self, since: float) -> list[LoggedAttempt]:
        # Entry ids are insertion times; a record is written within seconds of its `ts`.
        rows = await self.redis.xrange(f"{PREFIX}attempts", min=int((since - 60) * 1000))
        records = [
            LoggedAttempt(
                float(f["ts"]),
                f["request"],
                f["route"],
                f["provider"],
                f["reason"],
                int(f["status"]) if f["status"] else None,
                float(f["ms"]),
                f["last_resort"] == "1",
            )
            for _, f in rows
        ]
        return [r for r in records if r.ts >= since]

    async def _claim(self, key: str, until: float, now: float) -> bool:
        ttl_ms = max(1, int((until - now) * 1000))
        return bool(await self.redis.set(f"{PREFIX}claim:{key}", "1", nx=True, px=ttl_ms))

    async def _put_response(self, id: str, data: str, expires: float) -> None:
        ttl_ms = int((expires - time.time()) * 1000)
        if ttl_ms > 0:  # one that has expired already is not written at all
            await self.redis.set(f"{PREFIX}response:{id}", data, px=ttl_ms)

    async def _get_response(self, id: str, now: float) -> str | None:
        found = await self.redis.get(f"{PREFIX}response:{id}")
        return None if found is None else str(found)

    async def _delete_response(self, id: str) -> bool:
        return bool(await self.redis.delete(f"{PREFIX}response:{id}"))

    async def _close(self) -> None:
        await self.redis.aclose()
