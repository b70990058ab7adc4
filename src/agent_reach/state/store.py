"""What a state store is (protocol §12): the `StateStore` interface the engine talks to, and the
values it keeps: `LoggedAttempt` (one line of the attempt log), `LearnedCap`, and `Keep` (whose
a stored response is, and how many the store keeps)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from ..core.breaker import CircuitPolicy, CircuitState
from ..core.records import record
from ..core.routing import Health

# Told when a circuit changed without this process deciding it: (key, before, after).
CircuitChanged = Callable[[str, CircuitState, CircuitState], None]


@dataclass(frozen=True, slots=True)
class Keep:
    """Whose a stored response is, and how many (and how many bytes of) stored responses the
    store keeps, in all and of that owner: past either, the oldest are evicted (protocol §10.1)."""

    owner: str = ""
    max_count: int = 10_000
    max_bytes: int = 256 * 2**20
    owner_max_count: int = 1_000
    owner_max_bytes: int = 64 * 2**20


ANYONE = Keep()  # no owner, the default caps


@record
class LearnedCap:
    """An output cap a provider's model stated in a refusal (protocol §4), kept until `until`
    (wall-clock seconds)."""

    tokens: int
    until: float


@record
class LoggedAttempt:
    """One line of the attempt log (what `agent-reach report` reads)."""

    ts: float  # unix seconds when the attempt ended
    request: str  # the request it belongs to
    route: str
    provider: str
    reason: str
    status: int | None
    ms: float
    sent: bool  # a request went to the provider (a skip sent nothing)
    last_resort: bool = False


class StateStore(Protocol):
    """Shared provider state. Implementations never raise into a request.

    Providers are named by the keys of `identity`: circuits by `PreparedProvider.state_key`, budget
    counters by `PreparedProvider.quota_key`, attempt-log lines by `state_key`."""

    skipped: int  # records and messages of its backend it could not read, skipped so far

    @property
    def down(self) -> bool:
        """Its backend failed and is left alone until it may be back (routing goes on, on this
        process's view)."""
        ...

    async def circuit(self, provider: str) -> CircuitState: ...

    async def set_circuit(self, provider: str, state: CircuitState) -> None: ...

    async def health(self, provider: str) -> Health | None:
        """The provider's latest health check result that is still kept, if any."""
        ...

    async def set_health(self, provider: str, health: Health, ttl_s: float) -> None:
        """Keep a health check result for `ttl_s` seconds."""
        ...

    async def lease(self, provider: str, state: CircuitState) -> bool:
        """Take a half-open circuit's one trial (`state` is the lease `breaker.admit` made);
        False when the trial belongs to another instance of a fleet."""
        ...

    def follow(self, policy: CircuitPolicy, changed: CircuitChanged) -> None:
        """The circuit policy in force, and whom to tell when a circuit changes without this
        process deciding it (a fleet's count reached the threshold, another instance opened or
        closed it)."""
        ...

    async def usage(self, provider: str, key: str) -> int:
        """How much of a budget window (`key`) the provider has used."""
        ...

    async def add_usage(self, provider: str, key: str, amount: int, ttl_s: float) -> int:
        """Count `amount` into a budget window; the total as far as this process knows."""
        ...

    async def reserve(
        self, provider: str, key: str, limit: int, ttl_s: float, amount: int = 1
    ) -> int | None:
        """Count `amount` requests into a budget window if that keeps it within `limit`,
        atomically (across processes on SQLite, across a fleet on Redis); the new total, or
        None when they do not fit."""
        ...

    async def release(self, provider: str, key: str, ttl_s: float, amount: int = 1) -> None:
        """Give back what `reserve` counted (its try sent nothing), in the same way."""

    async def cap(self, key: str, now: float) -> int | None:
        """The output cap a provider's model stated in a refusal (`PreparedProvider.cap_key`),
        if one was learned and has not expired."""
        ...

    async def set_cap(self, key: str, cap: LearnedCap, now: float) -> int | None:
        """Remember a learned output cap until `cap.until` (of two live ones, the lower is
        kept; at most `memory.MAX_CAPS`); the one kept before, if any."""
        ...

    async def learned_caps(self, now: float) -> dict[str, LearnedCap]:
        """Every learned output cap not yet expired, by key (for `status` and `caps`)."""
        ...

    async def forget_caps(self, now: float, prefix: str = "") -> int:
        """Forget the learned output caps whose keys start with `prefix` (all, by default),
        everywhere the store is shared; how many had not expired."""
        ...

    async def entries(self) -> tuple[dict[str, CircuitState], dict[tuple[str, str], int]]:
        """Every circuit and live budget counter held, by stored key (for `status --all`)."""
        ...

    async def claim(self, key: str, until: float, now: float) -> bool:
        """True for the first caller to claim `key` until `until` (de-duplicates alerts)."""
        ...

    async def save_response(
        self, id: str, data: str, now: float, ttl_s: float, keep: Keep = ANYONE
    ) -> None:
        """Keep a stored Responses-API response (JSON text) for `ttl_s`, as `keep` says whose
        it is and how many the store keeps (protocol §10.1)."""
        ...

    async def load_response(self, id: str, now: float) -> str | None:
        """A stored response that has not expired, or None."""
        ...

    async def delete_response(self, id: str, now: float) -> bool:
        """Forget a stored response; whether there was one."""
        ...

    def record(self, attempt: LoggedAttempt) -> None:
        """Add to the attempt log, without waiting (written in batches)."""
        ...

    async def attempts(self, since: float) -> list[LoggedAttempt]:
        """The logged attempts that ended at or after `since`, oldest first."""
        ...

    async def flush(self) -> None:
        """Write what is pending now."""
        ...

    async def refresh(self) -> None:
        """Re-read the shared view now (for views that must be current)."""
        ...

    async def aclose(self) -> None: ...
