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
take the slots every other provider needs (protocol §14)."""

from __future__ import annotations

import asyncio
import errno
import functools
import ipaddress
import socket
import ssl
import time
from collections import deque
from typing import NamedTuple
from urllib.parse import urlsplit

from ..core.proxies import Proxy
from .exchange import READ_SIZE, RECEIVE_BUFFER, Response, UpstreamConnection, said
from .failures import ConnectFailed, ConnectTimeout, DeadlineExceeded, PoolTimeout, TLSFailed
from .origins import Origin, Slots
from .outbox import Outbox
from .sockets import connected, tunnel

DNS_TTL_S = 300.0
IDLE_S = 30.0  # an idle pooled connection is closed after this (below servers' own timers)
MAX_CONNECTIONS = 4096  # in use at once, all origins together; more wait for one
ORIGIN_CONNECTIONS = 1024  # in use at once to one origin: the rest stay for the others


Address = tuple[int, int, int, tuple[str, int] | tuple[str, int, int, int] | tuple[int, bytes]]


class Timeouts(NamedTuple):
    connect_s: float
    read_s: float
    total_s: float | None = None  # the whole exchange, for answers read whole


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


class Client:
    """Pooled HTTP/1.1 connections to upstreams, at most `limit` exchanges at once and
    `per_origin` of them to one origin. Use within one running loop."""

    def __init__(
        self, user_agent: str, limit: int = MAX_CONNECTIONS, per_origin: int = ORIGIN_CONNECTIONS
    ) -> None:
        self._base = (
            f"User-Agent: {user_agent}\r\nAccept: */*\r\nAccept-Encoding: gzip, deflate\r\n"
        ).encode()
        self._idle: dict[Origin, deque[UpstreamConnection]] = {}
        self._dns: dict[tuple[str, int], tuple[float, list[Address]]] = {}
        self._slots = Slots(limit)
        self._per_origin = min(per_origin, limit)
        self._origins: dict[Origin, Slots] = {}  # one per configured origin: a few
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
        conn: UpstreamConnection | None = None
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

    async def _acquire(self, origin: Origin, wait_s: float, deadline: float | None) -> Slots:
        """A slot of `origin`'s and one of all origins', waited for `wait_s` at most (else
        `PoolTimeout`) and until `deadline` (else `DeadlineExceeded`); `origin`'s slots, to
        give back."""
        slots = self._origins.get(origin)
        if slots is None:
            slots = self._origins[origin] = Slots(self._per_origin)
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

    def _pooled(self, origin: Origin) -> UpstreamConnection | None:
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

    def give_back(self, origin: Origin, conn: UpstreamConnection) -> None:
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

    async def _connect(self, origin: Origin, connect_s: float) -> UpstreamConnection:
        loop = asyncio.get_running_loop()
        limit = asyncio.timeout(connect_s)
        try:
            async with limit:
                sock = await self._socket(origin)
                if origin.tunnelled:
                    await tunnel(sock, origin)
                try:
                    _, conn = await loop.create_connection(
                        lambda: UpstreamConnection(loop, self._scratch),
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
                raise ConnectFailed(f"cannot connect to the proxy: {said(exc)}") from None
            raise ConnectFailed(said(exc)) from None
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
                    await tunnel(sock, origin)
        except TimeoutError:
            if limit.expired():
                raise ConnectTimeout("connect timeout") from None
            raise
        except OSError as exc:
            raise ConnectFailed(said(exc)) from None
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
                await connected(loop, sock, addr)
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
