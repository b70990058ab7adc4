"""Errors both ways: a provider's Google error object read as an error (`error_of`: the status
its reason or status name means), and the Google error object of the proxy's own answers for
a Gemini client (`error_body`, with Google's status names)."""

from __future__ import annotations

from typing import Any

from ...core.outcomes import ErrorInfo
from ...core.trace import Reason
from ..base import openai_error

_REASON_STATUS = {
    "API_KEY_INVALID": 401,
    "API_KEY_EXPIRED": 401,
    "API_KEY_SERVICE_BLOCKED": 403,
    "SERVICE_DISABLED": 403,
    "RATE_LIMIT_EXCEEDED": 429,
}
_STATUS = {
    "INVALID_ARGUMENT": 400,
    "FAILED_PRECONDITION": 400,
    "OUT_OF_RANGE": 400,
    "UNAUTHENTICATED": 401,
    "PERMISSION_DENIED": 403,
    "NOT_FOUND": 404,
    "RESOURCE_EXHAUSTED": 429,
    "INTERNAL": 500,
    "UNAVAILABLE": 503,
    "DEADLINE_EXCEEDED": 504,
}
# Google's status names for the HTTP statuses the proxy answers (google.rpc.Code).
STATUS_NAMES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    405: "INVALID_ARGUMENT",
    408: "DEADLINE_EXCEEDED",
    409: "ABORTED",
    413: "INVALID_ARGUMENT",
    415: "INVALID_ARGUMENT",
    417: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


def error_body(status: int, message: str, **extra: Any) -> dict[str, Any]:
    """Google's error body: `{"error": {"code", "message", "status"}}`; `extra` fields (the
    attempts) go inside `error`."""
    name = STATUS_NAMES.get(status, "UNAVAILABLE" if status >= 500 else "INVALID_ARGUMENT")
    return {"error": {"code": status, "message": message, "status": name, **extra}}


def _block_reason(raw: dict[str, Any]) -> str | None:
    feedback = raw.get("promptFeedback")
    reason = feedback.get("blockReason") if isinstance(feedback, dict) else None
    return str(reason) if reason else None


def _blocked(raw: dict[str, Any]) -> ErrorInfo | None:
    """A prompt Gemini blocked: no candidates, and `promptFeedback.blockReason`."""
    reason = _block_reason(raw)
    if reason is None or raw.get("candidates"):
        return None
    message = f"Gemini blocked the prompt (promptFeedback.blockReason {reason})"
    return ErrorInfo(message, reason, None, Reason.CONTENT_BLOCKED)


def error_of(body: Any) -> ErrorInfo | None:
    """The error a Gemini provider reported in `body`: a Google error object (its status
    from the reason or status name it gives), a prompt blocked before any candidate, or
    OpenAI's shape."""
    if isinstance(body, list) and body and isinstance(body[0], dict):
        body = body[0]  # the non-SSE stream form is a JSON array of responses
    err = body.get("error") if isinstance(body, dict) else None
    if not isinstance(err, dict):
        return (_blocked(body) if isinstance(body, dict) else None) or openai_error(body)
    name = err.get("status") if isinstance(err.get("status"), str) else None
    details = err["details"] if isinstance(err.get("details"), list) else []
    reason = next(
        (d["reason"] for d in details if isinstance(d, dict) and isinstance(d.get("reason"), str)),
        None,
    )
    number = err.get("code") if isinstance(err.get("code"), int) else None
    status = _REASON_STATUS.get(reason or "") or _STATUS.get(name or "")
    if status is None and number is not None and number >= 400:
        status = number
    code = reason or name or (str(number) if number is not None else None)
    return ErrorInfo(str(err.get("message") or code or err), code, status)
