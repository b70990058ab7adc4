"""State in this process only (`state: memory://`)."""

from __future__ import annotations

from ..breaker import CLOSED, CircuitState


class MemoryStore:
    """Circuits in a dict."""

    def __init__(self) -> None:
        self.circuits: dict[str, CircuitState] = {}

    async def circuit(self, provider: str) -> CircuitState:
        return self.circuits.get(provider, CLOSED)

    async def set_circuit(self, provider: str, state: CircuitState) -> None:
        if state == CLOSED:
            self.circuits.pop(provider, None)
        else:
            self.circuits[provider] = state

    async def aclose(self) -> None:
        return None
