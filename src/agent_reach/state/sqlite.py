"""State in a SQLite file shared by the processes of one machine (`state: sqlite:///PATH`).

Reads come from an in-memory copy that is refreshed from the file at most every `refresh_s`
(one short query), so the request path does no disk I/O; writes update the copy at once and
go to the file on a single worker thread, in order. The file uses WAL, so readers never block
the writer. `aclose` waits for pending writes, so a CLI run's circuits are on disk when it
exits. If the file cannot be used, the store logs it once and keeps working in memory.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ..breaker import CLOSED, CircuitState
from .memory import MemoryStore

log = logging.getLogger("agent_reach")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS circuits (
    provider   TEXT PRIMARY KEY,
    failures   INTEGER NOT NULL,
    open_until REAL NOT NULL,
    trial      INTEGER NOT NULL,
    cause      TEXT NOT NULL
)
"""


class SQLiteStore(MemoryStore):
    """Circuits in a SQLite file, cached in memory."""

    def __init__(self, path: str, refresh_s: float = 1.0) -> None:
        super().__init__()
        self.path = Path(path).expanduser()
        self.refresh_s = refresh_s
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="agent-reach-sqlite")
        self._conn: sqlite3.Connection | None = None
        self._loaded_at = float("-inf")
        self._pending: set[Future[None]] = set()
        self._down = False

    async def circuit(self, provider: str) -> CircuitState:
        if not self._down and time.monotonic() - self._loaded_at >= self.refresh_s:
            self._loaded_at = time.monotonic()
            rows = await self._run(self._load)
            if rows is not None:
                self.circuits = rows
        return await super().circuit(provider)

    async def set_circuit(self, provider: str, state: CircuitState) -> None:
        await super().set_circuit(provider, state)
        if not self._down:
            future = self._executor.submit(self._guarded, self._save, provider, state)
            self._pending.add(future)
            future.add_done_callback(self._pending.discard)

    async def aclose(self) -> None:
        pending = [asyncio.wrap_future(f) for f in list(self._pending)]
        if pending:
            await asyncio.gather(*pending)
        await asyncio.wrap_future(self._executor.submit(self._close))
        self._executor.shutdown(wait=True)

    # -- on the worker thread ------------------------------------------------------------------

    async def _run(self, fn: Any, *args: Any) -> Any:
        return await asyncio.wrap_future(self._executor.submit(self._guarded, fn, *args))

    def _guarded(self, fn: Any, *args: Any) -> Any:
        if self._down:
            return None
        try:
            return fn(*args)
        except (sqlite3.Error, OSError) as exc:
            self._down = True
            log.warning(
                "agent-reach: state store %s is unavailable (%s); routing on in-memory state",
                self.path,
                exc,
            )
            return None

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, timeout=2.0, isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(_SCHEMA)
            self._conn = conn
        return self._conn

    def _load(self) -> dict[str, CircuitState]:
        rows = self._db().execute(
            "SELECT provider, failures, open_until, trial, cause FROM circuits"
        )
        return {p: CircuitState(f, o, bool(t), c) for p, f, o, t, c in rows}

    def _save(self, provider: str, state: CircuitState) -> None:
        db = self._db()
        if state == CLOSED:
            db.execute("DELETE FROM circuits WHERE provider = ?", (provider,))
        else:
            db.execute(
                "INSERT OR REPLACE INTO circuits VALUES (?, ?, ?, ?, ?)",
                (provider, state.failures, state.open_until, int(state.trial), state.cause),
            )

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
