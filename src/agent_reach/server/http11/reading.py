"""What a client sends, read (protocol §14): llhttp (`httptools`) parses it into `wire.Request`s
as it arrives, within the limits on a request's head, and a connection begins and waits.

`Reading` is the receiving half of a `connection.Connection`, which answers what it reads.
What llhttp cannot parse (a bad chunk size, an 8 KB URL, 200 headers, a NUL or a bare CR in a
header, an HTTP/2 preface, Content-Length with Transfer-Encoding) becomes a `Problem`, answered
in its turn in the error shape of the API that the request line's path belongs to. The limits
read here:
  - `max_head_bytes` for the request line and headers together, counted as they arrive (an
    unfinished head too, whose lines llhttp would otherwise gather without end): else 431;
  - `request_timeout_s` from a request's first byte until its head is complete: else 408 and
    closed (the guard times the body against the same start, `Request.started`). A head is
    timed only while no request is queued or handled: bytes that arrive meanwhile are the next
    request, timed once it is the one waited for, and nothing is written by this timer once a
    request is under way;
  - `first_byte_timeout_s` for a new connection's first byte: else closed, without a word;
  - `keepalive_timeout_s` for an idle connection, new or between requests: then closed;
  - `max_connections` open at once: the server's `admit` decides (`connection.Server`).
"""

from __future__ import annotations

import asyncio
import logging
import re
import socket
from collections import deque
from typing import TYPE_CHECKING, NamedTuple, Protocol, cast

import httptools
from multidict import CIMultiDict

from ...config import ServerConfig
from ...core.errors import escaped
from ...net.outbox import Outbox
from .websocket import WebSocket
from .wire import App, Body, PayloadError, Request, StreamResponse

if TYPE_CHECKING:
    from collections import OrderedDict
    from collections.abc import Callable

    from .heads import PendingHeads

_log = logging.getLogger("agent_reach.server")
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


class Host(Protocol):
    """What a connection needs of the server that made it."""

    app: App
    limits: ServerConfig
    outbox: Outbox
    refusing: int
    ending: bool
    error_body: Callable[[str, int, str], bytes]  # in the shape of the path's API

    @property
    def idle(self) -> OrderedDict[Reading, None]: ...

    @property
    def heads(self) -> PendingHeads[Reading]: ...

    def admit(self, conn: Reading) -> bool: ...


class Reading(asyncio.Protocol):
    """The receiving half of one client connection; `connection.Connection` answers."""

    def __init__(self, server: Host) -> None:
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
            elif not self._server.heads.begin(self, self._remote, self._begun):
                limit = self._limits.max_pending_heads_per_ip
                message = f"over {limit} unfinished requests from this address"
                self._answer(429, f"{message} (server.max_pending_heads_per_ip)", self._sniffed())

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
        self._server.heads.end(self)
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

    def _rest(self) -> None:
        """Wait for a request (a new connection: its first): closed after
        `keepalive_timeout_s`, or sooner for a new connection at the cap (`Server.admit`)."""
        self._idle = self._loop.call_later(self._limits.keepalive_timeout_s, self.close)
        self._server.idle[self] = None

    @property
    def idle(self) -> bool:
        """Whether no request is being handled."""
        return self._task is None

    @property
    def ending(self) -> bool:
        """The server's shutdown timeout is over (`wire.Writer.ending`)."""
        return self._server.ending

    # -- what the answering half does ---------------------------------------------------------

    def _enqueue(self, item: Request | Problem) -> None:
        raise NotImplementedError

    def end(self) -> None:
        raise NotImplementedError

    def drain(self) -> None:
        raise NotImplementedError

    def _answer(self, status: int, message: str, path: str, *, logged: bool = False) -> None:
        raise NotImplementedError

    def close(self, *, linger: bool = False) -> None:
        raise NotImplementedError

    def start_stream(self, request: Request, response: StreamResponse) -> None:
        raise NotImplementedError

    async def send_piece(self, data: bytes) -> None:
        raise NotImplementedError
