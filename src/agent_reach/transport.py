"""The HTTP client side: one pooled aiohttp session, per-attempt timeouts, and the mapping of
aiohttp's exceptions to the `Transport` kinds that `outcomes.classify` understands.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import math
import os
import socket
import ssl
from typing import Any, TypedDict

import aiohttp

from .outcomes import Outcome, Transport, classify
from .proxies import Proxy
from .version import __version__

USER_AGENT = f"agent-reach/{__version__}"


# What one upstream answer may hold in memory while its reader (a proxy client that reads
# nothing) does not take it (protocol §14, ≤ 256 KB per unread stream): the socket's receive
# buffer (the kernel doubles it: a 128 KB window, 640 KB/s at 200 ms, above any token rate)
# and the reader's buffer (twice `READ_BUFSIZE` before reading pauses).
RECEIVE_BUFFER = 2**16
READ_BUFSIZE = 2**14


def _upstream_socket(addr_info: tuple[int, int, int, str, tuple[Any, ...]]) -> socket.socket:
    family, kind, proto, _, _ = addr_info
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)
    return sock


def new_session() -> aiohttp.ClientSession:
    """A client session with pooled keep-alive connections (call inside a running loop)."""
    connector = aiohttp.TCPConnector(
        limit=1024,
        limit_per_host=0,
        keepalive_timeout=30,
        ttl_dns_cache=300,
        socket_factory=_upstream_socket,
    )
    return aiohttp.ClientSession(
        connector=connector,
        headers={"User-Agent": USER_AGENT},
        timeout=aiohttp.ClientTimeout(total=None),
        read_bufsize=READ_BUFSIZE,
        auto_decompress=True,
        trust_env=False,  # proxies follow `proxies` (curl's rules), never aiohttp's own
    )


class Upstream(TypedDict, total=False):
    """How a provider is reached, as aiohttp's request arguments: its proxy and TLS."""

    proxy: str
    ssl: ssl.SSLContext


@functools.lru_cache(maxsize=256)
def upstream(proxy: Proxy | None, tls: ssl.SSLContext | None) -> Upstream:
    """The arguments of a request through `proxy` (its credentials in the URL: aiohttp sends
    them as `Proxy-Authorization` on the CONNECT, or on an http request) with the TLS
    context `tls`; none: direct, the default TLS (system CAs, verified). Made once per
    provider (cached), never changed."""
    args = Upstream()
    if proxy is not None:
        args["proxy"] = proxy.credentialed_url
    if tls is not None:
        args["ssl"] = tls
    return args


@functools.lru_cache(maxsize=64)
def _timeout(connect_s: float, read_s: float, proxied: bool) -> aiohttp.ClientTimeout:
    return aiohttp.ClientTimeout(
        total=None,
        connect=connect_s + read_s if proxied else None,
        sock_connect=connect_s,
        sock_read=read_s,
    )


def timeouts(
    connect_s: float, read_s: float, remaining_s: float, proxied: bool = False
) -> aiohttp.ClientTimeout:
    """Separate connect and read timeouts, each capped by what is left of the deadline.
    `proxied`: through a proxy the whole connection (to the proxy, its answer to CONNECT,
    the TLS handshake in the tunnel) takes at most connect + read, since aiohttp puts no
    timer on the proxy's answer."""
    if remaining_s >= connect_s and remaining_s >= read_s:  # the usual case: one shared object
        return _timeout(connect_s, read_s, proxied)
    return aiohttp.ClientTimeout(
        total=None,
        connect=max(0.001, min(connect_s + read_s, remaining_s)) if proxied else None,
        sock_connect=max(0.001, min(connect_s, remaining_s)),
        sock_read=max(0.001, min(read_s, remaining_s)),
    )


def whole(
    connect_s: float, read_s: float, remaining_s: float, proxied: bool = False
) -> aiohttp.ClientTimeout:
    """The timeouts of a request whose answer is read whole (a try, a health check): connect
    and read as `timeouts`, and what is left of the deadline as aiohttp's `total` (no second
    timer around the call), never rounded up to a whole second. `past_deadline` tells when
    the total ran out."""
    left = max(remaining_s, 0.001)
    return aiohttp.ClientTimeout(
        total=left,
        connect=min(connect_s + read_s, left) if proxied else None,
        sock_connect=min(connect_s, left),
        sock_read=min(read_s, left),
        ceil_threshold=math.inf,
    )


