"""The HTTP/1.1 client to providers: asyncio protocols and llhttp (`httptools`), pooled
keep-alive connections per origin, cached DNS, and failures as our own exceptions (each with
the phrase a user reads), which `transport` maps to the kinds `outcomes.classify` understands.

A `Client` sends one request and gives a `Response` once its head is in: `read` takes the
whole body, `readline` one line of a stream. What an unread answer may hold in memory is
bounded (`HIGH_WATER`): past it the socket stops being read until the reader catches up,
so a client that reads nothing holds the upstream back, not our memory. A `read_s` bounds
every wait for bytes; `connect_s` bounds the connection with its TLS handshake, and, before
it, the wait for a free connection: at most `MAX_CONNECTIONS` exchanges run at once, at most
`ORIGIN_CONNECTIONS` of them to one origin, so that slow answers from one provider cannot
take the slots every other provider needs (protocol §14).
"""

from __future__ import annotations

import asyncio
import errno
import functools
import ipaddress
import os
import socket
import ssl
import time
import zlib
from collections import deque
from dataclasses import dataclass
from typing import Any, NamedTuple, cast
from urllib.parse import urlsplit

import httptools

from ..core.proxies import Proxy
from .outbox import Outbox

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
DNS_TTL_S = 300.0
IDLE_S = 30.0  # an idle pooled connection is closed after this (below servers' own timers)
MAX_CONNECTIONS = 4096  # in use at once, all origins together; more wait for one
ORIGIN_CONNECTIONS = 1024  # in use at once to one origin: the rest stay for the others


class UpstreamError(Exception):
    """A failure below HTTP, or an answer that is not HTTP; `str()` is the user's phrase."""


class ConnectFailed(UpstreamError):
    """No connection: refused, unreachable, no such host."""


class ConnectTimeout(ConnectFailed, TimeoutError):
    """No connection (with its TLS handshake) within the connect timeout."""


class TLSFailed(UpstreamError):
    """The TLS handshake failed, or the certificate is not trusted."""


class ReadTimeout(UpstreamError, TimeoutError):
    """No byte of the answer within the read timeout."""


class PoolTimeout(UpstreamError, TimeoutError):
    """No connection free (to the origin, or at all) within the connect timeout: the provider
    is as good as unreachable for now, and the walk moves on."""


class DeadlineExceeded(UpstreamError, TimeoutError):
    """The whole exchange outlived the time it was given (the request's deadline)."""


class Disconnected(UpstreamError):
    """The connection closed: before an answer ("server disconnected") or in one."""


class Malformed(UpstreamError):
    """The answer is not valid HTTP/1.1, or a line of it is too long."""


Address = tuple[int, int, int, tuple[str, int] | tuple[str, int, int, int] | tuple[int, bytes]]


def media_type(content_type: str | None) -> str:
    """A `Content-Type`'s media type, lowercased, without parameters; none or empty is
    `application/octet-stream` (RFC 9110 §8.3)."""
    if not content_type:
        return "application/octet-stream"
    return content_type.partition(";")[0].strip().lower()


class Timeouts(NamedTuple):
    connect_s: float
    read_s: float
    total_s: float | None = None  # the whole exchange, for answers read whole


def _phrase(exc: OSError) -> str:
    if isinstance(exc, socket.gaierror):
        return "DNS lookup failed"
    if isinstance(exc, ConnectionRefusedError) or exc.errno == errno.ECONNREFUSED:
        return "connection refused"
    return os.strerror(exc.errno).lower() if exc.errno else "connection failed"


@dataclass(frozen=True, slots=True)
class Origin:
    """Where connections go: one pool each."""

    host: str
    port: int
    tls: ssl.SSLContext | None
    authority: bytes  # the Host header
    via: Proxy | None = None  # the proxy connections go through: CONNECT (https) or not (http)
    proxy_auth: bytes = b""  # an http origin's `Proxy-Authorization` line, through `via`

    @property
    def tunnelled(self) -> bool:
        """Whether connections go through a CONNECT tunnel (an https origin via a proxy)."""
        return self.via is not None and self.tls is not None


@functools.lru_cache(maxsize=1024)
def _target(url: str, tls: ssl.SSLContext | None, via: Proxy | None) -> tuple[Origin, bytes]:
    parts = urlsplit(url)
    if parts.scheme not in {"http", "https"} or not parts.hostname:
        raise ValueError("not an http(s) URL")
    secure = parts.scheme == "https"
    port = parts.port or (443 if secure else 80)
    host = parts.hostname
    shown = f"[{host}]" if ":" in host else host
    authority = shown if port == (443 if secure else 80) else f"{shown}:{port}"
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    context = (tls or _default_tls()) if secure else None
    auth = b""
    if via is not None and not secure:  # an absolute-form request to the proxy itself
        path = f"http://{authority}{path}"
        if via.authorization:
            auth = f"Proxy-Authorization: {via.authorization}\r\n".encode("latin-1")
    origin = Origin(host, port, context, authority.encode("idna"), via, auth)
    return origin, path.encode("ascii")


