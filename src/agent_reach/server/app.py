"""The OpenAI-compatible proxy (spec §9, §10): aiohttp handlers over the one engine.

Every error leaves in OpenAI's shape `{"error": {"message", "type", "param", "code"}}`. The
client's own `Authorization` (its proxy key) is checked here and never forwarded: the engine
builds every upstream request from the provider's config alone.
"""

from __future__ import annotations

import asyncio
import hmac
import time
from dataclasses import replace
from typing import Any

import orjson
from aiohttp import web

from .. import completion
from .._version import __version__
from ..errors import AllProvidersFailed, RequestError, StreamInterrupted
from ..request import ChatRequest
from ..router import Router
from ..trace import Attempt, Reason, trace_header
from .metrics import Metrics
from .stats import RecentAttempts

JSON = "application/json"
SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "request_too_large",
}


def error_response(
    status: int, message: str, type: str | None = None, code: str | None = None, **extra: Any
) -> web.Response:
    """An OpenAI-style error."""
    body = completion.error(message, type or _ERROR_TYPES.get(status, "api_error"), code, **extra)
    return web.Response(status=status, body=orjson.dumps(body), content_type=JSON)


def _failure_body(exc: AllProvidersFailed, type: str, code: str) -> dict[str, Any]:
    return completion.error(str(exc), type, code, attempts=[a.to_dict() for a in exc.attempts])


def _trace_headers(provider: str, trace: list[Attempt]) -> dict[str, str]:
    return {"X-Agent-Reach-Provider": provider, "X-Agent-Reach-Trace": trace_header(trace)}


class BadBody(Exception):
    """A request body that is not the JSON object expected."""


