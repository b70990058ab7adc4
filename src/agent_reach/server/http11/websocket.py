"""WebSocket (RFC 6455) on our HTTP/1.1 server: a route that asks for it takes the connection
over after `101 Switching Protocols`.

A route made with `route(session)` answers a request that is no WebSocket handshake 426 (or
400 for a broken one), and for one that is, returns a `Switch`: the connection writes the 101
with `Sec-WebSocket-Accept` and hands its socket to a `WebSocket`, which `session` then reads
and writes until it returns (the connection closes after it). Frames are parsed and written by
wsproto (sans-I/O, h11's sibling); the policy is ours, with the limits of any connection: a
message over `max_message_bytes` is closed 1009 (each frame counting `_FRAME_COST` bytes
besides its data, so that a flood of empty fragments is one too), a socket that sends nothing
for `idle_s` and one open for `max_s` are closed 1001 (the latter after the route's `farewell`
message, when it has one: the way its API says so), a frame that is no WebSocket is closed
1002; pings are answered, unless the client has left more than `max_message_bytes` and
`_UNREAD` of our writes unread (pings faster than it reads their pongs): closed 1008; a
reader that falls behind `_BACKLOG` messages stops reading the socket until it catches up. When
the server drains, a socket is closed 1001 as soon as its session is not `busy` answering one.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from wsproto.connection import Connection as Frames
from wsproto.connection import ConnectionState, ConnectionType
from wsproto.events import BytesMessage, CloseConnection, Ping, TextMessage
from wsproto.frame_protocol import CloseReason
from wsproto.utilities import LocalProtocolError, generate_accept_token

from ...core.errors import RequestError
from .wire import Request, StreamResponse, upgrading

if TYPE_CHECKING:
    from ...net.outbox import Outbox

Session = Callable[["WebSocket", Request], Awaitable[None]]
_BACKLOG = 16  # messages received and not yet taken before the socket is not read
_FRAME_COST = 64  # what a frame of a message counts for toward its size, besides its data
_UNREAD = 2**16  # bytes the client may leave unread beyond one message before a ping closes


@dataclass(frozen=True, slots=True)
class Limits:
    """A WebSocket's limits: the largest message, the longest silence, the longest life."""

    max_message_bytes: int
    idle_s: float
    max_s: float


class Switch(StreamResponse):
    """The answer that hands the connection to `session` (status 101, written by the
    connection with the handshake's `accept` token); `farewell`, a text message sent before the
    close once the socket has been open `max_s`; `ended` is called once the session is over (or
    never began), as a request's end is (the guard's in-flight slot is held so)."""

    __slots__ = ("accept", "ended", "farewell", "session")

    def __init__(self, session: Session, accept: str, farewell: str | None = None) -> None:
        super().__init__(status=101)
        self.session = session
        self.accept = accept
        self.farewell = farewell
        self.ended: list[Callable[[], None]] = []


def route(session: Session) -> Callable[[Request], Awaitable[StreamResponse]]:
    """A GET handler that upgrades to a WebSocket run by `session`."""

    async def handler(request: Request) -> StreamResponse:
        return Switch(session, accept_token(request))

    return handler


def accept_token(request: Request) -> str:
    """The `Sec-WebSocket-Accept` of a valid handshake (RFC 6455 §4.2.1); `HTTPError` 426 for a
    request that asks for no WebSocket, 400 for a broken handshake (`RequestError`, answered in
    the shape of the path's API)."""
    headers = request.headers
    if (upgrading(request) or "").lower() != "websocket":
        raise RequestError("this path speaks WebSocket: send Upgrade: websocket", status=426)
    if headers.get("Sec-WebSocket-Version") != "13":
        raise RequestError("Sec-WebSocket-Version must be 13")
    key = headers.get("Sec-WebSocket-Key", "")
    try:
        if len(base64.b64decode(key, validate=True)) != 16:
            raise ValueError(key)
    except (binascii.Error, ValueError):
        raise RequestError("Sec-WebSocket-Key must be 16 bytes in base64") from None
    return generate_accept_token(key.encode()).decode()


def handshake(accept: str) -> bytes:
    """The 101 that switches the connection."""
    return (
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Accept: {accept}\r\n\r\n"
    ).encode()


