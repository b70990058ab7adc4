"""Client connections (protocol §14): aiohttp's HTTP/1.1 server with our limits and error bodies.

aiohttp answers what it cannot parse (a bad chunk size, an 8 KB URL, 200 headers, a NUL or a
bare CR in a header, an HTTP/2 preface, Content-Length with Transfer-Encoding) by itself, in
plain text, with a traceback in the log. A `Connection` (aiohttp's `RequestHandler`) answers
them in the error shape of the API that the request line's path belongs to, with one log line,
and adds the limits aiohttp lacks:
  - `request_timeout_s` from a request's first byte until its head is complete: else 408 and
    closed (the guard times the body against the same start, `Connection.started`). A head
    is timed only while aiohttp waits for one: bytes that arrive while a request is being
    read or handled are its body (or the next request, timed once it is waited for), and
    nothing is written by this guard once a request is under way;
  - `client_write_timeout_s` while our writes are paused because the client reads nothing
    (its socket buffers are full): the connection is dropped, which cancels the handler and,
    with it, the upstream request;
  - `first_byte_timeout_s` for a new connection's first byte: else closed, without a word;
  - `max_connections` open at once (clamped to the descriptors there are, `descriptors`): the
    next one is answered 503 and closed, with one log line per episode of refusals.
An idle keep-alive connection closes after `keepalive_timeout_s` (aiohttp's own timer).

Written against aiohttp 3.14: it overrides `RequestHandler.handle_error`, `log_exception`,
`data_received`, `pause_writing` / `resume_writing` and reads the handler's
`_loop`, `_request_count`, `_waiter` and `_current_request`;
tests/e2e/test_hostile.py and tests/e2e/test_timeouts.py fail if a new aiohttp changes them.
"""

from __future__ import annotations

import asyncio
import re
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp import web
from aiohttp.http_exceptions import ContentEncodingError, HttpProcessingError, LineTooLong

from ..config import ServerConfig
from ..errors import escaped
from . import log
from .descriptors import Refusals
from .errors import error_body, error_response

Screen = Callable[[web.BaseRequest], web.StreamResponse | None]
# What a client that reads nothing can make us hold (protocol §14): its socket's send buffer (the
# kernel doubles it: 128 KB, still 1.2 MB/s at 100 ms, far above any token rate) and what we
# queue on top before our writes pause, which is also when `client_write_timeout_s` starts.
_SEND_BUFFER = 2**16
_WRITE_BUFFER = 2**14
_SNIFF = 512  # bytes of a request's start kept to tell its path when it cannot be parsed
_PATH = re.compile(rb"[!-~]{1,20} (/[^ \r\n?#]*)")
_REASONS = {408: "Request Timeout", 503: "Service Unavailable"}
# Refused connections that may wait (up to 1 s) for their request line, to be answered in its
# API's shape; any more are answered at once, so that refusing holds few descriptors.
_REFUSED_WAITING = 32


def path_of(head: bytes) -> str:
    """The path of a request line at the start of `head`, or `/` when there is none."""
    match = _PATH.match(head)
    return match[1].decode("latin-1") if match else "/"


