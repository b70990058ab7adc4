"""Every failure becomes one reason of the protocol, here and nowhere else (protocol §5). Pure.

The engine reduces what it saw to plain facts (an HTTP status, a `Retry-After` value, the error
a dialect found in the body, or a `Transport` kind for a failure below HTTP) and calls
`classify`, which picks the most specific reason and, where the provider gave one, how long to
stay away (`retry_after`, seconds).
"""

from __future__ import annotations

from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from enum import StrEnum

from .trace import Reason


class Transport(StrEnum):
    """A failure below HTTP, as the engine saw it."""

    CONNECT = "connect"  # refused, DNS, unreachable, reset while connecting
    CONNECT_TIMEOUT = "connect_timeout"
    TLS = "tls"
    READ_TIMEOUT = "read_timeout"  # no response head / no stream chunk within the read timeout
    DISCONNECTED = "disconnected"  # the server closed the connection mid-response
    DEADLINE = "deadline"  # the request's end-to-end budget ran out


@dataclass(frozen=True, slots=True)
class ErrorInfo:
    """An error that a provider reported in a body (an error response or an error in a 200).

    `status` is the HTTP status the dialect maps the provider's own code to, when it knows it
    (e.g. Minimax `base_resp.status_code` 1004 → 401); None leaves the decision to keywords.
    `reason` is the reason the provider's own code means, when the dialect knows one that a
    status cannot say (Minimax 1026 → `content_blocked`, Gemini's `blockReason`).
    """

    message: str
    code: str | None = None
    status: int | None = None
    reason: Reason | None = None


@dataclass(frozen=True, slots=True)
class Outcome:
    """How one attempt ended, before it is stamped with provider and time."""

    reason: Reason
    status: int | None = None
    detail: str = ""
    retry_after: float | None = None


OK = Outcome(Reason.OK)

DEADLINE = "deadline"  # the detail of a timeout of the request's deadline
FIRST_TOKEN = "first token: no content within"  # ... of a stream's `first_token_ms`

_TRANSPORT = {
    Transport.CONNECT: (Reason.CONNECT_FAILED, "connection failed"),
    Transport.CONNECT_TIMEOUT: (Reason.CONNECT_FAILED, "connect timeout"),
    Transport.TLS: (Reason.CONNECT_FAILED, "TLS failure"),
    Transport.READ_TIMEOUT: (Reason.TIMEOUT, "read timeout"),
    Transport.DISCONNECTED: (Reason.SERVER_ERROR, "server closed the connection"),
    Transport.DEADLINE: (Reason.TIMEOUT, DEADLINE),
}

_AUTH_WORDS = (
    "auth",
    "api_key",
    "api key",
    "apikey",
    "unauthorized",
    "permission",
    "access token",
    "access_token",
    "credential",
    "forbidden",
)
_RATE_WORDS = (
    "rate limit",
    "rate_limit",
    "ratelimit",
    "quota",
    "throttl",
    "too many requests",
    "resource_exhausted",
    "balance",
)
_SERVER_WORDS = ("server_error", "internal", "api_error", "overloaded", "unavailable")
# The request is too long for the model: OpenAI and DeepSeek ("maximum context length"),
# Anthropic ("prompt is too long"), Gemini ("exceeds the maximum number of tokens"), Kimi
# ("exceeded model token limit"), DashScope ("Range of input length"), Zhipu 1261 ("Prompt 超长").
_CONTEXT_WORDS = (
    "context_length_exceeded",
    "context length",
    "context window",
    "maximum context",
    "prompt is too long",
    "input is too long",
    "too many input tokens",
    "maximum number of tokens",
    "model token limit",
    "range of input length",
    "string_above_max_length",
    "超长",
    "超过最大长度",
)
_CONTEXT_CODES = frozenset({"context_length_exceeded", "1261"})
# The provider refused the content: OpenAI/Azure, Moonshot ("high risk"), DashScope
# (`DataInspectionFailed`), Zhipu 1301 ("不安全或敏感内容"), Gemini's safety blocks.
_CONTENT_WORDS = (
    "content_filter",
    "content_policy",
    "content policy",
    "content management policy",
    "datainspectionfailed",
    "data inspection failed",
    "inappropriate content",
    "considered high risk",
    "敏感内容",
    "不安全",
)
_CONTENT_CODES = frozenset(
    {"content_filter", "content_policy_violation", "datainspectionfailed", "1301"}
)


