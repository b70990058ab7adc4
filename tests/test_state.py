"""State stores: the SQLite file shared by processes, and failing safe."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from agent_reach.breaker import CLOSED, CircuitState
from agent_reach.state import MemoryStore, open_store
from agent_reach.state.sqlite import SQLiteStore

OPEN = CircuitState(3, 1_900_000_000.0, False, "server_error")


async def test_sqlite_is_shared_between_stores(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "state.db"
    a, b = SQLiteStore(str(path), refresh_s=0), SQLiteStore(str(path), refresh_s=0)
    assert await b.circuit("p") == CLOSED
    await a.set_circuit("p", OPEN)
    await a.aclose()
    assert await b.circuit("p") == OPEN
    await b.set_circuit("p", CLOSED)
    await b.aclose()
    c = SQLiteStore(str(path))
    assert await c.circuit("p") == CLOSED
    await c.aclose()


async def test_sqlite_unavailable_logs_once_and_keeps_working(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    store = SQLiteStore(str(blocker / "state.db"), refresh_s=0)
    with caplog.at_level(logging.WARNING, logger="agent_reach"):
        assert await store.circuit("p") == CLOSED
        await store.set_circuit("p", OPEN)
        assert await store.circuit("p") == OPEN  # in memory
        assert await store.circuit("q") == CLOSED
        await store.aclose()
    warnings = [r for r in caplog.records if "unavailable" in r.getMessage()]
    assert len(warnings) == 1


def test_open_store_by_url(tmp_path: Path) -> None:
    assert isinstance(open_store("memory://"), MemoryStore)
    store = open_store(f"sqlite:///{tmp_path}/x.db")
    assert isinstance(store, SQLiteStore)
    assert store.path == tmp_path / "x.db"
    home = open_store("sqlite:///~/.agent-reach/state.db")
    assert isinstance(home, SQLiteStore)
    assert home.path == Path("~/.agent-reach/state.db").expanduser()
