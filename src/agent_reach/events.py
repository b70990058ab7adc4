"""What the engine tells its observers (metrics, the attempt log, alerts, the CLI's
`--verbose`): hooks, not imports, so the hot path knows nothing of who listens.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .breaker import CircuitState
from .trace import Attempt


@dataclass(frozen=True, slots=True)
class AttemptEvent:
    """An attempt ended. `raw` is a redacted excerpt of a failed answer's body, if any."""

    route: str
    attempt: Attempt
    raw: str | None = None


@dataclass(frozen=True, slots=True)
class RequestEvent:
    """A request ended: answered by `provider`, or not at all (`provider` None)."""

    route: str
    provider: str | None
    trace: tuple[Attempt, ...]
    stream: bool


@dataclass(frozen=True, slots=True)
class CircuitEvent:
    """A provider's circuit opened or closed."""

    provider: str
    opened: bool
    state: CircuitState


Event = AttemptEvent | RequestEvent | CircuitEvent
Observer = Callable[[Event], None]
