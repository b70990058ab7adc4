"""Every failure becomes one reason of the protocol, here and nowhere else (protocol §5). Pure.

The engine reduces what it saw to plain facts (an HTTP status, the answer's headers, the error
a dialect found in the body, or a `Transport` kind for a failure below HTTP) and calls
`classify`, which picks the most specific reason and, where the provider gave one, how long to
stay away (`retry_after`, seconds: `Retry-After`, Anthropic's `anthropic-ratelimit-*-reset`, or
a reset time written in the error's message: `waits.stated_wait`)."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum

from .records import record
from .trace import EFFECTS, Circuit, Reason
from .waits import header, stated_wait


class Transport(StrEnum):
    """A failure below HTTP, as the engine saw it."""

    CONNECT = "connect"  # refused, DNS, unreachable, reset while connecting
    CONNECT_TIMEOUT = "connect_timeout"
    TLS = "tls"
    READ_TIMEOUT = "read_timeout"  # no response head / no stream chunk within the read timeout
    POOL_TIMEOUT = "pool_timeout"  # no free upstream connection within the connect timeout
    DISCONNECTED = "disconnected"  # the server closed the connection mid-response
    DEADLINE = "deadline"  # the request's end-to-end budget ran out


@record
class ErrorInfo:
    """An error that a provider reported in a body (an error response or an error in a 200).

    `status` is the HTTP status the dialect maps the provider's own code to, when it knows it
    (e.g. Minimax `base_resp.status_code` 1004 → 401); None leaves the decision to its code and
    words (words never say `auth_failed`: they may quote the request, `_AUTH_CODES`).
    `reason` is the reason the provider's own code means, when the dialect knows one that a
    status cannot say (Minimax 1026 → `content_blocked`, Gemini's `blockReason`).
    """

    message: str
    code: str | None = None
    status: int | None = None
    reason: Reason | None = None


@record
class Outcome:
    """How one attempt ended, before it is stamped with provider and time."""

    reason: Reason
    status: int | None = None
    detail: str = ""
    retry_after: float | None = None


OK = Outcome(Reason.OK)

DEADLINE_DETAIL = "deadline"  # the detail of a timeout of the request's deadline
FIRST_TOKEN = "first token: no content within"  # ... of a stream's `first_token_ms`

_TRANSPORT = {
    Transport.CONNECT: (Reason.CONNECT_FAILED, "connection failed"),
    Transport.CONNECT_TIMEOUT: (Reason.CONNECT_FAILED, "connect timeout"),
    Transport.TLS: (Reason.CONNECT_FAILED, "TLS failure"),
    Transport.READ_TIMEOUT: (Reason.TIMEOUT, "read timeout"),
    Transport.POOL_TIMEOUT: (Reason.TIMEOUT, "no free connection"),
    Transport.DISCONNECTED: (Reason.SERVER_ERROR, "server closed the connection"),
    Transport.DEADLINE: (Reason.TIMEOUT, DEADLINE_DETAIL),
}

# A bad key as a provider states it in a structured field (an error's `code`, `type`, Google's
# `reason` or `status`), never in a message's words: providers quote the client's own field and
# model names in their 400s and 404s (OpenAI "Unrecognized request argument supplied: X",
# Anthropic "X: Extra inputs are not permitted", Gemini 'Unknown name "X"', Responses "Unknown
# parameter: 'X'", "The model 'X' does not exist"), so a request with a field named `api_key`
# or a model named `nomodel-author-7b` would open every provider's circuit (issue 47).
_AUTH_CODES = frozenset(
    {
        "invalid_api_key",  # OpenAI
        "authentication_error",  # Anthropic
        "permission_error",
        "invalid_authentication_error",  # Moonshot
        "api_key_invalid",  # Gemini's 400 bad-key shape (`details[].reason`)
        "api_key_expired",
        "unauthenticated",  # Google's status names
        "permission_denied",
        "invalidapikey",  # DashScope
    }
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
# This key's plan, balance or usage window is used up (docs/providers.md, "Usage limits"):
# OpenAI `insufficient_quota`, Moonshot `exceeded_current_quota_error` and, for a coding plan's
# spent weekly window, Kimi's 403 `access_terminated_error`, Zhipu 1113 (arrears),
# 1304 (daily call limit), 1308 (N-hour plan limit), 1309 (plan expired), 1310 (weekly/monthly
# limit), Minimax 1008 (balance) and 2056 (plan window), DeepSeek "Insufficient Balance".
_QUOTA_CODES = frozenset(
    {
        "insufficient_quota",
        "exceeded_current_quota_error",
        "access_terminated_error",
        "usage_limit_reached",
        "1113",
        "1304",
        "1308",
        "1309",
        "1310",
        "1008",
        "2056",
    }
)
_QUOTA_WORDS = (
    "insufficient_quota",
    "exceeded your current quota",
    "exceeded your current token quota",
    "insufficient balance",
    "insufficient_balance",
    "usage limit",
    "usage_limit",
    "tpd rate limit",
    "余额不足",
    "欠费",
    "使用上限",
    "调用次数限额",
)
# The provider refused a reasoning artifact it did not mint: Anthropic's "Invalid `signature`
# in `thinking` block", OpenAI's `invalid_encrypted_content` ("The encrypted content for item
# rs_… could not be verified").
_ARTIFACT_WORDS = (
    "invalid `signature`",
    "invalid signature",
    "invalid_encrypted_content",
    "encrypted content",
    "could not be verified",
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


def _used_up(
    status: int | None, error: ErrorInfo | None, headers: Mapping[str, str] | None
) -> bool:
    """Whether the answer says this key's plan, balance or usage window is used up."""
    if status == 402 or header(headers, "anthropic-ratelimit-unified-status") == "rejected":
        return True
    if error is None:
        return False
    return (error.code or "").lower() in _QUOTA_CODES or _mentions(error, _QUOTA_WORDS)


def _bad_key(error: ErrorInfo | None) -> bool:
    """Whether the provider's own code (or the status a dialect maps it to) says the key is
    bad: 401/403, or one of `_AUTH_CODES`; the message is never read (it may echo the request)."""
    if error is None:
        return False
    return error.status in (401, 403) or (error.code or "").lower() in _AUTH_CODES


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


def _status_reason(
    status: int, error: ErrorInfo | None, headers: Mapping[str, str] | None = None
) -> Reason:
    if error is not None and error.reason is not None:
        return error.reason
    if status in (402, 403, 429) and _used_up(status, error, headers):
        return Reason.QUOTA_EXHAUSTED_UPSTREAM
    if status in (401, 403):
        return Reason.AUTH_FAILED
    if status == 429:
        return Reason.RATE_LIMITED
    if status >= 500:
        return Reason.SERVER_ERROR
    if status == 408:
        return Reason.TIMEOUT
    if status == 400 and _mentions(error, _ARTIFACT_WORDS):
        return Reason.ARTIFACT_REJECTED
    refused = _refused_request(error)
    if refused is not None:
        return refused
    if _bad_key(error):  # Gemini answers a bad key with 400
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
    headers: Mapping[str, str] | None = None,
    now: float = 0.0,
    window_s: float = 60.0,
) -> Outcome:
    """The one outcome for what an attempt produced.

    - `transport`: a failure below HTTP (wins over everything else).
    - `status` outside 2xx: classified by status, refined by the error body.
    - `status` 2xx (or None) with `error`: an error inside a success body; its mapped status
      decides when known, else its auth code, quota/rate words, else `schema_mismatch`.
    A `rate_limited` answer that says to wait longer than `window_s` (`rate_limit_window_s`)
    is `quota_exhausted_upstream`: a used-up window, not a burst. `now` is the wall clock in
    seconds, used to read the reset times the answer states (`stated_wait`).
    """
    if transport is not None:
        reason, text = _TRANSPORT[transport]
        return Outcome(reason, None, transport_detail or text)
    message = error.message if error else ""
    if status is not None and not 200 <= status < 300:
        if 300 <= status < 400:
            return Outcome(Reason.BAD_REQUEST, status, "redirect not followed")
        reason = _status_reason(status, error, headers)
        if reason is Reason.BAD_REQUEST:
            return Outcome(reason, status, message or f"HTTP {status}")
        limited = EFFECTS[reason].circuit is Circuit.WAITS
        wait = stated_wait(headers, message if limited else None, now)
        return Outcome(_windowed(reason, wait, window_s), status, message or f"HTTP {status}", wait)
    if error is None:
        return Outcome(Reason.OK, status)
    refused = _refused_request(error)
    if error.status is not None and not 200 <= error.status < 300:
        reason = _status_reason(error.status, error, headers)
    elif refused is not None:
        reason = refused
    elif _used_up(None, error, None):
        reason = Reason.QUOTA_EXHAUSTED_UPSTREAM
    elif _bad_key(error):
        reason = Reason.AUTH_FAILED
    elif _mentions(error, _RATE_WORDS):
        reason = Reason.RATE_LIMITED
    elif _mentions(error, _SERVER_WORDS):
        reason = Reason.SERVER_ERROR
    else:
        reason = Reason.SCHEMA_MISMATCH
    code = f" ({error.code})" if error.code else ""
    wait = stated_wait(None, message, now) if reason is Reason.QUOTA_EXHAUSTED_UPSTREAM else None
    detail = f"error in {status or 'a'} body{code}: {message}"
    return Outcome(_windowed(reason, wait, window_s), status, detail, wait)


def _windowed(reason: Reason, wait: float | None, window_s: float) -> Reason:
    """A rate limit that lasts longer than `window_s` is a used-up window."""
    if reason is Reason.RATE_LIMITED and wait is not None and wait > window_s:
        return Reason.QUOTA_EXHAUSTED_UPSTREAM
    return reason


def mismatch(detail: str, status: int | None = None) -> Outcome:
    """A 2xx answer that is not a usable chat completion."""
    return Outcome(Reason.SCHEMA_MISMATCH, status, detail)


FILTERED = "the provider filtered the answer (finish_reason content_filter, no content)"


def filtered(status: int | None = None) -> Outcome:
    """A 2xx answer (or stream) whose only word is `finish_reason: content_filter`."""
    return Outcome(Reason.CONTENT_BLOCKED, status, FILTERED)
