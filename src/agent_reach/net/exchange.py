"""One pooled connection to an upstream and the response read on it: llhttp parses the head
and body into `Response`, read into one buffer of the client's (`READ_SIZE` at a time),
pausing the socket past `HIGH_WATER` unread (backpressure), with the read timeout armed
while a read is awaited."""

from __future__ import annotations

import asyncio
import errno
import os
import socket
import zlib
from collections.abc import Callable
from typing import Protocol, cast

import httptools

from .failures import DeadlineExceeded, Disconnected, Malformed, ReadTimeout, UpstreamError
from .origins import Origin, Slots

# What one upstream answer may hold in memory while its reader does not take it (protocol
# §14, ≤ 256 KB per unread stream): the socket's receive buffer (the kernel doubles it: a
# 128 KB window, 640 KB/s at 200 ms, above any token rate) and ours: reading pauses past
# HIGH_WATER, and one read takes at most READ_SIZE (into the client's one read buffer; the
# event loop's own reads take all the kernel holds, up to 256 KB: bench/abuse.py measured
# 170 KB per unread stream then, 130 now).
RECEIVE_BUFFER = 2**16
HIGH_WATER = 2**14
READ_SIZE = 2**15
MAX_LINE = 2**20  # one line of a stream (an SSE `data:` line) may not be longer


def media_type(content_type: str | None) -> str:
    """A `Content-Type`'s media type, lowercased, without parameters; none or empty is
    `application/octet-stream` (RFC 9110 §8.3)."""
    if not content_type:
        return "application/octet-stream"
    return content_type.partition(";")[0].strip().lower()


def said(exc: OSError) -> str:
    """A socket error in plain words (`connection refused`, `DNS lookup failed`, …)."""
    if isinstance(exc, socket.gaierror):
        return "DNS lookup failed"
    if isinstance(exc, ConnectionRefusedError) or exc.errno == errno.ECONNREFUSED:
        return "connection refused"
    return os.strerror(exc.errno).lower() if exc.errno else "connection failed"


class UpstreamConnection(asyncio.BufferedProtocol):
    """One connection to an upstream, and the answer being read on it."""

    def __init__(self, loop: asyncio.AbstractEventLoop, scratch: memoryview) -> None:
        self.loop = loop
        self._scratch = scratch
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.closed = False
        self.idle = False  # in the pool, between requests
        self.idle_since = 0.0
        self.slots: Slots | None = None  # its origin's, taken for the exchange under way
        self._timer: asyncio.TimerHandle | None = None
        self._reset()

    def _reset(self) -> None:  # a pooled connection's timer went when it was given back
        self.status = 0
        self.headers: dict[str, str] = {}
        self.head = False  # the head is in
        self.done = False  # the whole message is in
        self.error: UpstreamError | None = None
        self.buffer = bytearray()
        self.paused = False
        self.read_s: float | None = None
        self.deadline: float | None = None  # the loop's time the whole exchange must end by
        self._waited = 0.0  # when the last wait began: the read timeout runs from there
        self.head_only = False
        self.keep_alive = False
        self.whole = False  # read whole: never paused
        self._interim = False
        self._inflate: zlib._Decompress | None = None
        self._waiter: asyncio.Future[None] | None = None

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport = cast(asyncio.Transport, transport)  # uvloop's is no subclass

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._scratch  # the client's: a read is parsed before the next one is made

    def buffer_updated(self, nbytes: int) -> None:
        if self.idle:  # bytes nobody asked for: the connection cannot be trusted with a request
            self.close()
            return
        try:
            self.parser.feed_data(self._scratch[:nbytes])
        except httptools.HttpParserError:
            self._fail(Malformed("malformed HTTP response"))
            return
        except zlib.error:
            self._fail(Malformed("malformed compressed answer"))
            return
        self._wake()

    def eof_received(self) -> bool | None:
        return None  # close: an answer without a length ends here (`connection_lost`)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.head and not self.done and self._until_close():
            self.done = True
            self._flush_inflate()
        elif not self.done and self.error is None:
            if self.head:
                self.error = Disconnected("connection closed mid-answer")
            else:
                self.error = Disconnected("server disconnected")
        self._wake()

    # httptools callbacks

    def on_header(self, name: bytes, value: bytes) -> None:
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        self.headers[key] = f"{self.headers[key]}, {text}" if key in self.headers else text

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if 100 <= status < 200 and status != 101:
            self._interim = True  # 100 Continue and the like: the answer comes after it
            self.headers = {}
            return
        self.status = status
        self.head = True
        self.keep_alive = self.parser.should_keep_alive()  # only valid in a callback
        encoding = self.headers.get("content-encoding", "").strip().lower()
        if encoding in {"gzip", "x-gzip"}:
            self._inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif encoding == "deflate":
            self._inflate = zlib.decompressobj(zlib.MAX_WBITS)
        if self.head_only:
            self.done = True

    def on_body(self, body: bytes) -> None:
        if self.head_only:
            return
        if self._inflate is not None:
            body = self._inflate.decompress(body)
        self.buffer += body
        if len(self.buffer) > HIGH_WATER and not (self.paused or self.whole):
            assert self.transport is not None
            self.paused = True
            self.transport.pause_reading()

    def on_message_complete(self) -> None:
        if self._interim:
            self._interim = False
            return
        self._flush_inflate()
        self.done = True

    # reading

    def _until_close(self) -> bool:
        return "content-length" not in self.headers and "chunked" not in self.headers.get(
            "transfer-encoding", ""
        )

    def _flush_inflate(self) -> None:
        if self._inflate is not None:
            self.buffer += self._inflate.flush()
            self._inflate = None

    def _fail(self, error: UpstreamError) -> None:
        self.error = error
        self._wake()
        self.close()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # One timer per exchange, not one per wait: when it rings early (bytes came and another
    # wait began since), it is set again for the time now due.

    def _due(self) -> float | None:
        read = None if self.read_s is None else self._waited + self.read_s
        if self.deadline is None or (read is not None and read < self.deadline):
            return read
        return self.deadline

    def _arm(self) -> None:
        due = self._due()
        if due is not None:
            self._timer = self.loop.call_at(due, self._ring)

    def disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _ring(self) -> None:
        self._timer = None
        waiter = self._waiter
        if waiter is None or waiter.done():
            return  # nobody waits: the next wait sets it
        now = self.loop.time()
        if self.deadline is not None and now >= self.deadline:
            waiter.set_exception(DeadlineExceeded("deadline"))
        elif self.read_s is not None and now >= self._waited + self.read_s:
            waiter.set_exception(ReadTimeout("read timeout"))
        else:
            self._arm()

    async def wait(self) -> None:
        """Until more bytes come (or the end), within the read timeout and the deadline."""
        if self.error is not None:
            raise self.error
        if self.paused and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()
        self._waiter = waiter = self.loop.create_future()
        self._waited = self.loop.time()
        if self._timer is None:
            self._arm()
        try:
            await waiter
        finally:
            self._waiter = None
        if self.error is not None:
            raise self.error

    def take(self, n: int) -> bytes:
        with memoryview(self.buffer) as view:  # one copy, not a slice and then its bytes
            data = bytes(view[:n])
        del self.buffer[:n]
        if self.paused and len(self.buffer) < HIGH_WATER // 2 and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()
        return data

    def reusable(self) -> bool:
        return (
            self.done
            and not self.closed
            and not self.head_only
            and not self.buffer
            and self.keep_alive
        )

    def close(self) -> None:
        self.closed = True
        self.disarm()
        if self.transport is not None:
            self.transport.close()


