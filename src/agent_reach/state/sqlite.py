"""State in a SQLite file shared by the processes of one machine (`state: sqlite:///PATH`).

One worker thread owns the connection, so the event loop never blocks on the disk. The file
uses WAL (readers never block the writer) and short transactions; several CLI runs, a library
user and a proxy on one machine share circuits, health results, budget counters, learned output
caps and the attempt log. Rows of
the log older than the retention, and counters of ended windows, are deleted now and then.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sqlite3
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from ..core.breaker import CLOSED, CircuitState
from ..core.routing import Health
from ..core.trace import EFFECTS
from .cached import CachedStore, Snapshot
from .memory import MAX_CAPS, overflow
from .store import Keep, LearnedCap, LoggedAttempt

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS breakers (provider TEXT PRIMARY KEY, state TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS usage (
    provider TEXT NOT NULL, key TEXT NOT NULL, amount INTEGER NOT NULL, expires REAL NOT NULL,
    PRIMARY KEY (provider, key));
CREATE TABLE IF NOT EXISTS learned_caps (
    key TEXT PRIMARY KEY, tokens INTEGER NOT NULL, until REAL NOT NULL);
-- caps of versions before issue 40 were kept forever, whatever a refusal's text said: dropped
DROP TABLE IF EXISTS caps;
CREATE TABLE IF NOT EXISTS claims (key TEXT PRIMARY KEY, until REAL NOT NULL);
CREATE TABLE IF NOT EXISTS health (
    provider TEXT PRIMARY KEY, result TEXT NOT NULL, expires REAL NOT NULL);
CREATE TABLE IF NOT EXISTS attempts (
    ts REAL NOT NULL, request TEXT NOT NULL, route TEXT NOT NULL, provider TEXT NOT NULL,
    reason TEXT NOT NULL, status INTEGER, ms REAL NOT NULL, last_resort INTEGER NOT NULL,
    sent INTEGER NOT NULL DEFAULT 1);
CREATE INDEX IF NOT EXISTS attempts_ts ON attempts (ts);
CREATE TABLE IF NOT EXISTS responses (
    id TEXT PRIMARY KEY, data TEXT NOT NULL, expires REAL NOT NULL);
"""
_PRUNE_EVERY_S = 600.0


def _private(path: Path) -> None:
    """The file holds whole conversations (stored responses): its new directories are 0700,
    the file 0600, and so its `-wal` and `-shm` (SQLite gives them the file's mode)."""
    from ..config.write import private_parents

    private_parents(path)
    os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
    for name in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        with contextlib.suppress(FileNotFoundError, PermissionError):
            os.chmod(name, 0o600)


