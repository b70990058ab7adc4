"""One incoming chat request, checked and split into the body and agent-reach's extension. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .errors import RequestError


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
        model = request.get("model")
        if model is not None and not isinstance(model, str):
            raise RequestError("'model' must be a string", param="model")
        ext = request.get("agent_reach") or {}
        if not isinstance(ext, dict):
            raise RequestError("'agent_reach' must be an object", param="agent_reach")
        unknown = set(ext) - {
            "provider_route",
            "fallback_order",
            "response_schema_compatibility",
            "deadline_ms",
        }
        if unknown:
            raise RequestError(
                f"unknown agent_reach field(s): {', '.join(sorted(unknown))}", param="agent_reach"
            )
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
        deadline = ext.get("deadline_ms")
        if deadline is not None and (
            isinstance(deadline, bool) or not isinstance(deadline, int | float) or deadline <= 0
        ):
            raise RequestError(
                "agent_reach.deadline_ms must be a positive number", param="agent_reach"
            )
        body = (
            {k: v for k, v in request.items() if k != "agent_reach"}
            if "agent_reach" in request
            else request
        )
        return cls(
            body=body,
            model=model or None,
            stream=bool(request.get("stream")) if stream is None else stream,
            provider_route=route,
            fallback_order=tuple(order) if order else None,
            raw_response=not compat,
            deadline_ms=float(deadline) if deadline is not None else None,
        )

    @property
    def route_label(self) -> str:
        """The route's name for metrics and events (a model alias is named by the engine)."""
        if self.fallback_order:
            return "custom"
        return self.provider_route or "default"