class Response:
    """An answer whose head is in. `release` (or `close`) it when done."""

    __slots__ = ("_client", "_conn", "_origin", "headers", "status")

    def __init__(self, client: Pool, origin: Origin, conn: UpstreamConnection) -> None:
        self._client = client
        self._origin = origin
        self._conn: UpstreamConnection | None = conn
        self.status = conn.status
        self.headers = conn.headers  # names lowercased

    def __del__(self) -> None:
        if self._conn is not None:  # never released: its slot is not lost
            self.close()

    @property
    def content_type(self) -> str:
        """The media type, lowercased, without parameters (as aiohttp gives it)."""
        return media_type(self.headers.get("content-type"))

    def _live(self) -> UpstreamConnection:
        if self._conn is None:
            raise Disconnected("connection closed mid-answer")
        return self._conn

    async def read(self) -> bytes:
        """The whole body."""
        conn = self._live()
        conn.whole = True
        while not conn.done:
            await conn.wait()
        return conn.take(len(conn.buffer))

    async def lines(
        self, most: int = HIGH_WATER, clean: Callable[[bytes], bytes] | None = None
    ) -> list[bytes]:
        """The whole lines in hand (at least one: waiting for it), without their b"\\n", in
        pieces of about `most` bytes (a longer line whole); at the end the rest, then []. One
        call per read of the upstream rather than one per line: the caller handles all that
        came at once in one go, and writes it on at once. `clean`: what the lines' bytes go
        through first, whole lines together (a redaction: a line is never cut in two)."""
        conn = self._live()
        start = 0
        while True:
            buffer = conn.buffer
            found = buffer.rfind(b"\n", 0, most)  # the last line end within `most` bytes
            if found < 0:
                found = buffer.find(b"\n", max(start, most))  # else the first one
            if found >= 0:
                data = conn.take(found + 1)
                lines = (data if clean is None else clean(data)).split(b"\n")
                lines.pop()  # what followed the last b"\n": nothing
                return lines
            if conn.done:
                if not buffer:
                    return []
                data = conn.take(len(buffer))
                return [data if clean is None else clean(data)]
            if len(buffer) > MAX_LINE:
                raise Malformed("stream line too long")
            start = len(buffer)
            await conn.wait()

    def release(self) -> None:
        """Done with the answer: its connection goes back to the pool if it can be reused."""
        conn, self._conn = self._conn, None
        if conn is not None:
            self._client.give_back(self._origin, conn)

    def close(self) -> None:
        """Done with the answer before its end: its connection is closed."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
            self._client.give_back(self._origin, conn)


class Pool(Protocol):
    """Where a response gives its connection back once it is read (the client's pool)."""

    def give_back(self, origin: Origin, conn: UpstreamConnection) -> None: ...
