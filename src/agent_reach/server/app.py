"""The proxy (protocol §9, §10): the application (`wire.App`) over the one engine.

This module wires the routes; each API face is a module of its own (`chat`, `step`, …). Every
request passes the `guard` first (client keys, limits, and request errors turned into error
bodies in the shape of the API a path belongs to). The client's own key is never forwarded:
the engine builds every upstream request from the provider's config alone.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from ..core.errors import escaped
from ..core.events import AttemptEvent, Event
from ..router import Router
from ..version import __version__
from . import log, status_page
from .faces import FACES, face_of, messages
from .faces.face import JSON
from .guard import Guard, Keys
from .http11.wire import App, Handler, Request, Response, StreamResponse
from .metrics import Metrics
from .stats import RecentAttempts

Bound = Callable[["Gateway", Request], Awaitable[StreamResponse]]


class Gateway:
    """The proxy's handlers, metrics and status around one `Router`."""

    def __init__(
        self, router: Router, *, api_keys: frozenset[str] = frozenset(), host: str | None = None
    ) -> None:
        """`host`: the address it serves on, besides the configured one (`server.host`)."""
        self.router = router
        self.config = router.config
        self.api_keys = api_keys
        names = [p.name for p in self.config.providers]
        self.metrics = Metrics(names)
        self.recent = RecentAttempts()
        self._observe(router)
        self.dumped: set[str] = set()  # providers whose config `_debug` has logged
        self.guard = Guard(api_keys, self.config.server, host)
        self.logins = status_page.Logins()  # wrong keys sent to the status page's form
        self.trusted_proxies = tuple(
            ipaddress.ip_network(n, strict=False) for n in self.config.server.trusted_proxies
        )
        self.models_body = orjson.dumps(self._models())
        self.started = time.time()
        self.draining = False  # a stop began: `/readyz` answers 503 (the server still serves)
        self._background: asyncio.Task[None] | None = None

    def adopt(self, router: Router, api_keys: frozenset[str]) -> None:
        """Serve new requests with `router`, made from a reloaded config; requests in flight
        finish with the router they started with (protocol §12.1)."""
        router.adopt(self.router)
        self._observe(router)
        self.dumped = set()
        self.router, self.config = router, router.config
        self.api_keys = api_keys
        self.guard.keys = Keys(api_keys)
        self.metrics.track([p.name for p in self.config.providers])
        self.models_body = orjson.dumps(self._models())
        if self.config.health.mode == "background" and self._background is None:
            self._background = asyncio.create_task(self._check_forever())

    def app(self) -> App:
        """The routes, each behind the guard; every answer gets `X-Content-Type-Options:
        nosniff` from the connection (no browser guesses one into HTML)."""
        app = App(self.guard.middleware)
        for face in FACES:
            for method, path, handler in face.routes:
                app.add(method, path, self._face(handler))
        app.add("GET", "/", self.root)  # and HEAD: Claude Code probes its base URL
        app.add("GET", "/v1/models", self.models)
        app.add("GET", "/healthz", self.healthz)
        app.add("GET", "/readyz", self.readyz)
        app.add("GET", "/metrics", self.prometheus)
        app.add("GET", "/agent-reach/v1/status", self.status)
        app.add("GET", status_page.PATH, self._face(status_page.page))
        app.add("GET", status_page.PATH.rstrip("/"), self.to_status_page)
        app.add("POST", status_page.LOGIN, self._face(status_page.login))
        app.on_startup.append(self._start)
        app.on_cleanup.append(self._stop)
        return app

    def error_bytes(self, path: str, status: int, message: str) -> bytes:
        """An error body for `path`'s API, for the HTTP server to answer outside a request."""
        return orjson.dumps(face_of(path).error_body(status, message))

    def authorized(self, request: Request) -> bool:
        """Whether the request carries a client key (for the status page, which asks for one
        itself)."""
        return self.guard.authorized(request)

    def valid_key(self, token: str) -> bool:
        return self.guard.keys.valid(token)

    def _observe(self, router: Router) -> None:
        """The proxy's observers of `router`'s events; `_debug` only when a provider has
        `debug_mode` on (it is called for every event)."""
        for observer in (self.metrics, self.recent, log.observe):
            router.subscribe(observer)
        if any(p.schema_compatibility.debug_mode for p in router.config.providers):
            router.subscribe(self._debug)

    def _debug(self, event: Event) -> None:
        """A provider's `schema_compatibility.debug_mode`: a log line per failed attempt of its
        `debug_reasons` with the raw answer (an excerpt, keys as `***`) and, the first time, one
        with its effective config (the fields that are set; keys masked)."""
        if not isinstance(event, AttemptEvent) or not self.router.debugged(event.attempt):
            return
        a = event.attempt
        raw = escaped(event.raw, 700) if event.raw else "(no body)"
        log.server_log.warning("debug_mode: %s %s: raw answer: %s", a.provider, a.reason, raw)
        if a.provider not in self.dumped:  # the fields that are set: a log line holds ~1000
            self.dumped.add(a.provider)
            config = {k: v for k, v in self.router.describe(a.provider).items() if v or v == 0}
            log.server_log.warning("debug_mode: %s config: %s", a.provider, orjson.dumps(config))

    def _face(self, handler: Bound) -> Handler:
        """The route handler of one API face's handler function (its coroutine, with no
        coroutine of its own around it)."""
        return functools.partial(handler, self)

    # -- the rest ------------------------------------------------------------------------------

    def model_names(self) -> list[dict[str, Any]]:
        """The chat models a request may ask for (`Router.model_names`), as OpenAI lists
        them (what the Messages and Gemini faces list too)."""
        return [_listed(n) for n in self.router.model_names()]

    def _models(self) -> dict[str, Any]:
        """`GET /v1/models`: the chat models, then each embedding space by its names (its
        own and its aliases: what `POST /v1/embeddings` takes)."""
        chat = self.model_names()
        spaces = self.router.config.embeddings.spaces
        names = dict.fromkeys(n for name, s in spaces.items() for n in (name, *s.aliases))
        listed = {m["id"] for m in chat}
        return {"object": "list", "data": chat + [_listed(n) for n in names if n not in listed]}

    async def models(self, request: Request) -> Response:
        """`GET /v1/models`: OpenAI's list, or Anthropic's to a client that names its
        `anthropic-version` (Claude Code's gateway model discovery)."""
        if "anthropic-version" in request.headers:
            return await messages.models(self, request)
        return Response(body=self.models_body, content_type=JSON)

    async def healthz(self, request: Request) -> Response:
        return Response(body=b'{"status":"ok"}', content_type=JSON)

    async def readyz(self, request: Request) -> Response:
        """Ready for new requests: serving, its config loaded, not draining; 503 once a stop
        began. The state store is reported, never counted (a shared Redis that is down would
        take every pod out, while each routes on in its own view), and so is no provider's
        health (docs/decisions.md)."""
        state = b"down" if self.router.state_down else b"ok"
        if self.draining:
            body = b'{"status":"draining","state":"%s"}' % state
            return Response(status=503, body=body, content_type=JSON)
        return Response(body=b'{"status":"ready","state":"%s"}' % state, content_type=JSON)

    async def root(self, request: Request) -> Response:
        """`/`: alive, and where to look next (the status page, the API)."""
        body = b'{"status":"ok","status_page":"/agent-reach/","api":"/v1"}'
        return Response(body=body, content_type=JSON)

    async def to_status_page(self, request: Request) -> Response:
        """`/agent-reach` without its slash: the status page is one redirect away."""
        return Response(status=308, headers={"Location": status_page.PATH})

    async def prometheus(self, request: Request) -> Response:
        # Requests under way but this one (the guard counts every path but the open ones).
        in_flight = self.guard.in_flight.total - 1
        body = self.metrics.render(self.router.skipped_records, in_flight)
        return Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4"})

    async def status(self, request: Request) -> Response:
        providers = [
            {**row, **self.recent.summary(row["provider"])} for row in await self.router.status()
        ]
        body = {
            "version": __version__,
            "uptime_s": round(time.time() - self.started, 1),
            "health_mode": self.config.health.mode,
            "providers": providers,
            "failovers": list(self.recent.failovers),
        }
        headers = {"Cache-Control": "no-store"}
        return Response(body=orjson.dumps(body), content_type=JSON, headers=headers)

    # -- lifecycle -----------------------------------------------------------------------------

    async def _start(self, app: App) -> None:
        if self.config.health.mode == "background":
            self._background = asyncio.create_task(self._check_forever())

    async def _stop(self, app: App) -> None:
        if self._background is not None:
            self._background.cancel()
        await self.router.aclose()

    async def _check_forever(self) -> None:
        """Health mode `background`: check every provider every `ttl_s`."""
        while True:
            await self.router.refresh_health()
            await asyncio.sleep(self.config.health.ttl_s)


def _listed(name: str) -> dict[str, Any]:
    """A model as `GET /v1/models` lists it."""
    return {"id": name, "object": "model", "created": 0, "owned_by": "agent-reach"}