class Connection(web.RequestHandler):
    """One client connection."""

    __slots__ = (
        "_first",
        "_head",
        "_last_head",
        "_limits",
        "_listener",
        "_over",
        "_stall",
        "_timer",
        "started",
    )

    def __init__(self, listener: Listener, *, limits: ServerConfig, **kwargs: Any) -> None:
        super().__init__(listener, **kwargs)
        self._listener = listener
        self._limits = limits
        self._over = False  # opened past max_connections: answered 503
        self._head = b""  # the start of the request being received
        self._last_head = b""  # ... of the one received last
        self._timer: asyncio.TimerHandle | None = None  # the head's request_timeout_s
        self._stall: asyncio.TimerHandle | None = None  # client_write_timeout_s
        self._first: asyncio.TimerHandle | None = None  # first_byte_timeout_s
        self.started = 0.0  # loop time of the current request's first byte

    # -- receiving ---------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        if isinstance(transport, asyncio.WriteTransport):  # pause (and time) slow readers early
            transport.set_write_buffer_limits(high=_WRITE_BUFFER)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, _SEND_BUFFER)
        cap = self._limits.max_connections
        if self._listener.open <= cap:
            self._first = self._loop.call_later(self._limits.first_byte_timeout_s, self.force_close)
            return
        self._over = True
        self._listener.refusals.refused(cap)
        if self._listener.open > cap + _REFUSED_WAITING:
            self._refuse()
        else:  # answered once its request line tells the path, or in 1 s
            self._start_timer(min(1.0, self._limits.request_timeout_s))

    def data_received(self, data: bytes) -> None:
        if self._first is not None:
            self._first.cancel()
            self._first = None
        if self._over:
            self._head += data[: _SNIFF - len(self._head)]
            if b"\n" in self._head:
                self._refuse()
            return
        if self._awaiting_head():
            if self._timer is None:  # not idle any more: our timer replaces aiohttp's
                self.keep_alive(True)
                self._start_timer(self._limits.request_timeout_s)
            if len(self._head) < _SNIFF:
                self._head += data[: _SNIFF - len(self._head)]
        count = self._request_count
        super().data_received(data)
        if self._request_count == count:
            return
        # A head came in complete, or could not be parsed (then the parser has stopped).
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._last_head, self._head = self._head, b""
        current = self._current_request
        if current is not None and not current.content.is_eof():
            # Unparsable bytes inside the body being read: the handler's read fails (400).
            current.content.set_exception(web.RequestPayloadError("malformed chunked body"))

    def _awaiting_head(self) -> bool:
        """Whether bytes arriving now begin (or continue) a request's head: aiohttp's loop
        waits for its next message. Not while a request is queued, being read or handled, nor
        in between (a head parsed, its handler not yet started: httpx's body segment lands
        there), nor while an answered request's unread body is drained."""
        waiter = self._waiter
        return waiter is not None and not waiter.done()

    def _start_timer(self, seconds: float) -> None:
        self.started = self._loop.time()
        self._timer = self._loop.call_at(self.started + seconds, self._late)

    def _late(self) -> None:
        self._timer = None
        if not (self._over or self._awaiting_head()):
            return  # a request got under way meanwhile: its own limits apply, and its answer
        if self._over:
            self._refuse()
        else:
            seconds = f"{self._limits.request_timeout_s:g}"
            message = f"the request was not received within {seconds} s"
            self._answer(408, f"{message} (server.request_timeout_s)")

    def _refuse(self) -> None:
        limit = self._limits.max_connections
        message = f"over {limit} open connections (server.max_connections)"
        self._answer(503, message, logged=False)  # `Refusals` logs the episode

    def _answer(self, status: int, message: str, *, logged: bool = True) -> None:
        """Answer `status` outside any request (its head is incomplete) and close."""
        transport = self.transport
        if transport is None:
            return
        if logged:
            log.server_log.warning("%d to %s: %s", status, _peer(transport), message)
        body = orjson.dumps(error_body(path_of(self._head), status, message))
        head = (
            f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        )
        transport.write(head.encode() + body)
        self.force_close()

    # -- what aiohttp could not parse ---------------------------------------------------------

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if request.writer.output_size > 0:  # as aiohttp: too late for another response
            raise ConnectionError("the response is under way: no error response can follow")
        status, text = _problem(status, exc, self._last_head)
        failure = exc if status >= 500 else None  # ours, not the client's: say what it was
        log.server_log.warning("%d to %s: %s", status, request.remote, text, exc_info=failure)
        log.mark_logged(request)
        response = error_response(path_of(self._last_head), status, text)
        response.force_close()
        return response

    def log_exception(self, *args: Any, **kw: Any) -> None:
        exc = kw.get("exc_info")
        if isinstance(exc, web.RequestPayloadError):  # a body the guard answered already
            return
        log.server_log.warning(*args, **kw)

    # -- sending -------------------------------------------------------------------------------

    def pause_writing(self) -> None:
        super().pause_writing()
        self._stall = self._loop.call_later(self._limits.client_write_timeout_s, self._stalled)

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._stall is not None:
            self._stall.cancel()
            self._stall = None

    def _stalled(self) -> None:
        self._stall = None
        transport = self.transport
        if transport is not None:
            seconds = f"{self._limits.client_write_timeout_s:g}"
            log.server_log.warning(
                "dropped %s: it read nothing for %s s (server.client_write_timeout_s)",
                _peer(transport),
                seconds,
            )
            transport.abort()  # closing would wait for the buffer to drain, which it won't

    def connection_lost(self, exc: BaseException | None) -> None:
        for timer in (self._timer, self._stall, self._first):
            if timer is not None:
                timer.cancel()
        self._timer = self._stall = self._first = None
        super().connection_lost(exc)


