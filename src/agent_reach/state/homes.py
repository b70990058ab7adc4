"""Where sessions' homes live (`Homes`: get, set, forget; `engine.affinity` decides them),
beside the config's state, so that every process sharing it (a fleet on Redis, CLI runs and a
proxy on SQLite) sends a session's turns to the same home: `homes_for(store, limit)`. Each is
bounded in number (the least recently set go first) and expiring. This process's view of them
(`Shared`) answers a request's read when it is fresh, and when the backend fails: affinity only
orders, so a stale or lost home costs a cache, never a request.
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from .redis_layout import PREFIX
from .store import StateStore

if TYPE_CHECKING:
    import sqlite3

    from .sqlite import SQLiteStore

_INDEX = f"{PREFIX}homes"  # Redis: every home's key, scored by when it was last set
_PRUNE_EVERY = 64  # SQLite: sets between two prunes to `limit`
FRESH_S = 2.0  # how long a home read from the shared backend is taken from this process's view
_KEPT_S = 86400.0  # how long this process keeps a home it read, for when the backend fails


@dataclass(frozen=True, slots=True)
class Home:
    """A session's home seat, and how many turns in a row were answered elsewhere."""

    seat: str
    away: int = 0

    @property
    def provider(self) -> str:
        return self.seat.split("/", 1)[0]  # a provider's name never holds a `/`


class Homes(Protocol):
    """Where homes are kept: by session key, expiring `ttl_s` after their last `set`."""

    async def get(self, key: str, now: float) -> Home | None: ...

    async def set(self, key: str, home: Home, now: float, ttl_s: float) -> None: ...

    async def forget(self, key: str) -> None: ...


class MemoryHomes:
    """This process's homes: at most `limit`, the least recently used forgotten first."""

    def __init__(self, limit: int) -> None:
        self._homes: OrderedDict[str, tuple[Home, float]] = OrderedDict()
        self._limit = limit

    async def get(self, key: str, now: float) -> Home | None:
        found = self._homes.get(key)
        if found is None:
            return None
        if found[1] <= now:
            del self._homes[key]
            return None
        self._homes.move_to_end(key)
        return found[0]

    async def set(self, key: str, home: Home, now: float, ttl_s: float) -> None:
        self._homes[key] = (home, now + ttl_s)
        self._homes.move_to_end(key)
        while len(self._homes) > self._limit:
            self._homes.popitem(last=False)

    async def forget(self, key: str) -> None:
        self._homes.pop(key, None)


def homes_for(store: StateStore, limit: int) -> Homes:
    """The homes of `store`'s backend: Redis's or SQLite's, else this process's."""
    from .redis import RedisStore
    from .sqlite import SQLiteStore

    if isinstance(store, RedisStore):
        return Shared(RedisHomes(store.redis, limit), limit)
    if isinstance(store, SQLiteStore):
        return Shared(SQLiteHomes(store, limit), limit)
    return MemoryHomes(limit)


def _encoded(home: Home) -> str:
    return f"{home.away}|{home.seat}"


def _decoded(value: Any) -> Home | None:
    if not isinstance(value, str) or "|" not in value:
        return None
    away, _, seat = value.partition("|")
    return Home(seat, int(away)) if away.isdigit() and seat else None


class RedisHomes:
    """Homes in Redis: one key each (`agent-reach:home:KEY`, expiring), and an index that keeps
    them to `limit`."""

    def __init__(self, redis: Any, limit: int) -> None:
        self._redis = redis
        self._limit = limit

    async def get(self, key: str, now: float) -> Home | None:
        return _decoded(await self._redis.get(f"{PREFIX}home:{key}"))

    async def set(self, key: str, home: Home, now: float, ttl_s: float) -> None:
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.set(f"{PREFIX}home:{key}", _encoded(home), px=max(1, int(ttl_s * 1000)))
            pipe.zadd(_INDEX, {key: now})
            pipe.zremrangebyscore(_INDEX, "-inf", now - ttl_s)  # expired ones
            pipe.zcard(_INDEX)
            count = (await pipe.execute())[-1]
        if count > self._limit:
            oldest = await self._redis.zpopmin(_INDEX, count - self._limit)
            if oldest:
                await self._redis.delete(*(f"{PREFIX}home:{k}" for k, _ in oldest))

    async def forget(self, key: str) -> None:
        await self._redis.delete(f"{PREFIX}home:{key}")
        await self._redis.zrem(_INDEX, key)


