"""One incoming chat request, checked and split into the body and agent-reach's extension. Pure.

Every field agent-reach reads or translates itself has a strict type (`CHAT_FIELDS`): a string
where a boolean belongs, `max_tokens: 1e30` or `"agent_reach": []` is a 400 naming the field,
never a value guessed at or forwarded as something else. The checks (`Check`, `check_fields`) are
small values that the other inbound APIs reuse for their own fields.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import RequestError, quoted

INT32_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True)
class Check:
    """What one field must be: `test` accepts a (non-null) value, `expected` says what it
    accepts in an error message. Null is accepted as "not given" everywhere."""

    test: Callable[[Any], bool]
    expected: str


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def integer(low: int, high: int) -> Check:
    """An integer within [low, high] (not a boolean, not a float such as 1e30)."""
    return Check(
        lambda v: isinstance(v, int) and not isinstance(v, bool) and low <= v <= high,
        f"an integer from {low} to {high}",
    )


def _objects(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, dict) for v in value)


BOOLEAN = Check(lambda v: isinstance(v, bool), "true or false")
STRING = Check(lambda v: isinstance(v, str), "a string")
NUMBER = Check(_number, "a number")
OBJECT = Check(lambda v: isinstance(v, dict), "an object")
OBJECTS = Check(_objects, "an array of objects")
TOKENS = integer(1, INT32_MAX)
SEED = integer(-(2**63), 2**63 - 1)
STOP = Check(
    lambda v: isinstance(v, str) or (isinstance(v, list) and all(isinstance(s, str) for s in v)),
    "a string or an array of strings",
)
CHOICE = Check(lambda v: isinstance(v, str | dict), "a string or an object")
CONTENT = Check(lambda v: isinstance(v, str) or _objects(v), "a string or an array of parts")

# The Chat Completions fields that agent-reach reads or translates for some provider format.
CHAT_FIELDS: Mapping[str, Check] = {
    "stream": BOOLEAN,
    "stream_options": OBJECT,
    "max_tokens": TOKENS,
    "max_completion_tokens": TOKENS,
    "n": integer(1, 128),
    "temperature": NUMBER,
    "top_p": NUMBER,
    "top_k": NUMBER,
    "seed": SEED,
    "stop": STOP,
    "tools": OBJECTS,
    "functions": OBJECTS,
    "tool_choice": CHOICE,
    "parallel_tool_calls": BOOLEAN,
    "response_format": OBJECT,
    "user": STRING,
}
# ... and of each message.
MESSAGE_FIELDS: Mapping[str, Check] = {
    "content": CONTENT,
    "name": STRING,
    "tool_calls": OBJECTS,
    "tool_call_id": STRING,
}


def check_fields(body: Mapping[str, Any], checks: Mapping[str, Check], prefix: str = "") -> None:
    """`RequestError` (400, naming the field) for the first field of `body` that fails its
    check; fields without a check and null values pass."""
    for name, value in body.items():  # a request has fewer fields than there are checks
        check = checks.get(name)
        if check is not None and value is not None and not check.test(value):
            raise RequestError(
                f"'{prefix}{name}' must be {check.expected}", param=f"{prefix}{name}"
            )


def _positive(ext: dict[str, Any], name: str) -> float | None:
    """An extension field that is a positive number of milliseconds, when given."""
    value = ext.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise RequestError(f"agent_reach.{name} must be a positive number", param="agent_reach")
    return float(value)


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """An OpenAI chat request plus the `agent_reach` extension (spec §11.1).

    `body` is what goes upstream (the extension removed); `model` is None when the request names
    none (each provider then uses the first of its `models`).
    """

    body: dict[str, Any]
    model: str | None
    stream: bool
    provider_route: str | None = None
    fallback_order: tuple[str, ...] | None = None
    raw_response: bool = False  # response_schema_compatibility: false
    deadline_ms: float | None = None
    api: str = "chat"  # the API the request arrived in: chat, responses or messages
    native: dict[str, Any] | None = None  # the request as it arrived, when not a chat one
    # Headers of the client's API that go with `native` to a provider that speaks that API
    # (Messages: `anthropic-beta`); never a key.
    native_headers: dict[str, str] | None = None
    first_token_ms: float | None = None  # the extension's; else the route's, the provider's
    continuing: str | None = None  # an answer cut mid-stream, for the next provider to finish

    @classmethod
    def parse(cls, request: dict[str, Any], *, stream: bool | None = None) -> ChatRequest:
        """Check the request's shape; `RequestError` (a 400) names what is wrong."""
        if not isinstance(request, dict):
            raise RequestError("the request must be a JSON object")
        messages = request.get("messages")
        if not isinstance(messages, list) or not messages:
            raise RequestError("'messages' must be a non-empty array", param="messages")
        for i, m in enumerate(messages):
            if not isinstance(m, dict) or not isinstance(m.get("role"), str):
                raise RequestError(
                    f"messages[{i}] must be an object with a 'role'", param=f"messages[{i}]"
                )
            check_fields(m, MESSAGE_FIELDS, f"messages[{i}].")
        model = request.get("model")
        if model is not None and not isinstance(model, str):
            raise RequestError("'model' must be a string", param="model")
        check_fields(request, CHAT_FIELDS)
        ext = request.get("agent_reach")
        if ext is None:
            ext = {}
        elif not isinstance(ext, dict):
            raise RequestError("'agent_reach' must be an object", param="agent_reach")
        unknown = set(ext) - {
            "provider_route",
            "fallback_order",
            "response_schema_compatibility",
            "deadline_ms",
            "first_token_ms",
        }
        if unknown:
            names = quoted(", ".join(sorted(unknown)))
            raise RequestError(f"unknown agent_reach field(s): {names}", param="agent_reach")
        route = ext.get("provider_route")
        if route is not None and not isinstance(route, str):
            raise RequestError("agent_reach.provider_route must be a string", param="agent_reach")
        order = ext.get("fallback_order")
        if order is not None and (
            not isinstance(order, list) or not all(isinstance(n, str) for n in order) or not order
        ):
            raise RequestError(
                "agent_reach.fallback_order must be a non-empty array of provider names",
                param="agent_reach",
            )
        compat = ext.get("response_schema_compatibility", True)
        if not isinstance(compat, bool):
            raise RequestError(
                "agent_reach.response_schema_compatibility must be a boolean", param="agent_reach"
            )
        deadline = _positive(ext, "deadline_ms")
        body = (
            {k: v for k, v in request.items() if k != "agent_reach"}
            if "agent_reach" in request
            else request
        )
        return cls(
            body=body,
            model=model or None,
            stream=request.get("stream") is True if stream is None else stream,
            provider_route=route,
            fallback_order=tuple(order) if order else None,
            raw_response=not compat,
            deadline_ms=deadline,
            first_token_ms=_positive(ext, "first_token_ms"),
        )

    @property
    def route_label(self) -> str:
        """The route's name for metrics and events (a model alias is named by the engine)."""
        if self.fallback_order:
            return "custom"
        return self.provider_route or "default"