@functools.cache
def _default_tls() -> ssl.SSLContext:
    return ssl.create_default_context()


class _Connection(asyncio.BufferedProtocol):
    """One connection to an upstream, and the answer being read on it."""

    def __init__(self, loop: asyncio.AbstractEventLoop, scratch: memoryview) -> None:
        self.loop = loop
        self._scratch = scratch
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.closed = False
        self.idle = False  # in the pool, between requests
        self.idle_since = 0.0
        self.slots: _Slots | None = None  # its origin's, taken for the exchange under way
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

    def __init__(self, client: Client, origin: Origin, conn: _Connection) -> None:
        self._client = client
        self._origin = origin
        self._conn: _Connection | None = conn
        self.status = conn.status
        self.headers = conn.headers  # names lowercased

    def __del__(self) -> None:
        if self._conn is not None:  # never released: its slot is not lost
            self.close()

    @property
    def content_type(self) -> str:
        """The media type, lowercased, without parameters (as aiohttp gives it)."""
        return media_type(self.headers.get("content-type"))

    def _live(self) -> _Connection:
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

    async def lines(self, most: int = HIGH_WATER) -> list[bytes]:
        """The whole lines in hand (at least one: waiting for it), without their b"\\n", in
        pieces of about `most` bytes (a longer line whole); at the end the rest, then []. One
        call per read of the upstream rather than one per line: the caller handles all that
        came at once in one go, and writes it on at once."""
        conn = self._live()
        start = 0
        while True:
            buffer = conn.buffer
            found = buffer.rfind(b"\n", 0, most)  # the last line end within `most` bytes
            if found < 0:
                found = buffer.find(b"\n", max(start, most))  # else the first one
            if found >= 0:
                lines = conn.take(found + 1).split(b"\n")
                lines.pop()  # what followed the last b"\n": nothing
                return lines
            if conn.done:
                return [conn.take(len(buffer))] if buffer else []
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