def past_deadline(exc: BaseException) -> bool:
    """Whether `exc` is the `total` of `whole` running out (aiohttp's connect and read
    timeouts are `ServerTimeoutError`s)."""
    return isinstance(exc, asyncio.TimeoutError) and not isinstance(exc, aiohttp.ServerTimeoutError)


_CONNECTING = (Transport.CONNECT, Transport.CONNECT_TIMEOUT, Transport.TLS)


def transport_failure(exc: BaseException, expired: bool, proxy: Proxy | None = None) -> Outcome:
    """A failure below HTTP; the request's deadline when its time limit `expired`. A
    failure to connect through `proxy` names it (host and port, never its credentials)."""
    kind, text = (Transport.DEADLINE, "") if expired else kind_of(exc)
    if proxy is not None and kind in _CONNECTING:
        text = f"{text or 'connection failed'} ({proxy.named})"
    return classify(transport=kind, transport_detail=text)


# Most specific first: the connect timeout is also a TimeoutError and an OSError.
_KINDS: tuple[tuple[tuple[type[BaseException], ...], Transport], ...] = (
    ((aiohttp.ConnectionTimeoutError,), Transport.CONNECT_TIMEOUT),
    ((aiohttp.ClientHttpProxyError,), Transport.CONNECT),  # the proxy refused the tunnel
    (
        (
            aiohttp.ClientConnectorCertificateError,
            aiohttp.ClientConnectorSSLError,
            aiohttp.ClientSSLError,
            ssl.SSLError,
        ),
        Transport.TLS,
    ),
    ((aiohttp.ClientConnectorError,), Transport.CONNECT),
    (
        (aiohttp.SocketTimeoutError, aiohttp.ServerTimeoutError, asyncio.TimeoutError),
        Transport.READ_TIMEOUT,
    ),
)

CLIENT_ERRORS = (aiohttp.ClientError, OSError, asyncio.TimeoutError, ValueError)


def kind_of(exc: BaseException) -> tuple[Transport, str]:
    """The transport kind of a client exception, and a short description in plain words
    (never a library's class name, never a URL)."""
    for cls, kind in _KINDS:
        if isinstance(exc, cls):
            return kind, describe(exc)
    return Transport.DISCONNECTED, describe(exc)


# What a user reads for each kind of client failure, most specific first.
_PHRASES: tuple[tuple[type[BaseException], str], ...] = (
    (aiohttp.ClientConnectorDNSError, "DNS lookup failed"),
    (aiohttp.ClientConnectorCertificateError, "TLS certificate not trusted"),
    (aiohttp.ServerFingerprintMismatch, "TLS certificate fingerprint mismatch"),
    (aiohttp.ClientSSLError, "TLS handshake failed"),
    (ssl.SSLError, "TLS failure"),
    (aiohttp.ConnectionTimeoutError, "connect timeout"),
    (asyncio.TimeoutError, ""),  # the reason says it: `timeout`, detail "read timeout"
    (aiohttp.ServerDisconnectedError, "server disconnected"),
    (aiohttp.ClientPayloadError, "connection closed mid-answer"),
    (aiohttp.TooManyRedirects, "too many redirects"),
    (aiohttp.ClientResponseError, "malformed HTTP response"),
    (aiohttp.InvalidURL, "invalid URL"),
    (aiohttp.NonHttpUrlClientError, "not an http(s) URL"),
)


def describe(exc: BaseException) -> str:
    """A client failure in plain words: "connection refused", "connection closed
    mid-answer", "DNS lookup failed", …"""
    if isinstance(exc, aiohttp.ClientHttpProxyError):
        return f"the proxy answered {exc.status} {exc.message[:80]}".rstrip()
    if isinstance(exc, aiohttp.ClientProxyConnectionError):
        return f"cannot connect to the proxy: {describe(exc.os_error)}"
    if isinstance(exc, socket.gaierror) or isinstance(
        getattr(exc, "os_error", None), socket.gaierror
    ):
        return "DNS lookup failed"
    for cls, phrase in _PHRASES:
        if isinstance(exc, cls):
            return phrase
    err = exc.os_error if isinstance(exc, aiohttp.ClientConnectorError) else exc
    if isinstance(err, ConnectionRefusedError) or getattr(err, "errno", None) == errno.ECONNREFUSED:
        return "connection refused"
    if isinstance(err, OSError) and err.errno:
        return os.strerror(err.errno).lower()
    if isinstance(exc, aiohttp.ClientConnectorError):
        return "connection failed"
    if isinstance(exc, ConnectionError | aiohttp.ClientConnectionError):
        return "connection lost"
    return "invalid response" if isinstance(exc, ValueError) else "connection error"