def _peer(transport: asyncio.BaseTransport) -> str:
    peer = transport.get_extra_info("peername")
    return str(peer[0]) if isinstance(peer, tuple) else "a client"


def _problem(status: int, exc: BaseException | None, head: bytes) -> tuple[int, str]:
    """The status and message for a request aiohttp could not take: why, without its bytes."""
    if status >= 500:
        return status, "internal error" if status == 500 else "timed out"
    if head.startswith(b"PRI * HTTP/2"):
        return 400, "HTTP/2 is not supported: speak HTTP/1.1"
    if isinstance(exc, ContentEncodingError):
        return 415, "Content-Encoding not supported (gzip, deflate or identity)"
    if isinstance(exc, LineTooLong):
        return 400, "malformed HTTP request: a line of the request head is too long"
    if isinstance(exc, HttpProcessingError):
        reason = str(exc.message).split(":", 1)[0].strip()
        return 400, f"malformed HTTP request: {escaped(reason, 100)}"
    return status, "malformed HTTP request"


class Listener(web.Server):
    """aiohttp's server making `Connection`s, counting them, and running `screen` on each
    request before aiohttp's application (and its `Expect: 100-continue` answer) does."""

    def __init__(
        self,
        handler: Callable[[web.BaseRequest], Awaitable[web.StreamResponse]],
        *,
        request_factory: Any,
        limits: ServerConfig,
        screen: Screen,
        connection: dict[str, Any],
    ) -> None:
        async def screened(request: web.BaseRequest) -> web.StreamResponse:
            early = screen(request)
            return early if early is not None else await handler(request)

        super().__init__(
            screened,
            request_factory=request_factory,
            handler_cancellation=True,
            loop=asyncio.get_running_loop(),
        )
        self.limits = limits
        self.connection = connection  # `RequestHandler` options: keepalive_timeout, access log
        self.open = 0
        self.refusals = Refusals(log.server_log)

    def __call__(self) -> Connection:
        loop = asyncio.get_running_loop()
        return Connection(self, limits=self.limits, loop=loop, **self.connection)

    def connection_made(self, handler: web.RequestHandler, transport: asyncio.Transport) -> None:
        super().connection_made(handler, transport)
        self.open += 1
        if self.open <= self.limits.max_connections:
            self.refusals.accepted()

    def connection_lost(
        self, handler: web.RequestHandler, exc: BaseException | None = None
    ) -> None:
        super().connection_lost(handler, exc)
        self.open -= 1


class Runner(web.AppRunner):
    """An `AppRunner` whose server is a `Listener`; handlers are cancelled when their client
    goes away."""

    def __init__(
        self,
        app: web.Application,
        *,
        limits: ServerConfig,
        screen: Screen,
        connection: dict[str, Any],
        shutdown_timeout: float,
    ) -> None:
        super().__init__(app, shutdown_timeout=shutdown_timeout)
        self.limits = limits
        self._screen = screen
        self._connection = connection

    async def _make_server(self) -> web.Server:
        made = await super()._make_server()  # starts the application and freezes it
        return Listener(
            made.request_handler,
            request_factory=made.request_factory,
            limits=self.limits,
            screen=self._screen,
            connection=self._connection,
        )
