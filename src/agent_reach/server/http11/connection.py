"""Client connections (protocol §14): our HTTP/1.1 server, asyncio protocols and llhttp, with
the limits below and every error in the shape of the path's API.

A `Connection` (what it reads: `reading.Reading`; what it writes: `writing.Writing`) answers
requests one at a time in the order they came (pipelined ones wait, and past `_PIPELINE`
waiting the socket is not read), keeps the connection alive between them (HTTP/1.1; an
HTTP/1.0 client's is closed after its answer), hands it to a WebSocket route when one takes
it (`websocket`), and cancels the request being handled, with its upstream, when the client
goes away. The limits kept here:
  - `client_write_timeout_s` while our writes are paused because the client reads nothing
    (`writing`): the connection is dropped, which cancels the handler and, with it, the
    upstream request;
  - `max_connections` open at once (clamped to the descriptors there are, `descriptors`): the
    next one closes the connection idle the longest (`Server.idle`: waiting for its first byte
    or between requests), or, when every one has a request under way, is answered 503 and
    closed; one log line per episode of either.
An answer sent before its request's body was read to the end (a 401 or 403 decided on the head,
a 413, a 408) closes the connection: what still comes is read and dropped, never kept, for at
most `writing.LINGER_S`, so that the client reads the answer and a refused client holds no
slot.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections import OrderedDict
from typing import TYPE_CHECKING, NamedTuple, Protocol

from ...config import ServerConfig
from ...core.errors import escaped
from ...net.outbox import Outbox
from .descriptors import evictions, refusals
from .heads import PendingHeads
from .reading import Problem, Reading
from .websocket import Limits as WebSocketLimits
from .websocket import Switch, WebSocket, handshake
from .wire import ENDED, App, PayloadError, Request, Response, StreamResponse
from .writing import Writing, keeps_alive, response_head

if TYPE_CHECKING:
    from collections.abc import Callable

_log = logging.getLogger("agent_reach.server")


class AccessHook(Protocol):
    """What writes the access line of each request (the app's access log)."""

    @property
    def enabled(self) -> bool: ...

    def log(self, request: Request, status: int, time: float) -> None: ...


_PIPELINE = 8  # requests waiting on one connection before it is not read any more
ENDING_S = 1.0  # what the answers ended at the shutdown timeout get to be written
CLIENT_LEFT = 499  # the access line's status of a request whose client closed its connection


class Connection(Writing):
    """One client connection."""

    _server: Server

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
        server.answering += 1
        try:
            return await self._answer_request(request)
        finally:
            server.answering -= 1

    async def _answer_request(self, request: Request) -> bool:
        server = self._server
        start = self._loop.time()
        try:
            response = server.screen(request) or await server.app.handle(request)
            if isinstance(response, Switch):  # a WebSocket route: the connection is its now
                await self._switch(request, response)
                if server.access is not None and server.access.enabled:
                    server.access.log(request, 101, self._loop.time() - start)
                return False
        except asyncio.CancelledError:
            if not (self.ending and not request.responded and not self._dead):
                self._log_broken(request, start)
                raise
            response = self._ended(request)  # cancelled at the shutdown timeout, before a head
        except BaseException:
            self._log_broken(request, start)
            raise
        content = request.content
        close = (
            response.closing
            or (self._dead and not self._queue)  # what follows, if anything, is a `Problem`
            or server.closing
            or not keeps_alive(request)
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
            head = response_head(
                request.version, response, f"Content-Length: {len(body)}\r\n", close
            )
            self._outbox.write(transport, head if request.method == "HEAD" else head + body)
        if server.access is not None and server.access.enabled:
            server.access.log(request, response.status, self._loop.time() - start)
        if close:
            self.close(linger=content is not None and not content.is_eof())
        return not close

    def _log_broken(self, request: Request, start: float) -> None:
        """The access line of a request whose client left (499, as nginx writes it), or whose
        answer broke; a WebSocket's says 101 however it ended, as nginx's does."""
        server = self._server
        if server.access is not None and server.access.enabled:
            status = CLIENT_LEFT if self._dead else 200 if request.responded else 500
            if self._ws is not None:
                status = 101
            server.access.log(request, status, self._loop.time() - start)

    def _ended(self, request: Request) -> Response:
        """The 503 of a request the shutdown timeout ended before its answer began."""
        body = self._server.error_body(request.path, 503, ENDED)
        response = Response(status=503, body=body, content_type="application/json")
        response.headers["Retry-After"] = "1"
        return response

    def drain(self) -> None:
        """The server began to close: a WebSocket closes once its session is idle (a request
        under way finishes as it is)."""
        if self._ws is not None:
            self._ws.drain()

    def end(self) -> None:
        """The shutdown timeout is over: a WebSocket is closed 1001, a request's handler is
        cancelled (a stream ends as its API says; an answer not begun is a 503)."""
        if self._ws is not None:
            self._ws.going_away()
        elif self._task is not None:
            self._task.cancel()

    async def _switch(self, request: Request, switch: Switch) -> None:
        """Hand the connection to a WebSocket route: the 101, then its session, until it
        returns (the connection closes after it); then what waits for its end."""
        try:
            transport = self.transport
            if transport is None or transport.is_closing():
                raise ConnectionResetError("the client went away")
            self._outbox.write(transport, handshake(switch.accept))
            request.responded = True
            limits = self._limits
            wl = WebSocketLimits(
                limits.websocket_max_message_bytes, limits.websocket_idle_s, limits.websocket_max_s
            )
            ws = WebSocket(transport, self._outbox, wl, self._writable, switch.farewell)
            self._ws = ws
            if self._upgraded:
                ws.feed(self._upgraded)
                self._upgraded = b""
            try:
                await switch.session(ws, request)
            finally:
                await ws.close()
        finally:
            for ended in switch.ended:
                ended()

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
        server.heads.end(self)
        if self._over:
            server.refusing -= 1


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
        self.connections: set[Reading] = set()  # admitted, and those being refused
        self.error_body = error_body  # in the shape of the path's API (the app knows it)
        self.refusing = 0  # of them, those being refused
        # Admitted connections that wait for a request (a new one for its first), in the order
        # they began to: an ordered dict, so that taking the oldest or any one out is O(1).
        self.idle: OrderedDict[Reading, None] = OrderedDict()
        self.refusals = refusals(_log, limits.max_connections)
        self.evictions = evictions(_log, limits.max_connections)
        self.heads: PendingHeads[Reading] = PendingHeads(
            _log, limits.max_connections, limits.max_pending_heads_per_ip
        )
        self.outbox = Outbox()
        self.requests_count = 0
        self.answering = 0  # requests being answered now (a WebSocket session is one)
        self.closing = False  # not listening any more: each connection closes after its answer
        self.ending = False  # the shutdown timeout is over: what is left is ended (`end`)
        self._listening: list[asyncio.Server] = []

    def __call__(self) -> Connection:
        return Connection(self)

    def admit(self, conn: Reading) -> bool:
        """Whether a new connection is served: there is room under `max_connections`, or the
        connection idle the longest is closed to make room (a silent socket, or a client's
        keep-alive one, which the client opens again), or else the one whose head began first,
        if that was `heads.GRACE_S` ago; else it is refused, as every one has a request under
        way (or a head arriving since less than that)."""
        self.connections.add(conn)
        if len(self.connections) - self.refusing <= self.limits.max_connections:
            self.evictions.calm()
            self.heads.calm()
        elif self.idle:
            oldest, _ = self.idle.popitem(last=False)
            self.connections.discard(oldest)
            oldest.close()
            self.evictions.happened()
        elif (slow := self.heads.evict(asyncio.get_running_loop().time())) is not None:
            self.connections.discard(slow)
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

    @property
    def finished(self) -> int:
        """Requests answered so far."""
        return self.requests_count - self.answering

    async def close(
        self, shutdown_s: float, hurry: asyncio.Event | None = None, since: int | None = None
    ) -> Closed:
        """Stop listening, close idle connections, give requests in flight `shutdown_s` to
        finish (their connections close after them; `hurry`, when set, ends the wait), end
        what is left (`Connection.end`), give that `ENDING_S` to be written, drop what still
        is, and clean up. How many requests finished since `since` (a `finished`; by default
        now), and how many were ended."""
        self.closing = True
        for listening in self._listening:
            listening.close()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + shutdown_s
        finished = self.finished if since is None else since
        for conn in list(self.connections):
            if conn.idle:
                conn.close()
            else:
                conn.drain()
        while any(not c.idle for c in self.connections) and loop.time() < deadline:
            if hurry is not None and hurry.is_set():
                break
            await asyncio.sleep(0.05)
        closed = Closed(self.finished - finished, self.answering)
        if self.connections:
            self.ending = True
            for conn in list(self.connections):
                conn.end()
            until = loop.time() + ENDING_S
            while self.connections and loop.time() < until:
                await asyncio.sleep(0.02)
        for conn in list(self.connections):
            if conn.transport is not None:
                conn.transport.abort()
        await asyncio.sleep(0)
        for hook in self.app.on_cleanup:
            await hook(self.app)
        return closed


class Closed(NamedTuple):
    """How a server's close went: requests that finished while it waited, and requests still
    under way at its end, which it ended."""

    drained: int
    ended: int
