"""Where remembered provider state lives (protocol §12): circuits, quota counters, learned output
caps, alert claims, stored Responses-API responses and the attempt log. The engine talks to the
small async `StateStore` interface only.

`open_store(url)` picks the backend from the config's `state:`:
- `memory://`          this process only;
- `sqlite:///PATH`     a file shared by every process on one machine (the default,
                       `~/.agent-reach/state.db`): successive CLI runs and a local proxy share
                       circuits and quotas;
- `redis://HOST:PORT/DB` one view for several proxy instances on several machines.
Health check results are kept too (with the health TTL), so that a provider found down by one
CLI run is skipped by the next without a network call. Shared stores keep an in-memory view
that requests read, and sync it with the backend off the request path
(`cached.CachedStore`). A store never fails a request: when its backend is down it says so
once in the log and routing goes on with the in-memory view.
"""

from __future__ import annotations

from .memory import MemoryStore
from .store import CircuitChanged, Keep, LearnedCap, LoggedAttempt, StateStore


def open_store(url: str, *, retention_s: float = 7 * 86400) -> StateStore:
    """The store for a `state:` URL (validated by the config)."""
    if url.startswith("sqlite://"):
        from .sqlite import SQLiteStore

        path = url.removeprefix("sqlite:///").removeprefix("sqlite://")
        return SQLiteStore(path, retention_s=retention_s)
    if url.startswith(("redis://", "rediss://")):
        from .redis import RedisStore

        return RedisStore(url, retention_s=retention_s)
    return MemoryStore()


__all__ = [
    "CircuitChanged",
    "Keep",
    "LearnedCap",
    "LoggedAttempt",
    "MemoryStore",
    "StateStore",
    "open_store",
]
