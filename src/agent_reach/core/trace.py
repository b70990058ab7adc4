"""The words of the protocol: reasons, attempts and results (protocol §1, §5).

Pure values, no I/O. Every face (library, CLI, proxy) reports these same records.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from .records import record


class Reason(StrEnum):
    """How one attempt ended (protocol §5)."""

    OK = "ok"
    CONNECT_FAILED = "connect_failed"
    TIMEOUT = "timeout"
    SERVER_ERROR = "server_error"
    AUTH_FAILED = "auth_failed"
    RATE_LIMITED = "rate_limited"
    QUOTA_EXHAUSTED_UPSTREAM = "quota_exhausted_upstream"  # its plan, balance or window is used up
    CONTEXT_EXCEEDED = "context_exceeded"
    CONTENT_BLOCKED = "content_blocked"
    BAD_REQUEST = "bad_request"
    ARTIFACT_REJECTED = "artifact_rejected"  # a reasoning artifact another provider minted
    SCHEMA_MISMATCH = "schema_mismatch"
    HOOK_ERROR = "hook_error"
    UNHEALTHY = "unhealthy"
    MODEL_UNAVAILABLE = "model_unavailable"
    CIRCUIT_OPEN = "circuit_open"
    QUOTA_EXHAUSTED = "quota_exhausted"


class Circuit(StrEnum):
    """What an attempt's reason does to its provider's circuit (protocol §5, `breaker.record`)."""

    CLOSES = "closes"  # the provider answered: the circuit closes
    COUNTS = "counts"  # one failure toward `circuit.failures` (a half-open trial's reopens it)
    OPENS = "opens"  # opens at once for `auth_cooldown_s` (a bad key does not heal by itself)
    WAITS = "waits"  # opens for the wait the provider gave, else its cooldown (a usage limit)
    KEEPS = "keeps"  # leaves it as it is: the provider answered, the request was at fault


@record
class Effect:
    """What one reason does, everywhere it matters (protocol §5, §5.1): its effect on the
    circuit; whether the same provider is `retried` (when its `retries` allow; `quick`: once
    when they are unset, a passing failure by the provider's own answer); whether it
    is `deferred` (a skip for remembered state, tried again as last resort, §4.2); whether a
    request sent with it counts toward the provider's `budget`s; whether it is always a
    `skip` when nothing was sent (the provider passed over, not a try that failed before it
    was sent: a missing key, a health check made for the request; `Attempt.sent` says which
    an attempt was); whether it is a failure below HTTP (`transport`: nothing of the
    provider's API answered); whether it is its key's own (`keyed`: of a provider with a pool
    of keys, the next key is tried before the next provider; after any other failure, the
    endpoint's, its other keys are not); and the `status` the client gets when it is the last
    word (`fault.fault_of`)."""

    circuit: Circuit
    retried: bool = False
    quick: bool = False  # retried once when `retries` is unset and the wait is short
    deferred: bool = False
    budget: bool = True
    skip: bool = False
    transport: bool = False
    keyed: bool = False
    status: int = 502


# The one table of what each reason does: every module that decides reads it.
EFFECTS: dict[Reason, Effect] = {
    Reason.OK: Effect(Circuit.CLOSES, status=200),
    Reason.CONNECT_FAILED: Effect(Circuit.COUNTS, retried=True, budget=False, transport=True),
    Reason.TIMEOUT: Effect(Circuit.COUNTS, retried=True, transport=True),
    Reason.SERVER_ERROR: Effect(Circuit.COUNTS, retried=True, quick=True),
    Reason.AUTH_FAILED: Effect(Circuit.OPENS, keyed=True),
    Reason.RATE_LIMITED: Effect(Circuit.WAITS, retried=True, quick=True, keyed=True, status=429),
    Reason.QUOTA_EXHAUSTED_UPSTREAM: Effect(Circuit.WAITS, skip=True, keyed=True, status=429),
    Reason.CONTEXT_EXCEEDED: Effect(Circuit.KEEPS, status=400),
    Reason.CONTENT_BLOCKED: Effect(Circuit.KEEPS, status=400),
    Reason.BAD_REQUEST: Effect(Circuit.KEEPS, status=400),
    Reason.ARTIFACT_REJECTED: Effect(Circuit.KEEPS),
    Reason.SCHEMA_MISMATCH: Effect(Circuit.COUNTS, retried=True),
    Reason.HOOK_ERROR: Effect(Circuit.COUNTS),
    Reason.UNHEALTHY: Effect(Circuit.KEEPS, deferred=True, budget=False, skip=True),
    Reason.MODEL_UNAVAILABLE: Effect(Circuit.KEEPS, skip=True, status=404),
    Reason.CIRCUIT_OPEN: Effect(Circuit.KEEPS, deferred=True, budget=False, skip=True, keyed=True),
    Reason.QUOTA_EXHAUSTED: Effect(Circuit.KEEPS, budget=False, skip=True, keyed=True, status=429),
}


@record
class Attempt:
    """One try of one provider for one request; a trace is a list of these."""

    provider: str
    reason: Reason
    status: int | None = None
    ms: float = 0.0
    detail: str = ""
    last_resort: bool = False
    sent: bool = False  # a request went to the provider (not a skip)
    retry_after: float | None = None  # seconds until it may be asked again, when it said so
    key: str | None = None  # the variable of its key, for a provider with a pool of keys

    @property
    def ok(self) -> bool:
        return self.reason is Reason.OK

    @property
    def skipped(self) -> bool:
        """Passed over without a request (not a try that failed before it was sent)."""
        return not self.sent and EFFECTS[self.reason].skip

    @property
    def who(self) -> str:
        """The provider, with its key's variable for a provider with a pool (`deepseek/KEY_2`:
        a provider's name never holds a `/`)."""
        return self.provider if self.key is None else f"{self.provider}/{self.key}"

    @property
    def label(self) -> str:
        """The reason, or `skip(reason)` for a provider passed over without a request."""
        return str(self.reason) if self.sent else f"skip({self.reason})"

    def to_dict(self) -> dict[str, Any]:
        """The JSON form used by `--json`, the proxy's error body and the attempt log."""
        out = {
            "provider": self.provider,
            "reason": str(self.reason),
            "status": self.status,
            "ms": round(self.ms, 1),
            "detail": self.detail,
            "last_resort": self.last_resort,
        }
        if self.retry_after is not None:
            out["retry_after_s"] = round(self.retry_after, 1)
        if self.key is not None:
            out["key"] = self.key
        return out


def trace_header(trace: list[Attempt]) -> str:
    """`name:reason:ms,…`, the value of the proxy's `X-Agent-Reach-Trace` header."""
    return ",".join(f"{a.who}:{a.reason}:{round(a.ms)}" for a in trace)


@record
class Result:
    """A successful request: the normalized response, who answered, and every attempt.

    For a request that arrived in another API than Chat Completions (`ChatRequest.api`) and
    was answered by a provider that speaks that API itself, `response` is the provider's own
    answer and `native` is true."""

    response: dict[str, Any]
    provider: str
    trace: list[Attempt]
    native: bool = False  # `response` is in the request's own API (a provider that speaks it)
