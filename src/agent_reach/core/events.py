"""What the engine tells its observers (metrics, the attempt log, alerts, the CLI's
`--verbose`): hooks, not imports, so the hot path knows nothing of who listens.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .breaker import CircuitState
from .quota import Budget
from .records import record
from .trace import Attempt


@record
class AttemptEvent:
    """An attempt ended. `raw` is a redacted excerpt of a failed answer's body, if any."""

    route: str
    attempt: Attempt
    raw: str | None = None
    request: str = ""  # the id of the request it belongs to
    model: str | None = None  # the model a try sent asked for (its provider's name of it)


@record
class RequestEvent:
    """A request ended: answered by `provider`, or not at all (`provider` None)."""

    route: str
    provider: str | None
    trace: tuple[Attempt, ...]
    stream: bool
    request: str = ""
    api: str = "chat"  # the API the request arrived in: chat, responses, messages or gemini
    model: str | None = None  # the model the request asked for
    answer: Any = None  # the answer's body (a dict) or its stream, as the request gets it
    provider_model: str | None = None  # the model `provider` was asked for (its model_map)


@record
class QuotaEvent:
    """A provider's use of one budget grew to `used` in the window `key`."""

    provider: str
    budget: Budget
    key: str
    used: int
    now: float

    @property
    def ratio(self) -> float:
        return self.used / self.budget.limit


@record
class CircuitEvent:
    """A provider's circuit opened or closed."""

    provider: str
    opened: bool
    state: CircuitState
    key: str | None = None  # the variable of its key, for a provider with a pool of keys


@record
class CapEvent:
    """A provider's model was found to take at most `tokens` output tokens (its refusal said
    so and the request sent again with that cap was answered), kept for `keep_s`; `before`:
    the cap kept until now, if any (protocol §4)."""

    provider: str
    model: str
    before: int | None
    tokens: int
    keep_s: float


Event = AttemptEvent | RequestEvent | CircuitEvent | QuotaEvent | CapEvent
Observer = Callable[[Event], None]