def _mentions(error: ErrorInfo | None, words: tuple[str, ...]) -> bool:
    if error is None:
        return False
    text = f"{error.code or ''} {error.message}".lower()
    return any(w in text for w in words)


def parse_retry_after(value: str | None, now: float) -> float | None:
    """Seconds to wait from a `Retry-After` value (delta-seconds or an HTTP date), or None."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - now)
    except (TypeError, ValueError, IndexError):
        return None


def _refused_request(error: ErrorInfo | None) -> Reason | None:
    """`context_exceeded` or `content_blocked` when the error says so, by its code or words."""
    if error is None:
        return None
    if error.reason is not None:
        return error.reason
    code = (error.code or "").lower()
    if code in _CONTEXT_CODES or _mentions(error, _CONTEXT_WORDS):
        return Reason.CONTEXT_EXCEEDED
    if code in _CONTENT_CODES or _mentions(error, _CONTENT_WORDS):
        return Reason.CONTENT_BLOCKED
    return None


def _status_reason(status: int, error: ErrorInfo | None) -> Reason:
    if error is not None and error.reason is not None:
        return error.reason
    if status in (401, 403):
        return Reason.AUTH_FAILED
    if status in (429, 402):
        return Reason.RATE_LIMITED
    if status >= 500:
        return Reason.SERVER_ERROR
    if status == 408:
        return Reason.TIMEOUT
    refused = _refused_request(error)
    if refused is not None:
        return refused
    if _mentions(error, _AUTH_WORDS):  # Gemini answers a bad key with 400
        return Reason.AUTH_FAILED
    if status == 404 and _mentions(error, ("model",)):
        return Reason.MODEL_UNAVAILABLE
    return Reason.BAD_REQUEST


def classify(
    *,
    status: int | None = None,
    error: ErrorInfo | None = None,
    transport: Transport | None = None,
    transport_detail: str = "",
    retry_after: str | None = None,
    now: float = 0.0,
) -> Outcome:
    """The one outcome for what an attempt produced.

    - `transport`: a failure below HTTP (wins over everything else).
    - `status` outside 2xx: classified by status, refined by the error body.
    - `status` 2xx (or None) with `error`: an error inside a success body; its mapped status
      decides when known, else auth/rate keywords, else `schema_mismatch`.
    `now` is the wall clock in seconds, used only to read a `Retry-After` HTTP date.
    """
    if transport is not None:
        reason, text = _TRANSPORT[transport]
        return Outcome(reason, None, transport_detail or text)
    message = error.message if error else ""
    if status is not None and not 200 <= status < 300:
        if 300 <= status < 400:
            return Outcome(Reason.BAD_REQUEST, status, "redirect not followed")
        reason = _status_reason(status, error)
        wait = parse_retry_after(retry_after, now) if reason is not Reason.BAD_REQUEST else None
        return Outcome(reason, status, message or f"HTTP {status}", wait)
    if error is None:
        return Outcome(Reason.OK, status)
    refused = _refused_request(error)
    if error.status is not None and not 200 <= error.status < 300:
        reason = _status_reason(error.status, error)
    elif refused is not None:
        reason = refused
    elif _mentions(error, _AUTH_WORDS):
        reason = Reason.AUTH_FAILED
    elif _mentions(error, _RATE_WORDS):
        reason = Reason.RATE_LIMITED
    elif _mentions(error, _SERVER_WORDS):
        reason = Reason.SERVER_ERROR
    else:
        reason = Reason.SCHEMA_MISMATCH
    code = f" ({error.code})" if error.code else ""
    return Outcome(reason, status, f"error in {status or 'a'} body{code}: {message}")


def mismatch(detail: str, status: int | None = None) -> Outcome:
    """A 2xx answer that is not a usable chat completion."""
    return Outcome(Reason.SCHEMA_MISMATCH, status, detail)


FILTERED = "the provider filtered the answer (finish_reason content_filter, no content)"


def filtered(status: int | None = None) -> Outcome:
    """A 2xx answer (or stream) whose only word is `finish_reason: content_filter`."""
    return Outcome(Reason.CONTENT_BLOCKED, status, FILTERED)
