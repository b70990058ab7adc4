"""`POST /agent-reach/v1/route[?route=NAME]`: step mode, one attempt per call (protocol §9)."""

from __future__ import annotations

from ...chat.request import ChatRequest
from ...core.errors import RequestError, quoted
from ...core.trace import Attempt
from ..http11.wire import Request, Response
from .embeddings import written
from .face import Face, Serving
from .relay import BadBody, json_response, read_json, trace_headers


async def step(gateway: Serving, request: Request) -> Response:
    """One attempt at the named provider (or a route's first); the client drives."""
    router = gateway.router
    body = await read_json(request)
    short = "prompt" in body and "messages" not in body
    named = body.pop("provider", None)
    if named is not None and (not isinstance(named, str) or not named):
        raise RequestError("'provider' must be a provider or route name", param="provider")
    if short:
        prompt = body.pop("prompt")
        if not isinstance(prompt, str) or not prompt:
            raise BadBody("'prompt' must be a non-empty string")
        body["messages"] = [{"role": "user", "content": prompt}]
    route = request.query.get("route")
    if route == "":
        raise RequestError("'route' must name a provider or route", param="route")
    embedding = "input" in body and "messages" not in body
    if embedding:
        encoding = body.get("encoding_format")
        req = router.embedding_request(body)
        order = router.candidates(req)
        name, following = _target(gateway, route or named or order[0], order)
    else:
        req = ChatRequest.parse(body, stream=False)
        name, following = _target(gateway, route or named or router.default_order[0])
    attempt, response = await router.step(req, name)
    if response is None:
        return _failed(attempt, following)
    headers = trace_headers(name, [attempt])
    if embedding:
        headers |= written(response, encoding)
    extra = {"status": "ok", "provider": name, "ms": round(attempt.ms)}
    return json_response({**response, "agent_reach": extra}, headers)


def _target(
    gateway: Serving, target: str, order: tuple[str, ...] | None = None
) -> tuple[str, str | None]:
    """(provider to try, the one after it): a route's first and second, or a provider and
    the provider after it in `order` (default: the default order)."""
    router = gateway.router
    if target in router.routes:
        names = router.routes[target]
        return names[0], names[1] if len(names) > 1 else None
    if target not in router.providers:
        raise RequestError(
            f"no provider or route named {quoted(target)}", status=404, param="route"
        )
    order = router.default_order if order is None else order
    i = order.index(target) if target in order else len(order)
    return target, order[i + 1] if i + 1 < len(order) else None


def _failed(attempt: Attempt, following: str | None) -> Response:
    return json_response(
        {
            "status": "failed",
            "provider": attempt.provider,
            "reason": str(attempt.reason),
            "detail": attempt.detail,
            "next_route": following,
        }
    )


FACE = Face("step", (("POST", "/agent-reach/v1/route", step),), prefixes=("/agent-reach/v1/route",))
