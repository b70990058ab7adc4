"""A client cannot steer a provider's failure class (issue 47, High 1; protocol §5): each
provider's real refusals that quote the request's own field or model names are the client's
`bad_request` or `model_unavailable` (the circuit keeps), whatever words the names hold; a bad
key is read from the status or the provider's structured code, never from a message."""

from __future__ import annotations

from typing import Any

import pytest

from agent_reach import dialects
from agent_reach.core.outcomes import ErrorInfo, classify
from agent_reach.core.trace import EFFECTS, Circuit, Reason

from .fakes.shapes import GEMINI_BAD_KEY

# Names a client chooses that hold every word a bad key's message could have.
FIELDS = ("api_key", "authorization", "x_api_key", "credentials", "permission", "forbidden")
MODEL = "nomodel-author-7b"


def openai(message: str, code: str | None = None) -> dict[str, Any]:
    error = {"message": message, "type": "invalid_request_error", "param": None, "code": code}
    return {"error": error}


def anthropic(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}


def gemini(status: int, name: str, message: str) -> dict[str, Any]:
    return {"error": {"code": status, "message": message, "status": name}}


# (format, HTTP status, the body, with {} for the client's name): as each provider words it.
ECHOES = [
    ("openai", 400, openai("Unrecognized request argument supplied: {}")),
    ("responses", 400, openai("Unknown parameter: '{}'.", "unknown_parameter")),
    ("anthropic", 400, anthropic("invalid_request_error", "{}: Extra inputs are not permitted")),
    (
        "gemini",
        400,
        gemini(400, "INVALID_ARGUMENT", 'Invalid JSON payload received. Unknown name "{}"'),
    ),
    ("openai", 400, openai("Failed to deserialize the JSON body: unknown field `{}`")),  # DeepSeek
]
MODEL_ECHOES = [
    ("openai", openai("The model `{}` does not exist or you do not have access to it.")),
    ("anthropic", anthropic("not_found_error", "model: {}")),
    ("gemini", gemini(404, "NOT_FOUND", "models/{} is not found for API version v1beta")),
]
BAD_KEYS = [
    ("openai", 401, openai("Incorrect API key provided: sk-…", "invalid_api_key")),
    ("anthropic", 401, anthropic("authentication_error", "invalid x-api-key")),
    ("anthropic", 403, anthropic("permission_error", "not allowed")),
    ("gemini", 400, GEMINI_BAD_KEY),
    ("gemini", 403, gemini(403, "PERMISSION_DENIED", "Permission denied")),
]


def filled(body: Any, name: str) -> Any:
    if isinstance(body, dict):
        return {k: filled(v, name) for k, v in body.items()}
    return body.replace("{}", name) if isinstance(body, str) else body


def reason_of(fmt: str, status: int, body: Any) -> Reason:
    return classify(status=status, error=dialects.get(fmt).error_of(body)).reason


@pytest.mark.parametrize(("fmt", "status", "body"), ECHOES)
@pytest.mark.parametrize("name", FIELDS)
def test_an_echoed_field_is_the_clients_bad_request(
    fmt: str, status: int, body: Any, name: str
) -> None:
    reason = reason_of(fmt, status, filled(body, name))
    assert reason is Reason.BAD_REQUEST
    assert EFFECTS[reason].circuit is Circuit.KEEPS


@pytest.mark.parametrize(("fmt", "body"), MODEL_ECHOES)
def test_an_echoed_model_is_unavailable_not_a_bad_key(fmt: str, body: Any) -> None:
    reason = reason_of(fmt, 404, filled(body, MODEL))
    assert reason is Reason.MODEL_UNAVAILABLE
    assert EFFECTS[reason].circuit is Circuit.KEEPS


@pytest.mark.parametrize(("fmt", "status", "body"), BAD_KEYS)
def test_a_real_bad_key_still_opens_the_circuit(fmt: str, status: int, body: Any) -> None:
    assert reason_of(fmt, status, body) is Reason.AUTH_FAILED


def test_words_in_an_error_without_a_code_never_say_auth() -> None:
    """An error inside a 200 (a stream's error event) is classified by its code or the status a
    dialect maps its code to; a message that mentions keys is not a bad key."""
    said = classify(status=200, error=ErrorInfo("Unknown parameter: 'api_key'")).reason
    assert said is not Reason.AUTH_FAILED
    assert (
        classify(status=200, error=ErrorInfo("x", "invalid_api_key")).reason is Reason.AUTH_FAILED
    )


def test_kimis_spent_weekly_window_is_a_used_up_plan_not_a_bad_key() -> None:
    """Kimi's coding plan answers its spent weekly window with a 403 (issue 49, 50)."""
    body = {"error": {"message": "access terminated", "type": "access_terminated_error"}}
    assert reason_of("openai", 403, body) is Reason.QUOTA_EXHAUSTED_UPSTREAM
