"""Error bodies in the shape of the API a client speaks (protocol §10, §10.1).

OpenAI's APIs (Chat Completions, Responses, step mode, everything else) answer
`{"error": {"message", "type", "param", "code"}}`; Anthropic's Messages API (any path under
`/v1/messages`) answers `{"type": "error", "error": {"type", "message"}}` with Anthropic's types;
the Gemini API (`/v1beta/…`, and `/v1/models/…:method`) `{"error": {"code", "message", "status"}}`
with Google's status names.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import orjson

from ..chat import completion
from ..dialects.gemini import errors as gemini
from .http11.wire import Response

if TYPE_CHECKING:
    from ..core.errors import AllProvidersFailed

JSON = "application/json"
_OPENAI_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "request_too_large",
}
_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",  # the SDKs' error types have no `request_too_large`
    429: "rate_limit_error",
    529: "overloaded_error",
}


def speaks_anthropic(path: str) -> bool:
    """Whether a request path belongs to the Anthropic Messages API."""
    return path == "/v1/messages" or path.startswith("/v1/messages/")


def speaks_gemini(path: str) -> bool:
    """Whether a request path belongs to the Gemini API."""
    return path.startswith("/v1beta/") or (path.startswith("/v1/models/") and ":" in path)


def error_body(
    path: str,
    status: int,
    message: str,
    type: str | None = None,
    code: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """The error body for `path`'s API. `type` overrides the type the status implies;
    `code` and `param` exist in OpenAI's shape only; `extra` fields (e.g. `attempts`) go
    inside `error` in each."""
    if speaks_gemini(path):
        extra.pop("param", None)
        return gemini.error_body(status, message, **extra)
    if speaks_anthropic(path):
        kind = type if type in _ANTHROPIC_TYPES.values() else _ANTHROPIC_TYPES.get(status)
        extra.pop("param", None)
        return {
            "type": "error",
            "error": {"type": kind or _by_class(status), "message": message, **extra},
        }
    return completion.error(
        message, type or _OPENAI_TYPES.get(status, _by_class(status)), code, **extra
    )


def _by_class(status: int) -> str:
    """The type of an error whose status has none of its own: the client's or ours."""
    return "invalid_request_error" if status < 500 else "api_error"


def error_response(
    path: str,
    status: int,
    message: str,
    type: str | None = None,
    code: str | None = None,
    *,
    headers: dict[str, str] | None = None,
    **extra: Any,
) -> Response:
    """An error response for `path`'s API (see `error_body`)."""
    body = error_body(path, status, message, type, code, **extra)
    return Response(status=status, body=orjson.dumps(body), content_type=JSON, headers=headers)


_FAULT_TYPES = {400: "invalid_request_error", 404: "invalid_request_error", 429: "rate_limit_error"}


def all_failed(path: str, exc: AllProvidersFailed) -> Response:
    """No provider answered: the status of protocol §5.1 (whose fault it is: `exc.fault`), in the
    shape of `path`'s API, with every attempt inside `error` and, for a 429, `Retry-After`.
    Under `/v1/messages` a request too long for every provider says "prompt is too long", the
    words on which Claude Code compacts its conversation."""
    fault = exc.fault
    message = str(exc)
    anthropic = speaks_anthropic(path)
    if anthropic and fault.code == "context_length_exceeded":
        message = f"prompt is too long: {message}"
    headers = None
    if fault.retry_after is not None:
        headers = {"Retry-After": str(max(1, math.ceil(fault.retry_after)))}
    elif fault.status >= 500:  # every provider was tried just now: the SDKs' retries would not help
        headers = {"x-should-retry": "false"}
    kind = None if anthropic else _FAULT_TYPES.get(fault.status, "all_providers_failed")
    attempts = [a.to_dict() for a in exc.attempts]
    return error_response(
        path,
        fault.status,
        message,
        kind,
        fault.code,
        headers=headers,
        param=fault.param,
        attempts=attempts,
    )