class SQLiteStore(CachedStore):
    """Circuits, budgets, claims and the attempt log in one SQLite file."""

    def __init__(self, path: str, retention_s: float = 7 * 86400) -> None:
        self.path = Path(path).expanduser()
        super().__init__(str(self.path), retention_s)
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="agent-reach-sqlite")
        self._conn: sqlite3.Connection | None = None
        self._pruned_at = 0.0

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.wrap_future(self._executor.submit(fn, *args))

    async def with_db(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """`fn` of the connection, on the store's one worker thread (what keeps data of its
        own in the file, beside the store's: `homes.SQLiteHomes`)."""
        return await self._run(lambda: fn(self._db()))

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            _private(self.path)
            conn = sqlite3.connect(self.path, timeout=5.0, isolation_level=None)
            _patiently(lambda: conn.execute("PRAGMA journal_mode=WAL"))
            conn.execute("PRAGMA synchronous=NORMAL")
            _patiently(lambda: conn.executescript(_SCHEMA))
            _patiently(lambda: _migrate(conn))
            self._conn = conn
        return self._conn

    # -- primitives, each one short transaction on the worker thread ----------------------------

    async def _load(self) -> Snapshot:
        def load() -> Snapshot:
            db = self._db()
            now = time.time()
            circuits = {
                p: CircuitState.from_dict(json.loads(state))
                for p, state in db.execute("SELECT provider, state FROM breakers")
            }
            health = {
                p: Health.from_dict(json.loads(r))
                for p, r in db.execute(
                    "SELECT provider, result FROM health WHERE expires > ?", (now,)
                )
            }
            used = {
                (p, k): n
                for p, k, n in db.execute(
                    "SELECT provider, key, amount FROM usage WHERE expires > ?", (now,)
                )
            }
            caps = {
                k: LearnedCap(t, u)
                for k, t, u in db.execute(
                    "SELECT key, tokens, until FROM learned_caps WHERE until > ?", (now,)
                )
            }
            return Snapshot(circuits, health, used, caps)

        return await self._run(load)

    async def _save_health(self, provider: str, health: Health, ttl_s: float) -> None:
        def save() -> None:
            self._db().execute(
                "INSERT OR REPLACE INTO health VALUES (?, ?, ?)",
                (provider, json.dumps(health.to_dict()), time.time() + ttl_s),
            )

        await self._run(save)

    async def _save_circuit(self, provider: str, state: CircuitState, before: CircuitState) -> None:
        def save() -> None:
            if state == CLOSED:
                self._db().execute("DELETE FROM breakers WHERE provider = ?", (provider,))
            else:
                self._db().execute(
                    "INSERT OR REPLACE INTO breakers VALUES (?, ?)",
                    (provider, json.dumps(state.to_dict())),
                )

        await self._run(save)

    async def _save_cap(self, key: str, cap: LearnedCap) -> None:
        def save() -> None:
            db = self._db()
            now = time.time()
            db.execute(
                "INSERT INTO learned_caps VALUES (?, ?, ?) ON CONFLICT (key) "
                "DO UPDATE SET tokens = excluded.tokens, until = excluded.until "
                "WHERE excluded.tokens <= learned_caps.tokens OR learned_caps.until <= ?",
                (key, cap.tokens, cap.until, now),
            )
            db.execute("DELETE FROM learned_caps WHERE until <= ?", (now,))
            db.execute(
                "DELETE FROM learned_caps WHERE key NOT IN "
                "(SELECT key FROM learned_caps ORDER BY until DESC LIMIT ?)",
                (MAX_CAPS,),
            )

        await self._run(save)

    async def _forget_caps(self, now: float, prefix: str) -> int:
        def forget() -> int:
            rows = self._db().execute(
                "DELETE FROM learned_caps WHERE substr(key, 1, ?) = ? RETURNING until",
                (len(prefix), prefix),
            )
            return sum(until > now for (until,) in rows.fetchall())

        return await self._run(forget)

    async def _incr(self, provider: str, key: str, amount: int, ttl_s: float) -> int:
        def incr() -> int:
            db = self._db()
            # The write lock first (waiting for it as long as the busy timeout allows): a
            # statement that reads before it writes fails at once when another process wrote
            # in between ("database is locked").
            _patiently(lambda: db.execute("BEGIN IMMEDIATE"))
            try:
                row = db.execute(
                    "INSERT INTO usage VALUES (?, ?, ?, ?) ON CONFLICT (provider, key) "
                    "DO UPDATE SET amount = amount + excluded.amount RETURNING amount",
                    (provider, key, amount, time.time() + ttl_s),
                ).fetchall()
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            return int(row[0][0])

        return await self._run(incr)

    async def _append(self, records: list[LoggedAttempt]) -> None:
        def append() -> None:
            db = self._db()
            db.execute("BEGIN")
            db.executemany(
                "INSERT INTO attempts VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        r.ts,
                        r.request,
                        r.route,
                        r.provider,
                        r.reason,
                        r.status,
                        r.ms,
                        r.last_resort,
                        r.sent,
                    )
                    for r in records
                ],
            )
            db.execute("COMMIT")
            now = time.time()
            if now - self._pruned_at > _PRUNE_EVERY_S:
                self._pruned_at = now
                db.execute("DELETE FROM attempts WHERE ts < ?", (now - self.retention_s,))
                db.execute("DELETE FROM usage WHERE expires < ?", (now,))
                db.execute("DELETE FROM claims WHERE until < ?", (now,))
                db.execute("DELETE FROM responses WHERE expires < ?", (now,))
                db.execute("DELETE FROM health WHERE expires < ?", (now,))

        await self._run(append)

    async def _read(self, since: float) -> list[LoggedAttempt]:
        def read() -> list[LoggedAttempt]:
            rows = self._db().execute(
                "SELECT ts, request, route, provider, reason, status, ms, sent, last_resort "
                "FROM attempts WHERE ts >= ? ORDER BY ts",
                (since,),
            )
            return [
                LoggedAttempt(
                    ts, request, route, provider, reason, status, ms, bool(sent), bool(last)
                )
                for ts, request, route, provider, reason, status, ms, sent, last in rows
            ]

        return await self._run(read)

    async def _claim(self, key: str, until: float, now: float) -> bool:
        def claim() -> bool:
            cur = self._db().execute(
                "INSERT INTO claims VALUES (?, ?) ON CONFLICT (key) "
                "DO UPDATE SET until = excluded.until WHERE claims.until <= ?",
                (key, until, now),
            )
            return cur.rowcount == 1

        return await self._run(claim)

    async def _put_response(self, id: str, data: str, expires: float, keep: Keep) -> None:
        def put() -> None:
            db = self._db()
            db.execute("BEGIN IMMEDIATE")  # other processes evict after their own writes
            try:
                db.execute("DELETE FROM responses WHERE expires < ?", (time.time(),))
                db.execute("INSERT OR REPLACE INTO responses VALUES (?, ?, ?)", (id, data, expires))
                rows = db.execute(
                    "SELECT id, coalesce(json_extract(data, '$.owner'), ''), length(data) "
                    "FROM responses ORDER BY rowid"
                )
                evicted = overflow(rows, keep)
                db.executemany("DELETE FROM responses WHERE id = ?", [(i,) for i in evicted])
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise

        await self._run(put)

    async def _get_response(self, id: str, now: float) -> str | None:
        def get() -> str | None:
            row = (
                self._db()
                .execute("SELECT data FROM responses WHERE id = ? AND expires > ?", (id, now))
                .fetchone()
            )
            return None if row is None else str(row[0])

        return await self._run(get)

    async def _delete_response(self, id: str) -> bool:
        def delete() -> bool:
            cur = self._db().execute("DELETE FROM responses WHERE id = ?", (id,))
            return cur.rowcount == 1

        return await self._run(delete)

    async def _close(self) -> None:
        def close() -> None:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

        await self._run(close)
        self._executor.shutdown(wait=True)


