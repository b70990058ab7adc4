"""What goes to a client (protocol §14): a stream written as it comes (chunked to an HTTP/1.1
client), an answer outside any request (its head unfinished or unparsable), closing (lingering
after an early answer, so that the client reads it), and the pause of a client that reads
nothing, dropped after `client_write_timeout_s`. `Writing` is the sending half of a
`connection.Connection`, as `reading.Reading` is the receiving one."""

from __future__ import annotations

import logging
from http import HTTPStatus

from .reading import Reading
from .wire import Request, StreamResponse

_log = logging.getLogger("agent_reach.server")
LINGER_S = 1.0  # what a client may still send after an early answer, read and dropped
_PHRASES = {s.value: s.phrase for s in HTTPStatus}


def reason(status: int) -> str:
    return _PHRASES.get(status, "")


def keeps_alive(request: Request) -> bool:
    """HTTP/1.1 unless the client said `Connection: close`; HTTP/1.0 never."""
    return request.version == "1.1" and "close" not in request.headers.get("Connection", "").lower()


def response_head(version: str, response: StreamResponse, framing: str, close: bool) -> bytes:
    lines = [f"HTTP/{version} {response.status} {reason(response.status)}\r\n"]
    lines.extend(f"{name}: {value}\r\n" for name, value in response.headers.items())
    lines.append(framing)
    if close:
        lines.append("Connection: close\r\n")
    lines.append("X-Content-Type-Options: nosniff\r\n\r\n")
    return "".join(lines).encode("utf-8", "surrogateescape")


class Writing(Reading):
    """The sending half of one client connection."""

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
        close = response.closing or not self._chunked or not keeps_alive(request)
        self._outbox.hold(transport, response_head(request.version, response, framing, close))
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
            f"HTTP/1.1 {status} {reason(status)}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n"
            "X-Content-Type-Options: nosniff\r\n\r\n"
        )
        self._outbox.write(transport, head.encode() + body)
        self.close(linger=linger)

    def close(self, *, linger: bool = False) -> None:
        """Close; with `linger`, after the client has read our answer (its half-close, or
        `LINGER_S`), reading and dropping what it still sends."""
        self._server.idle.pop(self, None)
        self._server.heads.end(self)
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