class Proxy:
    """The proxy's handlers, metrics and status around one `Router`."""

    def __init__(self, router: Router, *, api_keys: frozenset[str] = frozenset()) -> None:
        self.router = router
        self.engine = router.engine
        self.config = router.config
        self.api_keys = api_keys
        names = [p.name for p in self.config.providers]
        self.metrics = Metrics(names)
        self.recent = RecentAttempts()
        router.subscribe(self.metrics)
        router.subscribe(self.recent)
        self.models_body = orjson.dumps(self._models())
        self.started = time.time()
        self._background: asyncio.Task[None] | None = None

    def app(self) -> web.Application:
        app = web.Application(
            middlewares=[self._guard], client_max_size=self.config.server.max_body_bytes
        )
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/metrics", self.prometheus)
        app.router.add_get("/agent-reach/v1/status", self.status)
        app.router.add_post("/agent-reach/v1/route", self.step)
        app.on_startup.append(self._start)
        app.on_cleanup.append(self._stop)
        return app

    # -- middleware ----------------------------------------------------------------------------

    @web.middleware
    async def _guard(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if self.api_keys and request.path != "/healthz" and not self._authorized(request):
            return error_response(401, "a valid proxy key is required", code="invalid_api_key")
        try:
            response: web.StreamResponse = await handler(request)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            return error_response(exc.status, exc.reason)
        except BadBody as exc:
            return error_response(400, str(exc))
        except RequestError as exc:
            return error_response(exc.status, str(exc), param=exc.param)
        return response

    def _authorized(self, request: web.Request) -> bool:
        given = request.headers.get("Authorization", "")
        token = given[7:].strip() if given[:7].lower() == "bearer " else ""
        return any(hmac.compare_digest(token.encode(), key.encode()) for key in self.api_keys)

    @staticmethod
    async def _body(request: web.Request) -> dict[str, Any]:
        raw = await request.read()  # over client_max_size: HTTPRequestEntityTooLarge (413)
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise BadBody(f"the body is not valid JSON: {exc}") from None
        if not isinstance(body, dict):
            raise BadBody("the body must be a JSON object")
        return body

    # -- /v1/chat/completions ------------------------------------------------------------------

    async def chat(self, request: web.Request) -> web.StreamResponse:
        req = ChatRequest.parse(await self._body(request))
        route = request.headers.get("X-Agent-Reach-Route")
        order = request.headers.get("X-Agent-Reach-Fallback-Order")
        if route or order:
            req = replace(
                req,
                provider_route=route or req.provider_route,
                fallback_order=tuple(n.strip() for n in order.split(",") if n.strip())
                if order
                else req.fallback_order,
            )
        if req.stream:
            return await self._stream(request, req)
        try:
            result = await self.engine.chat(req)
        except AllProvidersFailed as exc:
            return self._all_failed(exc)
        return web.Response(
            body=orjson.dumps(result.response),
            content_type=JSON,
            headers=_trace_headers(result.provider, result.trace),
        )

    async def _stream(self, request: web.Request, req: ChatRequest) -> web.StreamResponse:
        try:
            stream = await self.engine.stream(req)
        except AllProvidersFailed as exc:
            return self._all_failed(exc)
        try:
            resp = web.StreamResponse(
                headers={**SSE_HEADERS, **_trace_headers(stream.provider, stream.trace)}
            )
            await resp.prepare(request)
            try:
                async for chunk in stream:
                    await resp.write(b"data: " + orjson.dumps(chunk) + b"\n\n")
            except StreamInterrupted as exc:
                body = _failure_body(exc, "stream_interrupted", str(exc.attempts[-1].reason))
                await resp.write(b"data: " + orjson.dumps(body) + b"\n\n")
            else:
                await resp.write(b"data: [DONE]\n\n")
            return resp
        finally:
            await stream.aclose()  # a client that went away cancels us: close the upstream

    def _all_failed(self, exc: AllProvidersFailed) -> web.Response:
        body = _failure_body(exc, "all_providers_failed", "all_providers_failed")
        return web.Response(status=502, body=orjson.dumps(body), content_type=JSON)

    # -- step mode -----------------------------------------------------------------------------

    async def step(self, request: web.Request) -> web.Response:
        """`POST /agent-reach/v1/route[?route=NAME]`: one attempt, the client drives."""
        body = await self._body(request)
        short = "prompt" in body and "messages" not in body
        named = body.pop("provider", None)
        if short:
            prompt = body.pop("prompt")
            if not isinstance(prompt, str) or not prompt:
                raise BadBody("'prompt' must be a non-empty string")
            body["messages"] = [{"role": "user", "content": prompt}]
        target = request.query.get("route") or named or self.engine.table.default[0]
        if not isinstance(target, str):
            raise BadBody("'provider' must be a provider name")
        name, following = self._step_target(target)
        req = ChatRequest.parse(body, stream=False)
        backend = self.engine.backends[name]
        if short and not req.model and not backend.spec.models:
            detail = "no model given and the provider lists no models"
            return self._step_failed(
                Attempt(name, Reason.MODEL_UNAVAILABLE, detail=detail), following
            )
        attempt, response = await self.engine.step(req, name)
        if response is None:
            return self._step_failed(attempt, following)
        extra = {"status": "ok", "provider": name, "ms": round(attempt.ms)}
        return web.Response(
            body=orjson.dumps({**response, "agent_reach": extra}),
            content_type=JSON,
            headers=_trace_headers(name, [attempt]),
        )

    def _step_target(self, target: str) -> tuple[str, str | None]:
        """(provider to try, the one after it): a route's first and second, or a provider and
        the provider after it in the default order."""
        routes = self.engine.table.routes
        if target in routes:
            names = routes[target]
            return names[0], names[1] if len(names) > 1 else None
        if target not in self.engine.backends:
            raise RequestError(f"no provider or route named {target!r}", status=404, param="route")
        order = self.engine.table.default
        i = order.index(target) if target in order else len(order)
        return target, order[i + 1] if i + 1 < len(order) else None

    @staticmethod
    def _step_failed(attempt: Attempt, following: str | None) -> web.Response:
        body = {
            "status": "failed",
            "provider": attempt.provider,
            "reason": str(attempt.reason),
            "detail": attempt.detail,
            "next_route": following,
        }
        return web.Response(body=orjson.dumps(body), content_type=JSON)

    # -- the rest ------------------------------------------------------------------------------

    def _models(self) -> dict[str, Any]:
        names: dict[str, None] = {}
        for p in self.config.providers:
            names.update(dict.fromkeys(p.models or ()))
            names.update(dict.fromkeys(p.model_map))
        data = [
            {"id": n, "object": "model", "created": 0, "owned_by": "agent-reach"} for n in names
        ]
        return {"object": "list", "data": data}

    async def models(self, request: web.Request) -> web.Response:
        return web.Response(body=self.models_body, content_type=JSON)

    async def healthz(self, request: web.Request) -> web.Response:
        return web.Response(body=b'{"status":"ok"}', content_type=JSON)

    async def prometheus(self, request: web.Request) -> web.Response:
        body = self.metrics.render()
        return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4"})

    async def status(self, request: web.Request) -> web.Response:
        await self.engine.store.refresh()
        now = self.engine.clock()
        providers = []
        for name, backend in self.engine.backends.items():
            circuit = await self.engine.store.circuit(name)
            health = self.engine.health.results.get(name)
            providers.append(
                {
                    "name": name,
                    "format": backend.spec.format,
                    "key": None if not backend.spec.api_key_env else bool(backend.key),
                    "health": None
                    if health is None
                    else {
                        "ok": health.ok,
                        "age_s": round(now - health.checked_at, 1),
                        "detail": backend.redact(health.outcome.detail),
                        "models": sorted(health.models) if health.models is not None else None,
                    },
                    "circuit": circuit.view(now),
                    "quota": await self.engine.quota_use(name),
                    **self.recent.summary(name),
                }
            )
        body = {
            "version": __version__,
            "uptime_s": round(time.time() - self.started, 1),
            "health_mode": self.config.health.mode,
            "providers": providers,
        }
        return web.Response(body=orjson.dumps(body), content_type=JSON)

    # -- lifecycle -----------------------------------------------------------------------------

    async def _start(self, app: web.Application) -> None:
        if self.config.health.mode == "background":
            self._background = asyncio.create_task(self._probe_forever())

    async def _stop(self, app: web.Application) -> None:
        if self._background is not None:
            self._background.cancel()
        await self.router.aclose()

    async def _probe_forever(self) -> None:
        """Health mode `background`: probe every provider every `ttl_s`."""
        health = self.engine.health
        while True:
            backends = [b for b in self.engine.backends.values() if health.enabled(b)]
            now = self.engine.clock()
            await asyncio.gather(
                *(
                    health.refresh(self.engine.session, b, now, b.connect_s + b.read_s)
                    for b in backends
                )
            )
            await asyncio.sleep(health.ttl_s)
