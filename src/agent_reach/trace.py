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


# Reasons that count toward a provider's circuit (protocol §5, "effect on the provider").
CIRCUIT_FAILURES = frozenset(
    {
        Reason.CONNECT_FAILED,
        Reason.TIMEOUT,
        Reason.SERVER_ERROR,
        Reason.SCHEMA_MISMATCH,
        Reason.HOOK_ERROR,
    }
)


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

    @property
    def ok(self) -> bool:
        return self.reason is Reason.OK

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
        return out


def trace_header(trace: list[Attempt]) -> str:
    """`name:reason:ms,…`, the value of the proxy's `X-Agent-Reach-Trace` header."""
    return ",".join(f"{a.provider}:{a.reason}:{round(a.ms)}" for a in trace)


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