def _migrate(conn: sqlite3.Connection) -> None:
    """A state file of an older layout, brought up to this one (once, whichever process opens
    it first): circuits kept a column per field move to their records (`CircuitState.to_dict`;
    those of versions before identities, keyed by name alone, are dropped), and an attempt
    log written before attempts said whether they were sent gets the column (its lines taken
    as sent but those with no status and no time, or of a skip reason)."""
    if "circuits" not in _tables(conn) and "sent" in _columns(conn, "attempts"):
        return
    conn.execute("BEGIN IMMEDIATE")  # another process may be at it too
    try:
        if "circuits" in _tables(conn):
            rows = conn.execute(
                "SELECT provider, failures, open_until, trial, cause FROM circuits "
                "WHERE provider LIKE '%@%'"
            ).fetchall()
            conn.executemany(
                "INSERT OR IGNORE INTO breakers VALUES (?, ?)",
                [
                    (p, json.dumps(CircuitState(f, o, bool(t), c).to_dict()))
                    for p, f, o, t, c in rows
                ],
            )
            conn.execute("DROP TABLE circuits")
        if "sent" not in _columns(conn, "attempts"):
            skips = [str(r) for r, effect in EFFECTS.items() if effect.skip]
            conn.execute("ALTER TABLE attempts ADD COLUMN sent INTEGER NOT NULL DEFAULT 1")
            conn.execute(
                "UPDATE attempts SET sent = 0 WHERE status IS NULL "
                f"AND (ms = 0 OR reason IN ({', '.join('?' * len(skips))}))",
                skips,
            )
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _tables(conn: sqlite3.Connection) -> set[str]:
    return {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}


def _patiently(step: Callable[[], object], tries: int = 5) -> None:
    """Run `step` on the store's thread, again (after 20, 40, … ms) while SQLite says "database
    is locked" at once: switching to WAL, or a first statement of a process opening the file
    while another one does, is not covered by the busy timeout. Two proxies starting on one
    file at the same moment sent a reservation to the in-memory fallback that way."""
    for attempt in range(tries):
        try:
            step()
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or attempt == tries - 1:
                raise
            time.sleep(0.02 * (attempt + 1))
