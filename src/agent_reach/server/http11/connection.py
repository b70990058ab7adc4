"""Client connections (protocol §14): our HTTP/1.1 server, asyncio protocols and llhttp
(`httptools`), with the limits below and every error in the shape of the path's API.

A `Connection` parses what a client sends into `wire.Request`s, answers them one at a time in
the order they came (pipelined ones wait, and past `_PIPELINE` waiting the socket is not read),
keeps the connection alive between them (HTTP/1.1; an HTTP/1.0 client's is closed after its
answer) and cancels the request being handled, with its upstream, when the client goes away.
What llhttp cannot parse (a bad chunk size, an 8 KB URL, 200 headers, a NUL or a bare CR in a
header, an HTTP/2 preface, Content-Length with Transfer-Encoding) is answered in its turn, in
the error shape of the API that the request line's path belongs to, with one log line, and
the connection closed (after `LINGER_S`, below). The limits:
  - `max_head_bytes` for the request line and headers together, counted as they arrive (an
    unfinished head too, whose lines llhttp would otherwise gather without end): else 431;
  - `request_timeout_s` from a request's first byte until its head is complete: else 408 and
    closed (the guard times the body against the same start, `Request.started`). A head is
    timed only while no request is queued or handled: bytes that arrive meanwhile are the next
    request, timed once it is the one waited for, and nothing is written by this timer once a
    request is under way;
  - `client_write_timeout_s` while our writes are paused because the client reads nothing
    (its socket buffers are full): the connection is dropped, which cancels the handler and,
    with it, the upstream request;
  - `first_byte_timeout_s` for a new connection's first byte: else closed, without a word;
  - `keepalive_timeout_s` for an idle connection, new or between requests: then closed;
  - `max_connections` open at once (clamped to the descriptors there are, `descriptors`): the
    next one closes the connection idle the longest (`Server.idle`: waiting for its first byte
    or between requests), or, when every one has a request under way, is answered 503 and
    closed; one log line per episode of either.
An answer sent before its request's body was read to the end (a 401 or 403 decided on the head,
a 413, a 408) closes the connection: what still comes is read and dropped, never kept, for at
most `LINGER_S`, so that the client reads the answer and a refused client holds no slot.
"""

from __future__ import annotations

import asyncio
import logging
import re
import socket
from collections import OrderedDict, deque
from http import HTTPStatus
from typing import TYPE_CHECKING, NamedTuple, Protocol, cast

import httptools
from multidict import CIMultiDict

from ...config import ServerConfig
from ...core.errors import escaped
from ...net.outbox import Outbox
from .descriptors import evictions, refusals
from .websocket import Limits as WebSocketLimits
from .websocket import Switch, WebSocket, handshake
from .wire import App, Body, PayloadError, Request, Response, StreamResponse

if TYPE_CHECKING:
    from collections.abc import Callable

_log = logging.getLogger("agent_reach.server")


class AccessHook(Protocol):
    """What writes the access line of each request (the app's access log)."""

    @property
    def enabled(self) -> bool: ...

    def log(self, request: Request, status: int, time: float) -> None: ...


# What a client that reads nothing can make us hold (protocol §14): its socket's send buffer (the
# kernel doubles it: 128 KB, still 1.2 MB/s at 100 ms, far above any token rate) and what we
# queue on top before our writes pause, which is also when `client_write_timeout_s` starts.
_SEND_BUFFER = 2**16
_WRITE_BUFFER = 2**14
_SNIFF = 512  # bytes of a request's start kept to tell its path when it cannot be parsed
_PATH = re.compile(rb"[!-~]{1,20} (/[^ \r\n?#]*)")
# Refused connections that may wait (up to 1 s) for their request line, to be answered in its
# API's shape; any more are answered at once, so that refusing holds few descriptors.
_REFUSED_WAITING = 32
MAX_LINE = 8190  # the request line, or one header line, may not be longer (aiohttp's limits)
MAX_HEADERS = 128
_PIPELINE = 8  # requests waiting on one connection before it is not read any more
LINGER_S = 1.0
CLIENT_LEFT = 499  # the access line's status of a request whose client closed its connection
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_TOO_LONG = "a line of the request head is too long"


