"""What every API face of the proxy shares: reading a JSON body, the `X-Agent-Reach-*`
request headers, the trace response headers, server-sent events, and the one relay that
answers a request whole or streamed (`whole`, `streamed`) in a face's API."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import orjson

from ...chat.request import ChatRequest, affinity_key
from ...core.errors import AllProvidersFailed, StreamInterrupted
from ...core.trace import Attempt, Reason, trace_header
from ...dialects import Verbatim
from ...dialects.embeddings import listed
from ..http11.wire import ENDED, Request, Response, StreamResponse
from .face import Encoder, Face, Serving, owner
from .sessions import session_of

if TYPE_CHECKING:
    from ...engine.stream import ChatStream


E = TypeVar("E", bound=Encoder)
SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
_UNPRINTABLE = re.compile(r"[^\x20-\x7e]")
# The route of requests that name none (`agent-reach run --route`).
DEFAULT_ROUTE = "agent_reach.default_route"
SHUTDOWN_DETAIL = "shutdown"  # the detail of a stream's cut at the shutdown timeout
# How deep a request body may nest (protocol §14). The JSON reader accepts 1024 levels, the writer
# 254; a provider format wraps a request in a few levels more, so 128 leaves room for any real
# request (tool schemas included) and guarantees that whatever is accepted can be sent on.
MAX_DEPTH = 128
_WRITER_DEPTH = 254  # orjson.dumps refuses deeper values (tests/test_guard.py checks it)
# A larger body is checked at once: counting its brackets would cost more than the check.
_COUNTED = 16 * 1024


class BadBody(Exception):
    """A request body that is not the JSON object expected (a 400)."""


async def read_json(request: Request) -> dict[str, Any]:
    """The request's body as a JSON object; `BadBody` when it is not one."""
    raw = await request.read()  # over client_max_size: HTTPRequestEntityTooLarge (413)
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise BadBody(f"the body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise BadBody("the body must be a JSON object")
    if len(raw) > _COUNTED or raw.count(b"[") + raw.count(b"{") > MAX_DEPTH:
        check_depth(body)  # else it cannot nest that deep
    return body


def check_depth(value: Any, max_depth: int = MAX_DEPTH) -> None:
    """`BadBody` when `value` nests deeper than `max_depth` levels. The writer's own limit does
    the walk, in C: `value` wrapped in enough lists that only a deeper one exceeds it (a third
    of the time the reader took, where a walk in Python took longer than the reader)."""
    probe = value
    for _ in range(_WRITER_DEPTH - max_depth):
        probe = [probe]
    try:
        orjson.dumps(probe)
    except orjson.JSONEncodeError:
        raise BadBody(f"the body nests deeper than {max_depth} levels") from None


def with_headers(req: ChatRequest, request: Request) -> ChatRequest:
    """`req` with the route and fallback order of the `X-Agent-Reach-Route` and
    `X-Agent-Reach-Fallback-Order` headers, which win over the body's extension (a request
    that names neither takes the app's `DEFAULT_ROUTE`, if it has one), and the key of its
    session's home (`sessions`)."""
    session = session_of(request, req)
    if session is not None:
        req = replace(req, affinity=affinity_key(owner(request), session))
    route = request.headers.get("X-Agent-Reach-Route")
    order = request.headers.get("X-Agent-Reach-Fallback-Order")
    if not route and not order:
        default = request.app.get(DEFAULT_ROUTE)
        if default and not req.provider_route and not req.fallback_order:
            return replace(req, provider_route=default)
        return req
    return replace(
        req,
        provider_route=route or req.provider_route,
        fallback_order=tuple(n.strip() for n in order.split(",") if n.strip())
        if order
        else req.fallback_order,
    )


def trace_headers(provider: str, trace: list[Attempt]) -> dict[str, str]:
    """`X-Agent-Reach-Provider` and `X-Agent-Reach-Trace` of an answered request."""
    return {"X-Agent-Reach-Provider": provider, "X-Agent-Reach-Trace": trace_header(trace)}


def dropped_header(names: tuple[str, ...]) -> dict[str, str]:
    """`X-Agent-Reach-Dropped` naming what the provider that answered was not sent, when
    anything was (`Router.dropped`). The names come from the client (field names, block and
    tool types): printable ASCII only, at most 1,000 characters."""
    if not names:
        return {}
    value = _UNPRINTABLE.sub("?", ",".join(names))
    return {"X-Agent-Reach-Dropped": value if len(value) <= 1000 else value[:997] + "..."}


def sse(event: str | None, data: bytes) -> bytes:
    """One server-sent event: `event: NAME` (when named) and its `data:` line (lines, when
    a provider's frame had several)."""
    if event:
        return b"event: %s\ndata: %s\n\n" % (event.encode(), data.replace(b"\n", b"\ndata: "))
    return b"data: %s\n\n" % data.replace(b"\n", b"\ndata: ")


def json_response(body: Any, headers: dict[str, str] | None = None) -> Response:
    """A 200 with `body` as JSON: the provider's own bytes when they say it (`Verbatim`)."""
    data = body.raw if isinstance(body, Verbatim) else orjson.dumps(body, default=listed)
    return Response(body=data, content_type="application/json", headers=headers)


async def whole(
    gateway: Serving,
    face: Face,
    req: ChatRequest,
    translated: tuple[str, ...],
    render: Callable[[dict[str, Any]], dict[str, Any]],
    finished: Callable[[dict[str, Any]], Awaitable[None]] | None = None,
) -> Response:
    """A whole answer in `face`'s API: the provider's own body when it speaks that API, else
    `render` of its chat answer (handed to `finished`, when given, before it goes out); with
    the trace headers and `X-Agent-Reach-Dropped` (what the answering provider was not sent:
    `translated` left out of the translation)."""
    router = gateway.router  # the one that answers, whatever a reload does meanwhile
    try:
        result = await router.answer(req)
    except AllProvidersFailed as exc:
        return face.all_failed(exc)
    answer = result.response if result.native else render(result.response)
    if finished is not None:
        await finished(answer)
    headers = trace_headers(result.provider, result.trace)
    headers |= dropped_header(router.dropped(result.provider, req, translated))
    return json_response(answer, headers)


async def streamed(
    gateway: Serving,
    face: Face,
    request: Request,
    req: ChatRequest,
    translated: tuple[str, ...],
    encoder: Callable[[ChatStream], E],
    content_type: str = "text/event-stream",
    finished: Callable[[E], Awaitable[None]] | None = None,
    echo: tuple[str, ...] = (),
) -> StreamResponse:
    """A stream in `face`'s API: the error response when no provider answered; else the
    headers of `whole` (and those named in `echo` of a provider that speaks the API), then the
    stream, written through the `encoder` made for it (and
    handed to `finished` when it ended whole). The upstream is closed however it ends: a
    client that goes away cancels us."""
    router = gateway.router  # the one that answers, whatever a reload does meanwhile
    try:
        stream = await router.stream(req)
    except AllProvidersFailed as exc:
        return face.all_failed(exc)
    try:
        headers = {**SSE_HEADERS, "Content-Type": content_type}
        headers |= trace_headers(stream.provider, stream.trace)
        headers |= dropped_header(router.dropped(stream.provider, req, translated))
        headers |= stream.echoed(echo)
        resp = StreamResponse(headers=headers)
        await resp.prepare(request)
        out = encoder(stream)
        if await relay(resp, stream, out) and finished is not None:
            await finished(out)
        return resp
    finally:
        await stream.aclose()


class Sink(Protocol):
    """Where a stream's bytes go: a streamed HTTP answer, or a WebSocket's messages; `ending`:
    the server's shutdown timeout is over (a cancel is then no client going away)."""

    async def write(self, data: bytes) -> None: ...

    @property
    def ending(self) -> bool: ...


async def relay(resp: Sink, stream: ChatStream, out: Encoder) -> bool:
    """Write the stream: its start, each batch of chunks (or of the provider's own frames),
    its end; a cut after the start ends it as the API says. Whether it ended whole."""
    first = out.start()
    if first:
        await resp.write(first)
    forwarding = out.forwarding
    try:
        async for batch in stream.batches():
            data = out.frames(stream.take_frames()) if forwarding else out.chunks(batch)
            if data:
                await resp.write(data)
        last = out.frames(stream.take_frames()) if forwarding else b""
    except StreamInterrupted as exc:
        await resp.write(out.cut(exc))
        return False
    except asyncio.CancelledError:
        if not resp.ending:  # the client went away
            raise
        await resp.write(out.cut(_ended(stream)))
        return False
    await resp.write(last + out.end())
    return True


def _ended(stream: ChatStream) -> StreamInterrupted:
    """What a stream the server's shutdown timeout ended says: a timeout of the provider that
    was streaming, `detail` "shutdown" (nothing is recorded of it)."""
    cut = Attempt(stream.provider, Reason.TIMEOUT, detail=SHUTDOWN_DETAIL, sent=True)
    return StreamInterrupted([*stream.trace, cut], ENDED, cut=cut)