class _Slots:
    """At most `limit` exchanges at once; the others wait, the longest waiting first (as with
    `asyncio.Semaphore`, whose `locked` walks its waiters in Python at every take: here a
    take while one is free is a subtraction)."""

    __slots__ = ("_free", "_waiters", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._free = limit
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def full(self) -> bool:
        return self._free <= 0 or bool(self._waiters)

    def grab(self) -> bool:
        """Take a slot that is free now (none is, while others wait); whether one was."""
        if self.full:
            return False
        self._free -= 1
        return True

    async def take(self) -> None:
        if self.grab():
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter  # `give` hands its slot over
        except BaseException:
            if waiter.done() and not waiter.cancelled():  # handed one as it was cancelled
                self.give()
            else:
                self._waiters.remove(waiter)
            raise

    def give(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self._free += 1


class Client:
    """Pooled HTTP/1.1 connections to upstreams, at most `limit` exchanges at once and
    `per_origin` of them to one origin. Use within one running loop."""

    def __init__(
        self, user_agent: str, limit: int = MAX_CONNECTIONS, per_origin: int = ORIGIN_CONNECTIONS
    ) -> None:
        self._base = (
            f"User-Agent: {user_agent}\r\nAccept: */*\r\nAccept-Encoding: gzip, deflate\r\n"
        ).encode()
        self._idle: dict[Origin, deque[_Connection]] = {}
        self._dns: dict[tuple[str, int], tuple[float, list[Address]]] = {}
        self._slots = _Slots(limit)
        self._per_origin = min(per_origin, limit)
        self._origins: dict[Origin, _Slots] = {}  # one per configured origin: a few
        self._outbox = Outbox()
        self._scratch = memoryview(bytearray(READ_SIZE))
        self.closed = False

    async def request(
        self,
        method: str,
        url: str,
        body: bytes,
        headers: dict[str, str],
        timeouts: Timeouts,
        tls: ssl.SSLContext | None = None,
        via: Proxy | None = None,
        deadline: float | None = None,
    ) -> Response:
        """Send a request (through proxy `via`, if given); its answer once the head is in
        (within the read timeout). `deadline`: the loop's time by which the whole exchange
        must be done (`fetch`), else `DeadlineExceeded`. No connection free within
        `timeouts.connect_s` is `PoolTimeout`."""
        origin, path = _target(url, tls, via)
        head = self._head(method, path, origin, body, headers)
        slots = await self._acquire(origin, timeouts.connect_s, deadline)
        conn: _Connection | None = None
        try:
            conn = self._pooled(origin) or await self._connect(origin, timeouts.connect_s)
            conn.slots = slots
            conn.read_s = timeouts.read_s
            conn.deadline = deadline
            conn.head_only = method == "HEAD"
            assert conn.transport is not None
            self._outbox.write(conn.transport, head + body if body else head)
            while not conn.head:
                await conn.wait()
        except BaseException:
            if conn is not None:
                conn.close()
            slots.give()
            self._slots.give()
            raise
        return Response(self, origin, conn)

    async def fetch(
        self,
        method: str,
        url: str,
        body: bytes,
        headers: dict[str, str],
        timeouts: Timeouts,
        tls: ssl.SSLContext | None = None,
        via: Proxy | None = None,
    ) -> tuple[Response, bytes]:
        """Send a request and read its whole answer, all within `timeouts.total_s` (one
        timer on the connection, not a `Timeout` around the task: a third of the cost)."""
        total_s = timeouts.total_s
        deadline = None if total_s is None else asyncio.get_running_loop().time() + total_s
        try:
            resp = await self.request(method, url, body, headers, timeouts, tls, via, deadline)
        except ConnectTimeout:
            if total_s is not None and timeouts.connect_s >= total_s:  # it had all that was left
                raise DeadlineExceeded("deadline") from None
            raise
        try:
            raw = await resp.read()
        except BaseException:
            resp.close()
            raise
        resp.release()
        return resp, raw

    async def _acquire(self, origin: Origin, wait_s: float, deadline: float | None) -> _Slots:
        """A slot of `origin`'s and one of all origins', waited for `wait_s` at most (else
        `PoolTimeout`) and until `deadline` (else `DeadlineExceeded`); `origin`'s slots, to
        give back."""
        slots = self._origins.get(origin)
        if slots is None:
            slots = self._origins[origin] = _Slots(self._per_origin)
        if not self._slots.full and slots.grab():  # the usual case: no wait, no timer
            self._slots.grab()
            return slots
        until = asyncio.get_running_loop().time() + wait_s
        late = deadline is not None and deadline <= until  # the deadline comes first
        taken = False
        try:
            async with asyncio.timeout_at(deadline if late else until):
                await slots.take()
                taken = True
                await self._slots.take()
        except BaseException as exc:
            if taken:
                slots.give()
            if not isinstance(exc, TimeoutError):
                raise
            if late:
                raise DeadlineExceeded("deadline") from None
            full = slots if slots.full else self._slots
            where = " to this host" if full is slots else ""
            wait = f"no free connection within {wait_s * 1000:.0f} ms"
            raise PoolTimeout(f"{wait} (all {full.limit}{where} in use)") from None
        return slots

    def _head(
        self, method: str, path: bytes, origin: Origin, body: bytes, headers: dict[str, str]
    ) -> bytes:
        lines = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
        if lines.count("\n") != len(headers) or lines.count("\r") != len(headers):
            raise ValueError("invalid header")
        return b"".join(
            (
                method.encode("ascii"),
                b" ",
                path,
                b" HTTP/1.1\r\nHost: ",
                origin.authority,
                b"\r\n",
                self._base,
                b"Content-Length: %d\r\n" % len(body) if body or method == "POST" else b"",
                origin.proxy_auth,
                lines.encode("utf-8"),
                b"\r\n",
            )
        )

    def _pooled(self, origin: Origin) -> _Connection | None:
        idle = self._idle.get(origin)
        if not idle:
            return None
        expired = time.monotonic() - IDLE_S
        while idle:
            conn = idle.pop()
            if not conn.closed and conn.idle_since > expired:
                conn.idle = False
                conn._reset()
                return conn
            conn.close()
        return None

    def give_back(self, origin: Origin, conn: _Connection) -> None:
        """A connection whose answer is done: pooled when reusable, else closed."""
        if conn.slots is not None:
            conn.slots.give()
            conn.slots = None
        self._slots.give()
        conn.disarm()
        if self.closed or not conn.reusable():
            conn.close()
            return
        conn.idle, conn.idle_since = True, time.monotonic()
        idle = self._idle.setdefault(origin, deque())
        idle.append(conn)
        while len(idle) > 64 or (idle and idle[0].idle_since < conn.idle_since - IDLE_S):
            idle.popleft().close()

    async def _addresses(self, host: str, port: int) -> list[Address]:
        key = (host, port)
        now = time.monotonic()
        cached = self._dns.get(key)
        if cached is not None and cached[0] > now:
            return cached[1]
        try:
            ipaddress.ip_address(host)
            literal = True
        except ValueError:
            literal = False
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        found: list[Address] = [
            (family, kind, proto, addr) for family, kind, proto, _, addr in infos
        ]
        self._dns[key] = (float("inf") if literal else now + DNS_TTL_S, found)
        return found

    async def _connect(self, origin: Origin, connect_s: float) -> _Connection:
        loop = asyncio.get_running_loop()
        limit = asyncio.timeout(connect_s)
        try:
            async with limit:
                sock = await self._socket(origin)
                if origin.tunnelled:
                    await _tunnel(sock, origin)
                try:
                    _, conn = await loop.create_connection(
                        lambda: _Connection(loop, self._scratch),
                        sock=sock,
                        ssl=origin.tls,
                        server_hostname=origin.host if origin.tls else None,
                        ssl_handshake_timeout=connect_s if origin.tls else None,
                    )
                except BaseException:
                    sock.close()
                    raise
        except TimeoutError:
            if limit.expired():
                raise ConnectTimeout("connect timeout") from None
            raise
        except ssl.SSLCertVerificationError:
            raise TLSFailed("TLS certificate not trusted") from None
        except ssl.SSLError:
            raise TLSFailed("TLS handshake failed") from None
        except OSError as exc:
            if origin.via is not None:
                raise ConnectFailed(f"cannot connect to the proxy: {_phrase(exc)}") from None
            raise ConnectFailed(_phrase(exc)) from None
        return conn

    async def reach(self, url: str, via: Proxy | None, connect_s: float) -> None:
        """Open a TCP connection to `url`'s host and port (through a CONNECT tunnel of `via`,
        if given) within `connect_s`, and close it: a check of providers without a health
        URL. Raises as a request's connection would."""
        origin, _ = _target(url, None, via)
        limit = asyncio.timeout(connect_s)
        try:
            async with limit:
                sock = await self._socket(origin)
                if via is not None:
                    await _tunnel(sock, origin)
        except TimeoutError:
            if limit.expired():
                raise ConnectTimeout("connect timeout") from None
            raise
        except OSError as exc:
            raise ConnectFailed(_phrase(exc)) from None
        sock.close()

    async def _socket(self, origin: Origin) -> socket.socket:
        loop = asyncio.get_running_loop()
        failure: OSError | None = None
        dial = origin.via or origin
        for family, kind, proto, addr in await self._addresses(dial.host, dial.port):
            sock = socket.socket(family, kind, proto)
            try:
                sock.setblocking(False)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                await _connected(loop, sock, addr)
            except OSError as exc:
                sock.close()
                failure = exc
                continue
            except BaseException:
                sock.close()
                raise
            return sock
        raise failure or OSError(errno.EHOSTUNREACH, "no address")

    async def close(self) -> None:
        """Close every pooled connection; answers still being read end."""
        self.closed = True
        for idle in self._idle.values():
            while idle:
                idle.pop().close()
        self._idle.clear()


async def _connected(
    loop: asyncio.AbstractEventLoop, sock: socket.socket, addr: tuple[Any, ...]
) -> None:
    """Connect the non-blocking `sock` to `addr`, an address already resolved: the connect,
    then a wait until the socket is writable and its error (uvloop's `sock_connect` took 158 µs
    of CPU to learn of a refused connection, this takes 38; an accepted one 182 against 79)."""
    error = sock.connect_ex(addr)
    if error in (errno.EINPROGRESS, errno.EINTR):
        fd = sock.fileno()
        writable = loop.create_future()
        loop.add_writer(fd, _settle, writable)
        try:
            await writable
        finally:
            loop.remove_writer(fd)
        error = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    if error:
        raise OSError(error, os.strerror(error))


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():  # a connect timeout may have cancelled it
        future.set_result(None)


async def _tunnel(sock: socket.socket, origin: Origin) -> None:
    """Open a CONNECT tunnel to `origin` through its proxy on `sock`; the proxy's refusal is a
    `ConnectFailed` saying what it answered."""
    assert origin.via is not None
    loop = asyncio.get_running_loop()
    host = f"[{origin.host}]" if ":" in origin.host else origin.host
    target = f"{host}:{origin.port}"
    auth = origin.via.authorization
    head = f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n"
    head += f"Proxy-Authorization: {auth}\r\n\r\n" if auth else "\r\n"
    try:
        await loop.sock_sendall(sock, head.encode("latin-1"))
        answer = b""
        while b"\r\n\r\n" not in answer:
            data = await loop.sock_recv(sock, 4096)
            if not data or len(answer) > 2**16:
                raise ConnectionResetError(errno.ECONNRESET, "closed")
            answer += data
    except OSError as exc:
        sock.close()
        raise ConnectFailed(f"cannot connect to the proxy: {_phrase(exc)}") from None
    except BaseException:
        sock.close()
        raise
    status = answer.split(b"\r\n", 1)[0].split(b" ", 1)[-1].decode("latin-1")
    if not status.startswith("2"):
        sock.close()
        raise ConnectFailed(f"the proxy answered {status[:80]}".rstrip())