def path_of(head: bytes) -> str:
    """The path of a request line at the start of `head`, or `/` when there is none."""
    match = _PATH.match(head)
    return match[1].decode("latin-1") if match else "/"


class Problem(NamedTuple):
    """A request that could not be parsed: answered in its turn, then the connection closes."""

    status: int
    message: str
    path: str


_PHRASES = {s.value: s.phrase for s in HTTPStatus}


def _reason(status: int) -> str:
    return _PHRASES.get(status, "")


class Connection(asyncio.Protocol):
    """One client connection."""

    def __init__(self, server: Server) -> None:
        self._server = server
        self._limits = server.limits
        self._outbox = server.outbox  # every byte to the client goes through it
        self._loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self._parser = httptools.HttpRequestParser(self)
        self._url = b""
        self._headers: CIMultiDict[str] = CIMultiDict()
        self._problem: str | None = None  # why a callback stopped the parser
        self._parsing: Request | None = None  # the request whose body is arriving
        self._in_head = False  # a head has begun and is not complete
        self._begun = 0.0  # loop time of its first byte
        self._head_size = 0  # its header lines parsed so far, in bytes
        self._head_bytes = 0  # bytes received while it is unfinished (at least)
        self._begins = 0  # requests begun in the bytes being parsed
        self._oversize = False  # the head grew past max_head_bytes
        self._queue: deque[Request | Problem] = deque()
        self._task: asyncio.Task[None] | None = None
        self._dead = False  # nothing more is parsed: answer what is queued, then close
        self._reading = True
        self._over = False  # opened past max_connections: answered 503
        self._head = b""  # the start of the head being received
        self._paused = False
        self._drained: asyncio.Future[None] | None = None
        self._chunked = False  # the stream under way is written in chunks
        self._timer: asyncio.TimerHandle | None = None  # the head's request_timeout_s
        self._stall: asyncio.TimerHandle | None = None  # client_write_timeout_s
        self._first: asyncio.TimerHandle | None = None  # first_byte_timeout_s
        self._idle: asyncio.TimerHandle | None = None  # keepalive_timeout_s
        self._remote: str | None = None
        self._upgraded = b""  # what came after an Upgrade request's head
        self._ws: WebSocket | None = None

    # -- receiving ---------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport = cast(asyncio.Transport, transport)  # uvloop's is no subclass
        transport.set_write_buffer_limits(high=_WRITE_BUFFER)  # pause (and time) slow readers
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, _SEND_BUFFER)
        peer = transport.get_extra_info("peername")
        self._remote = str(peer[0]) if isinstance(peer, tuple) else None
        server = self._server
        if server.admit(self):
            self._first = self._loop.call_later(self._limits.first_byte_timeout_s, self.close)
            self._rest()
            return
        self._over = True
        if server.refusing > _REFUSED_WAITING:
            self._refuse()
        else:  # answered once its request line tells the path, or in 1 s
            self._start_timer(min(1.0, self._limits.request_timeout_s))

    def data_received(self, data: bytes) -> None:
        if self._ws is not None:  # the connection is a WebSocket's now
            self._ws.feed(data)
            return
        if self._first is not None:
            self._first.cancel()
            self._first = None
        if self._over:
            self._head += data[: _SNIFF - len(self._head)]
            if b"\n" in self._head:
                self._refuse()
            return
        if self._dead:  # lingering, or past what could be parsed
            return
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None
            self._server.idle.pop(self, None)
        carried = self._in_head  # these bytes go on with a head
        starts = not carried and self._parsing is None  # or they begin one
        if starts:
            self._head = data[:_SNIFF]
            if self._waiting() and self._timer is None:
                self._start_timer(self._limits.request_timeout_s)
        elif carried and len(self._head) < _SNIFF:
            self._head += data[: _SNIFF - len(self._head)]
        self._begins = 0
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade as exc:  # CONNECT, or an Upgrade: nothing more parsed
            self._dead = True  # answered, then closed, but by a route that takes a WebSocket
            self._upgraded = data[exc.args[0] :] if exc.args else b""
        except httptools.HttpParserError as exc:
            self._malformed(exc)
        if self._in_head and not self._dead:  # a head, still unfinished
            if self._begins == 0 if carried else starts and self._begins == 1:
                self._head_bytes += len(data)  # all of them are its (else: its lines count)
            lines = self._head_size + len(self._url)
            if max(self._head_bytes, lines) > self._limits.max_head_bytes:
                self._dead = True
                self._enqueue(self._too_large())

    def _waiting(self) -> bool:
        """Whether the connection waits for a request: none is queued or being handled."""
        return self._task is None and not self._queue

    def eof_received(self) -> bool:
        if self._parsing is not None and self._parsing.content is not None:
            self._parsing.content.fail(PayloadError("the client closed before the body ended"))
        self._dead = True
        # A client that closes its side is gone (no half-closed connection is kept): what is
        # under way is cancelled now, and with it its upstream request, not when a write to
        # it fails (a stalled stream would hold the provider until its read timeout).
        return False

    def _start_timer(self, seconds: float) -> None:
        self._begun = self._loop.time()
        self._timer = self._loop.call_at(self._begun + seconds, self._late)

    def _late(self) -> None:
        self._timer = None
        if self._over:
            self._refuse()
        elif self._waiting() and not self._dead:
            seconds = f"{self._limits.request_timeout_s:g}"
            message = f"the request was not received within {seconds} s"
            self._answer(408, f"{message} (server.request_timeout_s)", self._sniffed(), logged=True)

    def _refuse(self) -> None:
        limit = self._limits.max_connections
        message = f"over {limit} open connections (server.max_connections)"
        self._answer(503, message, path_of(self._head))  # `Refusals` logs the episode

    def _sniffed(self) -> str:
        if self._url:
            return self._url.decode("latin-1").partition("?")[0]
        return path_of(self._head)

    # -- llhttp's callbacks --------------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._in_head = True
        self._begins += 1
        self._head_size = self._head_bytes = 0
        self._url = b""
        self._headers = CIMultiDict()
        if self._timer is None:
            self._begun = self._loop.time()

    def on_url(self, url: bytes) -> None:
        self._url += url
        if len(self._url) > MAX_LINE:
            self._problem = _TOO_LONG
            raise ValueError(_TOO_LONG)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head_size += len(name) + len(value) + 4  # and ": ", CRLF
        if len(name) + len(value) > MAX_LINE:
            self._problem = _TOO_LONG
        elif len(self._headers) >= MAX_HEADERS:
            self._problem = f"more than {MAX_HEADERS} headers"
        elif self._head_size + len(self._url) > self._limits.max_head_bytes:
            self._oversize = True
            raise ValueError("request head too large")
        if self._problem is not None:
            raise ValueError(self._problem)
        value = value.strip(b" \t")  # the whitespace around a value is not part of it
        self._headers.add(name.decode("latin-1"), value.decode("utf-8", "surrogateescape"))

    def on_headers_complete(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._in_head = False
        parser = self._parser
        headers = self._headers
        request = Request(
            parser.get_method().decode("latin-1"),
            self._url.decode("utf-8", "surrogateescape"),
            parser.get_http_version(),
            headers,
            app=self._server.app,
            connection=self,
            remote=self._remote,
            started=self._begun,
        )
        if "Transfer-Encoding" in headers or headers.get("Content-Length", "0") != "0":
            encodings = headers.getall("Content-Encoding", ())
            expects = headers.get("Expect", "").lower() == "100-continue"
            request.content = Body(
                self._limits.max_body_bytes,
                encodings[0] if len(encodings) == 1 else None,
                self._continue if expects else None,
            )
            self._parsing = request
        self._enqueue(request)

    def on_body(self, body: bytes) -> None:
        if self._parsing is not None and self._parsing.content is not None:
            self._parsing.content.feed(body)

    def on_message_complete(self) -> None:
        if self._parsing is not None and self._parsing.content is not None:
            self._parsing.content.finish()
        self._parsing = None

    def _malformed(self, exc: httptools.HttpParserError) -> None:
        self._dead = True
        parsing = self._parsing
        if parsing is not None and parsing.content is not None and not self._in_head:
            parsing.content.fail(PayloadError("malformed chunked body"))  # the guard's 400
            return
        if self._oversize:
            self._enqueue(self._too_large())
        else:
            self._enqueue(Problem(400, self._message(exc), self._sniffed()))

    def _too_large(self) -> Problem:
        limit = self._limits.max_head_bytes
        message = f"the request head is over {limit} bytes (server.max_head_bytes)"
        return Problem(431, message, self._sniffed())

    def _message(self, exc: httptools.HttpParserError) -> str:
        if self._head.startswith(b"PRI * HTTP/2"):
            return "HTTP/2 is not supported: speak HTTP/1.1"
        reason = self._problem or str(exc).split(":", 1)[0].strip()
        return f"malformed HTTP request: {escaped(reason, 100)}"

    def _continue(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self._outbox.write(self.transport, _CONTINUE)

    # -- answering -----------------------------------------------------------------------------

    def _enqueue(self, item: Request | Problem) -> None:
        self._queue.append(item)
        if len(self._queue) >= _PIPELINE and self._reading and self.transport is not None:
            self._reading = False
            self.transport.pause_reading()
        if self._task is None:
            self._task = self._loop.create_task(self._serve())

    async def _serve(self) -> None:
        try:
            while self._queue:
                item = self._queue.popleft()
                if not self._reading and self.transport is not None:
                    self._reading = True
                    self.transport.resume_reading()
                if isinstance(item, Problem):  # the rest of what it sent is not read: linger
                    self._answer(item.status, item.message, item.path, logged=True, linger=True)
                    return
                if self._paused:
                    await self._drain()
                try:
                    if not await self._respond(item):
                        return
                except Exception as exc:  # after its answer began: the client sees it cut
                    if not isinstance(exc, ConnectionError):
                        message = "%s %s failed after its answer began"
                        _log.error(message, item.method, escaped(item.path, 200), exc_info=exc)
                    if self.transport is not None:
                        self.transport.abort()
                    return
        finally:
            self._task = None
        if self._dead or self._server.closing:
            self.close()
        elif not self._in_head:
            self._rest()
        elif self._timer is None:  # a head began while the last request was handled
            self._start_timer(self._limits.request_timeout_s)

    async def _respond(self, request: Request) -> bool:
        """Answer `request`; whether the connection stays open for the next."""
        server = self._server
        server.requests_count += 1
        start = self._loop.time()
        try:
            response = server.screen(request) or await server.app.handle(request)
            if isinstance(response, Switch):  # a WebSocket route: the connection is its now
                await self._switch(request, response)
                if server.access is not None and server.access.enabled:
                    server.access.log(request, 101, self._loop.time() - start)
                return False
        except BaseException:  # the client left (499, as nginx writes it), or the answer broke
            if server.access is not None and server.access.enabled:
                status = CLIENT_LEFT if self._dead else 200 if request.responded else 500
                server.access.log(request, status, self._loop.time() - start)
            raise
        content = request.content
        close = (
            response.closing
            or (self._dead and not self._queue)  # what follows, if anything, is a `Problem`
            or server.closing
            or not _keeps_alive(request)
            or (content is not None and not content.is_eof())  # its body unread: never read
        )
        transport = self.transport
        if transport is None or transport.is_closing():  # the client left before the end
            if server.access is not None and server.access.enabled:
                server.access.log(request, CLIENT_LEFT, self._loop.time() - start)
            return False
        if request.responded:  # a stream: its end
            if self._chunked and request.method != "HEAD":
                self._outbox.hold(transport, b"0\r\n\r\n")
            close = close or not self._chunked
        else:
            body = response.body if isinstance(response, Response) else b""
            head = _head(request.version, response, f"Content-Length: {len(body)}\r\n", close)
            self._outbox.write(transport, head if request.method == "HEAD" else head + body)
        if server.access is not None and server.access.enabled:
            server.access.log(request, response.status, self._loop.time() - start)
        if close:
            self.close(linger=content is not None and not content.is_eof())
        return not close

    async def _switch(self, request: Request, switch: Switch) -> None:
        """Hand the connection to a WebSocket route: the 101, then its session, until it
        returns (the connection closes after it)."""
        transport = self.transport
        if transport is None or transport.is_closing():
            raise ConnectionResetError("the client went away")
        self._outbox.write(transport, handshake(switch.accept))
        request.responded = True
        limits = self._limits
        wl = WebSocketLimits(limits.max_body_bytes, limits.websocket_idle_s, limits.websocket_max_s)
        ws = self._ws = WebSocket(transport, self._outbox, wl, self._writable)
        if self._upgraded:
            ws.feed(self._upgraded)
            self._upgraded = b""
        try:
            await switch.session(ws, request)
        finally:
            await ws.close()

    async def _writable(self) -> None:
        """Wait while the client reads nothing of what was written to it."""
        if self._paused:
            await self._drain()

    def start_stream(self, request: Request, response: StreamResponse) -> None:
        """Write a stream's head (chunked, to an HTTP/1.1 client)."""
        transport = self.transport
        if transport is None or transport.is_closing():
            raise ConnectionResetError("the client went away")
        self._chunked = request.version == "1.1"
        framing = "Transfer-Encoding: chunked\r\n" if self._chunked else ""
        close = response.closing or not self._chunked or not _keeps_alive(request)
        self._outbox.hold(transport, _head(request.version, response, framing, close))
        request.responded = True

    async def send_piece(self, data: bytes) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            raise ConnectionResetError("the client went away")
        if self._chunked:
            self._outbox.hold(transport, b"%x\r\n%s\r\n" % (len(data), data))
        else:
            self._outbox.hold(transport, data)
        if self._paused:
            await self._drain()

    def _answer(
        self, status: int, message: str, path: str, *, logged: bool = False, linger: bool = False
    ) -> None:
        """Answer `status` outside any request (its head is incomplete or unparsable) and
        close (with `linger`, as `close` says)."""
        transport = self.transport
        if transport is None:
            return
        if logged:
            _log.warning("%d to %s: %s", status, self._peer(), message)
        body = self._server.error_body(path, status, message)
        head = (
            f"HTTP/1.1 {status} {_reason(status)}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n"
            "X-Content-Type-Options: nosniff\r\n\r\n"
        )
        self._outbox.write(transport, head.encode() + body)
        self.close(linger=linger)

    def _rest(self) -> None:
        """Wait for a request (a new connection: its first): closed after
        `keepalive_timeout_s`, or sooner for a new connection at the cap (`Server.admit`)."""
        self._idle = self._loop.call_later(self._limits.keepalive_timeout_s, self.close)
        self._server.idle[self] = None

    def close(self, *, linger: bool = False) -> None:
        """Close; with `linger`, after the client has read our answer (its half-close, or
        `LINGER_S`), reading and dropping what it still sends."""
        self._server.idle.pop(self, None)
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        self._dead = True
        self._outbox.flush()
        if linger and transport.can_write_eof():
            transport.write_eof()
            self._loop.call_later(LINGER_S, transport.close)
        else:
            transport.close()

    def _peer(self) -> str:
        return self._remote or "a client"

    # -- sending -------------------------------------------------------------------------------

    def pause_writing(self) -> None:
        self._paused = True
        self._stall = self._loop.call_later(self._limits.client_write_timeout_s, self._stalled)

    def resume_writing(self) -> None:
        self._paused = False
        if self._stall is not None:
            self._stall.cancel()
            self._stall = None
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)
        self._drained = None

    async def _drain(self) -> None:
        if self._drained is None:
            self._drained = self._loop.create_future()
        await self._drained

    def _stalled(self) -> None:
        self._stall = None
        transport = self.transport
        if transport is not None:
            seconds = f"{self._limits.client_write_timeout_s:g}"
            _log.warning(
                "dropped %s: it read nothing for %s s (server.client_write_timeout_s)",
                self._peer(),
                seconds,
            )
            transport.abort()  # closing would wait for the buffer to drain, which it won't

    def connection_lost(self, exc: BaseException | None) -> None:
        for timer in (self._timer, self._stall, self._first, self._idle):
            if timer is not None:
                timer.cancel()
        self._timer = self._stall = self._first = self._idle = None
        self._dead = True
        if self._ws is not None:
            self._ws.lost()
        if self._parsing is not None and self._parsing.content is not None:
            self._parsing.content.fail(PayloadError("the client went away"))
        if self._drained is not None and not self._drained.done():
            self._drained.set_exception(ConnectionResetError("the client went away"))
        if self._task is not None:
            self._task.cancel()  # the handler, and with it its upstream request
        server = self._server
        server.connections.discard(self)
        server.idle.pop(self, None)
        if self._over:
            server.refusing -= 1

    @property
    def idle(self) -> bool:
        return self._task is None


def _keeps_alive(request: Request) -> bool:
    """HTTP/1.1 unless the client said `Connection: close`; HTTP/1.0 never."""
    return request.version == "1.1" and "close" not in request.headers.get("Connection", "").lower()


def _head(version: str, response: StreamResponse, framing: str, close: bool) -> bytes:
    lines = [f"HTTP/{version} {response.status} {_reason(response.status)}\r\n"]
    lines.extend(f"{name}: {value}\r\n" for name, value in response.headers.items())
    lines.append(framing)
    if close:
        lines.append("Connection: close\r\n")
    lines.append("X-Content-Type-Options: nosniff\r\n\r\n")
    return "".join(lines).encode("utf-8", "surrogateescape")


class Server:
    """The protocol factory of every listening socket: makes `Connection`s, counts them (and
    keeps the idle ones in order, the longest idle first), and runs `screen` on each request
    before the app (and before its body's `100 Continue`)."""

    def __init__(
        self,
        app: App,
        *,
        limits: ServerConfig,
        screen: Callable[[Request], StreamResponse | None],
        access: AccessHook | None,
        error_body: Callable[[str, int, str], bytes],
    ) -> None:
        self.app = app
        self.limits = limits
        self.screen = screen
        self.access = access
        self.connections: set[Connection] = set()  # admitted, and those being refused
        self.error_body = error_body  # in the shape of the path's API (the app knows it)
        self.refusing = 0  # of them, those being refused
        # Admitted connections that wait for a request (a new one for its first), in the order
        # they began to: an ordered dict, so that taking the oldest or any one out is O(1).
        self.idle: OrderedDict[Connection, None] = OrderedDict()
        self.refusals = refusals(_log, limits.max_connections)
        self.evictions = evictions(_log, limits.max_connections)
        self.outbox = Outbox()
        self.requests_count = 0
        self.closing = False
        self._listening: list[asyncio.Server] = []

    def __call__(self) -> Connection:
        return Connection(self)

    def admit(self, conn: Connection) -> bool:
        """Whether a new connection is served: there is room under `max_connections`, or the
        connection idle the longest is closed to make room (a silent socket, or a client's
        keep-alive one, which the client opens again); else it is refused, as every one has a
        request under way (or a head arriving, which `request_timeout_s` bounds)."""
        self.connections.add(conn)
        if len(self.connections) - self.refusing <= self.limits.max_connections:
            self.evictions.calm()
        elif self.idle:
            oldest, _ = self.idle.popitem(last=False)
            self.connections.discard(oldest)
            oldest.close()
            self.evictions.happened()
        else:
            self.refusing += 1
            self.refusals.happened()
            return False
        self.refusals.calm()
        return True

    async def start(
        self, host: str, port: int, *, reuse_port: bool = False, backlog: int = 100
    ) -> None:
        for hook in self.app.on_startup:
            await hook(self.app)
        listening = await asyncio.get_running_loop().create_server(
            self, host, port, reuse_port=reuse_port or None, backlog=backlog
        )
        self._listening.append(listening)

    @property
    def sockets(self) -> list[socket.socket]:
        return [s for listening in self._listening for s in listening.sockets]

    @property
    def addresses(self) -> list[tuple[str, int]]:
        return [s.getsockname()[:2] for s in self.sockets]

    async def close(self, shutdown_s: float) -> None:
        """Stop listening, close idle connections, give requests in flight `shutdown_s` to
        finish (their connections close after them), drop what is left, and clean up."""
        self.closing = True
        for listening in self._listening:
            listening.close()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + shutdown_s
        for conn in list(self.connections):
            if conn.idle:
                conn.close()
        while self.connections and any(not c.idle for c in self.connections):
            if loop.time() >= deadline:
                break
            await asyncio.sleep(0.05)
        for conn in list(self.connections):
            if conn.transport is not None:
                conn.transport.abort()
        await asyncio.sleep(0)
        for hook in self.app.on_cleanup:
            await hook(self.app)
