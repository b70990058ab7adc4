"""The HTTP client side: one pooled aiohttp session, per-attempt timeouts, and the mapping of
aiohttp's exceptions to the `Transport` kinds that `outcomes.classify` understands.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import os
import socket
import ssl

import aiohttp

from ._version import __version__
from .outcomes import Transport

USER_AGENT = f"agent-reach/{__version__}"


def new_session() -> aiohttp.ClientSession:
    """A client session with pooled keep-alive connections (call inside a running loop)."""
    connector = aiohttp.TCPConnector(
        limit=1024, limit_per_host=0, keepalive_timeout=30, ttl_dns_cache=300
    )
    return aiohttp.ClientSession(
        connector=connector,
        headers={"User-Agent": USER_AGENT},
        timeout=aiohttp.ClientTimeout(total=None),
        read_bufsize=2**18,
        auto_decompress=True,
    )


@functools.lru_cache(maxsize=64)
def _timeout(connect_s: float, read_s: float) -> aiohttp.ClientTimeout:
    return aiohttp.ClientTimeout(total=None, sock_connect=connect_s, sock_read=read_s)


def timeouts(connect_s: float, read_s: float, remaining_s: float) -> aiohttp.ClientTimeout:
    """Separate connect and read timeouts, each capped by what is left of the deadline."""
    if remaining_s >= connect_s and remaining_s >= read_s:  # the usual case: one shared object
        return _timeout(connect_s, read_s)
    return aiohttp.ClientTimeout(
        total=None,
        sock_connect=max(0.001, min(connect_s, remaining_s)),
        sock_read=max(0.001, min(read_s, remaining_s)),
    )


# Most specific first: the connect timeout is also a TimeoutError and an OSError.
_KINDS: tuple[tuple[type[BaseException], Transport], ...] = (
    (aiohttp.ConnectionTimeoutError, Transport.CONNECT_TIMEOUT),
    (aiohttp.ClientConnectorCertificateError, Transport.TLS),
    (aiohttp.ClientConnectorSSLError, Transport.TLS),
    (aiohttp.ClientSSLError, Transport.TLS),
    (ssl.SSLError, Transport.TLS),
    (aiohttp.ClientConnectorError, Transport.CONNECT),
    (aiohttp.SocketTimeoutError, Transport.READ_TIMEOUT),
    (aiohttp.ServerTimeoutError, Transport.READ_TIMEOUT),
    (asyncio.TimeoutError, Transport.READ_TIMEOUT),
    (aiohttp.ServerDisconnectedError, Transport.DISCONNECTED),
    (aiohttp.ClientPayloadError, Transport.DISCONNECTED),
    (aiohttp.ClientOSError, Transport.DISCONNECTED),
    (aiohttp.ClientConnectionError, Transport.DISCONNECTED),
    (ConnectionError, Transport.DISCONNECTED),
)

CLIENT_ERRORS = (aiohttp.ClientError, OSError, asyncio.TimeoutError, ValueError)


def kind_of(exc: BaseException) -> tuple[Transport, str]:
    """The transport kind of a client exception, and a short description without URLs."""
    for cls, kind in _KINDS:
        if isinstance(exc, cls):
            return kind, _describe(exc)
    return Transport.DISCONNECTED, _describe(exc)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, aiohttp.ClientConnectorDNSError) or isinstance(
        getattr(exc, "os_error", None), socket.gaierror
    ):
        return "DNS lookup failed"
    if isinstance(exc, aiohttp.ClientConnectorError):
        err = exc.os_error
        if isinstance(err, ConnectionRefusedError) or err.errno == errno.ECONNREFUSED:
            return "connection refused"
        return os.strerror(err.errno) if err.errno else type(err).__name__
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "server disconnected"
    if isinstance(exc, asyncio.TimeoutError):
        return ""
    return type(exc).__name__
