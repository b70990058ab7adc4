"""A simulated provider on 127.0.0.1 for the dialect tests, in the test's own event loop.

Each test sets what a path answers (`Wire.on(path, reply)`) with a provider's recorded wire
sample, JSON or a raw stream written piece by piece, and then talks to it through the real
library API (`Router`). Every request the server receives is recorded (`Wire.seen`): path,
query, headers and JSON body, for assertions on what a dialect sends upstream.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest
from aiohttp import web

from agent_reach import AllProvidersFailed, Attempt, Router

from .serving import serving

KEY = "sk-wire-0123456789-SECRET"


@dataclass
class Seen:
    """One request the simulated provider received."""

    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any


@dataclass
class Reply:
    """What the simulated provider answers: a body, or a stream written piece by piece."""

    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    pieces: tuple[bytes, ...] | None = None
    headers: dict[str, str] = field(default_factory=dict)


def json_reply(obj: Any, status: int = 200, **headers: str) -> Reply:
    """A JSON answer."""
    return Reply(status, orjson.dumps(obj), headers=headers)


def raw_reply(
    body: str | bytes, status: int = 200, content_type: str = "application/json"
) -> Reply:
    """An answer with these exact bytes."""
    data = body.encode() if isinstance(body, str) else body
    return Reply(status, data, content_type)


def stream_reply(*pieces: str | bytes, content_type: str = "text/event-stream") -> Reply:
    """A stream answer: each piece (raw wire text, e.g. `data: {…}\\n\\n`) written in turn."""
    return Reply(
        content_type=content_type,
        pieces=tuple(p.encode() if isinstance(p, str) else p for p in pieces),
    )


Handler = Reply | Callable[[Seen], Reply]


class Wire:
    """The simulated provider: a route table of replies and a record of requests."""

    def __init__(self) -> None:
        self.seen: list[Seen] = []
        self.routes: dict[str, Handler] = {}
        self.port = 0

    def on(self, path: str, reply: Handler) -> str:
        """Answer POSTs to `path` with `reply` (or `reply(seen)`); returns the full URL."""
        self.routes[path] = reply
        return self.url(path)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    @property
    def last(self) -> Seen:
        return self.seen[-1]

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body = orjson.loads(raw) if raw else None
        except orjson.JSONDecodeError:
            body = raw
        seen = Seen(request.path, dict(request.query), dict(request.headers), body)
        self.seen.append(seen)
        handler = self.routes.get(request.path)
        if handler is None:
            return web.json_response({"error": f"no route {request.path}"}, status=404)
        reply = handler(seen) if callable(handler) else handler
        if reply.pieces is None:
            return web.Response(
                status=reply.status,
                body=reply.body,
                headers={"Content-Type": reply.content_type, **reply.headers},
            )
        resp = web.StreamResponse(
            status=reply.status, headers={"Content-Type": reply.content_type, **reply.headers}
        )
        await resp.prepare(request)
        for piece in reply.pieces:
            await resp.write(piece)
        await resp.write_eof()
        return resp

    @classmethod
    @asynccontextmanager
    async def running(cls) -> AsyncIterator[Wire]:
        """A Wire listening on 127.0.0.1 (a free port) for the duration of the block."""
        wire = cls()
        app = web.Application()
        app.router.add_route("POST", "/{tail:.*}", wire._handle)
        async with serving(app) as wire.port:
            yield wire


# -- the library side ------------------------------------------------------------------------


def provider(name: str, url: str, fmt: str, **fields: Any) -> dict[str, Any]:
    """A provider entry whose key is `KEY` (environment variable `WIRE_KEY`)."""
    return {"name": name, "endpoint": url, "format": fmt, "api_key_env": "WIRE_KEY", **fields}


def router(*providers: dict[str, Any]) -> Router:
    """A router over `providers`, in memory, without health checks."""
    config = {
        "version": "0.3.2",
        "health": {"mode": "off"},
        "state": "memory://",
        "providers": list(providers),
    }
    return Router(config, environ={"WIRE_KEY": KEY})


async def streamed(r: Router, request: dict[str, Any]) -> list[dict[str, Any]]:
    """Every chunk of a streamed request."""
    stream = await r.open_stream(request)
    return [c async for c in stream]


def text(chunks: list[dict[str, Any]], key: str = "content") -> str:
    """The text of one delta field across chunks."""
    return "".join(c["choices"][0]["delta"].get(key) or "" for c in chunks if c["choices"])


async def first_failure(r: Router, request: dict[str, Any], stream: bool = False) -> Attempt:
    """The first attempt of a request that must fail."""
    with pytest.raises(AllProvidersFailed) as info:
        if stream:
            await streamed(r, request)
        else:
            await r.achat(request)
    return info.value.attempts[0]