class WebSocket:
    """One accepted WebSocket: `receive` the next message (text or bytes; None once it is
    closed, by either side), `send` one, `close`. The connection feeds it what arrives
    (`feed`) and tells it when the socket is gone (`lost`)."""

    def __init__(
        self,
        transport: asyncio.Transport,
        outbox: Outbox,
        limits: Limits,
        drained: Callable[[], Awaitable[None]],
        farewell: str | None = None,
    ) -> None:
        self._transport = transport
        self._farewell = farewell
        self._outbox = outbox
        self._limits = limits
        self._drained = drained  # waits while the client reads nothing of what we wrote
        self._frames = Frames(ConnectionType.SERVER)
        self._loop = asyncio.get_running_loop()
        self._messages: deque[str | bytes | None] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._parts: list[str | bytes | bytearray] = []
        self._size = 0
        self._reading = True
        self._draining = False
        self.busy = False  # the session is answering a message (a drain waits for it: `settle`)
        self.close_code: int | None = None  # once closed: the code of the close
        self._idle = self._loop.call_later(limits.idle_s, self._expire, "idle")
        self._life = self._loop.call_later(limits.max_s, self._old)

    # -- the socket's side ------------------------------------------------------------------

    def feed(self, data: bytes) -> None:
        """Bytes that arrived: the messages, pings and close they make."""
        self._idle.cancel()
        self._idle = self._loop.call_later(self._limits.idle_s, self._expire, "idle")
        self._frames.receive_data(data)
        for event in self._frames.events():
            if isinstance(event, TextMessage | BytesMessage):
                self._message(event)
            elif isinstance(event, Ping):
                self._pong(event)
            elif isinstance(event, CloseConnection):
                self._closing(event)
            if self.close_code is not None:
                return

    def lost(self) -> None:
        """The socket closed."""
        self._idle.cancel()
        self._life.cancel()
        if self.close_code is None:
            self.close_code = CloseReason.ABNORMAL_CLOSURE
        self._put(None)

    def _pong(self, ping: Ping) -> None:
        unread = self._transport.get_write_buffer_size()
        if unread > self._limits.max_message_bytes + _UNREAD:
            self._shut(CloseReason.POLICY_VIOLATION, "pings sent faster than their pongs are read")
            return
        self._write(self._frames.send(ping.response()))

    def _message(self, event: TextMessage | BytesMessage) -> None:
        self._size += len(event.data) + _FRAME_COST
        if self._size > self._limits.max_message_bytes + _FRAME_COST:
            limit = self._limits.max_message_bytes
            self._shut(CloseReason.MESSAGE_TOO_BIG, f"a message over {limit} bytes")
            return
        if event.data:
            self._parts.append(event.data)
        if not event.message_finished:
            return
        parts, self._parts, self._size = self._parts, [], 0
        if isinstance(event, TextMessage):
            self._put("".join(p for p in parts if isinstance(p, str)))
        else:
            self._put(b"".join(p for p in parts if not isinstance(p, str)))

    def _closing(self, event: CloseConnection) -> None:
        """The peer's close frame, answered; or a frame wsproto could not parse, closed with
        the code it gives."""
        if self._frames.state is not ConnectionState.REMOTE_CLOSING:
            self._shut(event.code, (event.reason or "")[:120])
            return
        self.close_code = event.code
        self._write(self._frames.send(event.response()))
        self._end()

    def _expire(self, why: str) -> None:
        self._shut(CloseReason.GOING_AWAY, why)

    def _old(self) -> None:
        """Open `max_s`: the route's farewell (if any), then the close."""
        if self._farewell is not None and self.close_code is None:
            with contextlib.suppress(LocalProtocolError):  # the peer's close under way
                self._write(self._frames.send(TextMessage(self._farewell)))
        self._expire("open too long")

    def going_away(self) -> None:
        """Closed 1001 at the server's shutdown timeout; the session's `receive` ends."""
        self._expire("the server is shutting down")

    def drain(self) -> None:
        """The server is shutting down: closed 1001 now unless the session is `busy` (an idle
        socket holds no drain), else once it `settle`s (what it is doing finishes first)."""
        self._draining = True
        if not self.busy:
            self.going_away()

    def settle(self) -> None:
        """The session has answered its message: no longer `busy` (closed now if draining)."""
        self.busy = False
        if self._draining:
            self.going_away()

    def _shut(self, code: int, reason: str) -> None:
        """Close from our side at once (a limit, a broken frame): the close frame, then the
        socket; what the session waits for ends."""
        if self.close_code is None:
            self.close_code = code
            with contextlib.suppress(LocalProtocolError):  # the peer's close crossed ours
                self._write(self._frames.send(CloseConnection(code, reason)))
        self._end()

    def _end(self) -> None:
        self._idle.cancel()
        self._life.cancel()
        self._put(None)
        self._outbox.flush()
        self._transport.close()

    def _put(self, message: str | bytes | None) -> None:
        self._messages.append(message)
        if len(self._messages) >= _BACKLOG and self._reading:
            self._reading = False
            self._transport.pause_reading()
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _write(self, data: bytes) -> None:
        if data and not self._transport.is_closing():
            self._outbox.write(self._transport, data)

    # -- the session's side -----------------------------------------------------------------

    async def receive(self) -> str | bytes | None:
        """The next whole message, or None once the WebSocket is closed."""
        while not self._messages:
            if self.close_code is not None:
                return None
            self._waiter = self._loop.create_future()
            await self._waiter
        message = self._messages.popleft()
        if not self._reading and len(self._messages) < _BACKLOG // 2:
            self._reading = True
            self._transport.resume_reading()
        if message is None:
            self._messages.appendleft(None)  # every later `receive` says closed too
        return message

    async def send(self, message: str | bytes) -> None:
        """One message (text for `str`); waits while the client reads nothing."""
        if self.close_code is not None:
            raise ConnectionResetError("the WebSocket is closed")
        event = TextMessage(message) if isinstance(message, str) else BytesMessage(message)
        self._write(self._frames.send(event))
        await self._drained()

    async def close(self, code: int = CloseReason.NORMAL_CLOSURE, reason: str = "") -> None:
        """Close the WebSocket (and the connection) from the session's side."""
        self._shut(code, reason)
