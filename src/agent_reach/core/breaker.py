"""Circuit breaker per provider (protocol §5, §6 "passive health"). Pure: `now` is an argument.

States, as pybreaker has them, kept in one frozen value so any store can hold it:
- closed:    `open_until == 0`; consecutive failures are counted.
- open:      `now < open_until`; the provider is skipped with `circuit_open`.
- half-open: the cooldown has passed; `admit` lets exactly one trial through by leasing the
             circuit (`open_until = now + lease`, `trial = True`); its outcome closes the
             circuit or opens it again. A trial that never reports expires with its lease.

What opens it: `failures` consecutive circuit failures (connect_failed, timeout, server_error,
schema_mismatch, hook_error) for `cooldown_s`; `auth_failed` at once for `auth_cooldown_s`
(not again when it came from a last resort to a circuit already open);
`rate_limited` at once until its `Retry-After`, else for `cooldown_s`; `quota_exhausted_upstream`
(its plan or balance is used up) at once until the reset it stated, else for `quota_cooldown_s`,
and such a circuit is out: no last resort reaches it (`out`), only its half-open trial.
Times are wall-clock seconds so that processes sharing a store agree on them.

A fleet (protocol §12.1): instances sharing a Redis store add their counted failures up in one
counter; `fleet_count` says what a circuit becomes when that total is known, so the fleet as a
whole opens a circuit after `failures` consecutive failures, not after `failures` per instance.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from datetime import UTC, datetime, tzinfo
from typing import Any, Protocol

from .trace import EFFECTS, Circuit, Reason


class CircuitPolicy(Protocol):
    """The `circuit:` section of the config (`config.CircuitConfig`)."""

    @property
    def failures(self) -> int: ...
    @property
    def cooldown_s(self) -> float: ...
    @property
    def auth_cooldown_s(self) -> float: ...
    @property
    def quota_cooldown_s(self) -> float: ...


@dataclass(frozen=True, slots=True)
class CircuitState:
    """A provider's circuit: consecutive counted failures, open until when (0: closed), whether
    the open circuit is leased for its half-open trial, and what opened it. It serializes
    itself (`to_dict` / `from_dict`): a store never spells its fields."""

    failures: int = 0
    open_until: float = 0.0
    trial: bool = False
    cause: str = ""  # the reason that opened it, for details and status views

    def to_dict(self) -> dict[str, Any]:
        """The JSON form kept in the state store (and published to a fleet)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CircuitState:
        """The inverse of `to_dict`, also of a record whose values are all text (a Redis
        hash); a field it lacks takes its default. ValueError (or TypeError) for one that
        cannot be read."""
        kept: dict[str, Any] = {}
        for f in fields(cls):
            if f.name in data:
                kept[f.name] = _typed(f.default, data[f.name])
        return cls(**kept)

    @property
    def closed(self) -> bool:
        return self.open_until == 0.0

    def is_open(self, now: float) -> bool:
        return now < self.open_until

    @property
    def out(self) -> bool:
        """Open (or leased for its trial) because the provider's usage limit is used up: no
        request but the half-open trial reaches it, not even a last resort."""
        return not self.closed and self.cause == Reason.QUOTA_EXHAUSTED_UPSTREAM

    def view(self, now: float, tz: tzinfo = UTC) -> dict[str, object]:
        """The circuit as status views show it: state, failures, seconds left, cause; for a
        used-up usage limit also when it ends (`out_until`, unix seconds) and `note`, "out
        until HH:MM (usage limit)" in `tz` (with its date when that is not today's)."""
        state = "closed" if self.closed else ("open" if self.is_open(now) else "half_open")
        view: dict[str, object] = {
            "state": state,
            "failures": self.failures,
            "open_for_s": round(max(0.0, self.open_until - now), 1),
            "cause": self.cause or None,
        }
        if self.out and self.is_open(now):
            ends = datetime.fromtimestamp(self.open_until, tz)
            today = ends.date() == datetime.fromtimestamp(now, tz).date()
            when = ends.strftime("%H:%M" if today else "%Y-%m-%d %H:%M")
            view["out_until"] = round(self.open_until, 1)
            view["note"] = f"out until {when} (usage limit)"
        return view


def _typed(default: Any, value: Any) -> Any:
    """`value` as the type of a field whose default is `default`."""
    if isinstance(default, bool):
        if value in (True, False, 0, 1, "1", "0", "true", "false"):
            return value in (True, 1, "1", "true")
        raise ValueError(f"not a flag: {value!r}")
    return type(default)(value)


CLOSED = CircuitState()


def admit(state: CircuitState, now: float, lease_s: float) -> tuple[bool, CircuitState]:
    """Whether a request may try the provider now, and the state after deciding so."""
    if state.closed:
        return True, state
    if state.is_open(now):
        return False, state
    return True, replace(state, open_until=now + lease_s, trial=True)


def opened_detail(state: CircuitState, now: float) -> str:
    """Why and for how long a circuit stays open, for the trace."""
    left = max(0.0, state.open_until - now)
    if state.out:
        what = "trial in flight" if state.trial else "used up"
        return f"usage limit {what}, out for {left:.0f} s"
    what = "trial in flight" if state.trial else f"after {state.cause}"
    return f"open {what}, {left:.0f} s left"


def record(
    state: CircuitState,
    reason: Reason,
    now: float,
    policy: CircuitPolicy,
    retry_after: float | None = None,
    last_resort: bool = False,
) -> CircuitState:
    """The state after an attempt that reached the provider ended with `reason`. A 401/403 to
    a request that reached an open circuit only as last resort leaves its cooldown as it was
    (a wrong key does not heal; asking again must not push the trial further away)."""
    effect = EFFECTS[reason].circuit
    if effect is Circuit.CLOSES:
        return CLOSED
    if effect is Circuit.OPENS:
        if last_resort and not state.closed:
            return state
        return CircuitState(state.failures + 1, now + policy.auth_cooldown_s, False, reason)
    if effect is Circuit.WAITS:
        if retry_after is not None:
            wait = retry_after
        elif reason is Reason.RATE_LIMITED:
            wait = policy.cooldown_s
        else:
            wait = policy.quota_cooldown_s
        return CircuitState(state.failures + 1, now + wait, False, reason)
    if effect is Circuit.COUNTS:
        failures = state.failures + 1
        if state.trial or failures >= policy.failures:
            return CircuitState(failures, now + policy.cooldown_s, False, reason)
        return replace(state, failures=failures, cause=reason)
    if state.trial:  # e.g. bad_request: the provider answered, so the trial passed
        return CLOSED
    return state


def counted(before: CircuitState, after: CircuitState) -> bool:
    """Whether `after` is `before` plus one counted failure, still closed: the kind of change
    a fleet adds up across instances rather than writes over."""
    return after.closed and after.failures > before.failures


def fleet_count(
    state: CircuitState, fleet_failures: int, now: float, policy: CircuitPolicy
) -> CircuitState:
    """The state once the fleet's count of consecutive failures is known: open for the
    cooldown when it reaches `policy.failures`; a circuit already open (or leased for a
    trial) stays as it is."""
    if not state.closed:
        return state
    if fleet_failures >= policy.failures:
        failures = max(fleet_failures, state.failures)
        return CircuitState(failures, now + policy.cooldown_s, False, state.cause)
    if fleet_failures > state.failures:
        return replace(state, failures=fleet_failures)
    return state
