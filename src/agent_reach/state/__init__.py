"""Where remembered provider state lives (spec §12): circuits now; quotas and the attempt log
join later. The engine talks to the small async `StateStore` interface only.

`open_store(url)` picks the backend from the config's `state:`:
- `memory://`       this process only;
- `sqlite:///PATH`  a file shared by every process on the machine (the default,
                    `~/.agent-reach/state.db`): successive CLI runs remember open circuits.
A store never fails a request: when its backend is unavailable it says so once in the log and
the router keeps routing on in-memory state.
"""

from __future__ import annotations

import logging
from typing import Protocol

from ..breaker import CircuitState
from .memory import MemoryStore

log = logging.getLogger("agent_reach")


class StateStore(Protocol):
    """Shared provider state. Implementations must never raise into a request."""

    async def circuit(self, provider: str) -> CircuitState: ...

    async def set_circuit(self, provider: str, state: CircuitState) -> None: ...

    async def aclose(self) -> None: ...


def open_store(url: str) -> StateStore:
    """The store for a `state:` URL (validated by the config)."""
    if url.startswith("sqlite://"):
        from .sqlite import SQLiteStore

        return SQLiteStore(url.removeprefix("sqlite:///").removeprefix("sqlite://"))
    if url.startswith("memory://"):
        return MemoryStore()
    log.warning("agent-reach: state %s is not supported by this version; using memory", url)
    return MemoryStore()


__all__ = ["MemoryStore", "StateStore", "open_store"]
