"""Where remembered provider state lives (spec §12): circuits now, quotas and the attempt log
later. The engine talks to this small async interface only; `MemoryStore` backs it in-process.
"""

from __future__ import annotations

from typing import Protocol

from .breaker import CLOSED, CircuitState


class StateStore(Protocol):
    """Shared provider state. Implementations must never raise into a request."""

    async def circuit(self, provider: str) -> CircuitState: ...

    async def set_circuit(self, provider: str, state: CircuitState) -> None: ...

    async def aclose(self) -> None: ...


class MemoryStore:
    """State in this process only (`state: memory://`)."""

    def __init__(self) -> None:
        self._circuits: dict[str, CircuitState] = {}

    async def circuit(self, provider: str) -> CircuitState:
        return self._circuits.get(provider, CLOSED)

    async def set_circuit(self, provider: str, state: CircuitState) -> None:
        if state == CLOSED:
            self._circuits.pop(provider, None)
        else:
            self._circuits[provider] = state

    async def aclose(self) -> None:
        return None