class SQLiteHomes:
    """Homes in the state's SQLite file (table `homes`), pruned to `limit` now and then."""

    def __init__(self, store: SQLiteStore, limit: int) -> None:
        self._store = store
        self._limit = limit
        self._sets = 0
        self._made = False

    def _table(self, db: sqlite3.Connection) -> sqlite3.Connection:
        if not self._made:
            db.execute(
                "CREATE TABLE IF NOT EXISTS homes (key TEXT PRIMARY KEY, home TEXT NOT NULL,"
                " expires REAL NOT NULL, since REAL NOT NULL)"
            )
            self._made = True
        return db

    async def get(self, key: str, now: float) -> Home | None:
        def get(db: sqlite3.Connection) -> Any:
            row = (
                self._table(db)
                .execute("SELECT home FROM homes WHERE key = ? AND expires > ?", (key, now))
                .fetchone()
            )
            return None if row is None else row[0]

        return _decoded(await self._store.with_db(get))

    async def set(self, key: str, home: Home, now: float, ttl_s: float) -> None:
        self._sets += 1
        prune = self._sets % _PRUNE_EVERY == 0

        def put(db: sqlite3.Connection) -> None:
            self._table(db).execute(
                "INSERT OR REPLACE INTO homes VALUES (?, ?, ?, ?)",
                (key, _encoded(home), now + ttl_s, now),
            )
            if prune:
                db.execute("DELETE FROM homes WHERE expires <= ?", (now,))
                db.execute(
                    "DELETE FROM homes WHERE key NOT IN"
                    " (SELECT key FROM homes ORDER BY since DESC LIMIT ?)",
                    (self._limit,),
                )

        await self._store.with_db(put)

    async def forget(self, key: str) -> None:
        def drop(db: sqlite3.Connection) -> None:
            self._table(db).execute("DELETE FROM homes WHERE key = ?", (key,))

        await self._store.with_db(drop)


class Shared:
    """A shared backend's homes behind this process's view of them: a session's home read or
    set here in the last `FRESH_S` is taken from the view (most turns of a session come
    seconds apart: a round trip to the backend each, 150 µs on SQLite, is saved), and the view
    answers while the backend fails. Another process's move of a home is seen within
    `FRESH_S`; until then the turn tries the old one first, which only orders it."""

    def __init__(self, shared: Homes, limit: int) -> None:
        self._shared = shared
        self._own = MemoryHomes(limit)
        self._read: OrderedDict[str, float] = OrderedDict()  # when each was last read here
        self._limit = limit

    async def get(self, key: str, now: float) -> Home | None:
        at = self._read.get(key)
        if at is not None and now - at < FRESH_S:
            return await self._own.get(key, now)
        try:
            home = await self._shared.get(key, now)
        except Exception:  # the store's trouble is said by the store
            return await self._own.get(key, now)
        if home is None:
            await self._own.forget(key)
        else:
            await self._own.set(key, home, now, _KEPT_S)
        self._fresh(key, now)
        return home

    async def set(self, key: str, home: Home, now: float, ttl_s: float) -> None:
        await self._own.set(key, home, now, ttl_s)
        self._fresh(key, now)
        with contextlib.suppress(Exception):
            await self._shared.set(key, home, now, ttl_s)

    async def forget(self, key: str) -> None:
        await self._own.forget(key)
        self._read.pop(key, None)
        with contextlib.suppress(Exception):
            await self._shared.forget(key)

    def _fresh(self, key: str, now: float) -> None:
        self._read[key] = now
        self._read.move_to_end(key)
        while len(self._read) > self._limit:
            self._read.popitem(last=False)
