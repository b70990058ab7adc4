"""The HTTP client side: one pooled `upstream.Client`, per-attempt timeouts, and the mapping of
its failures to the `Transport` kinds that `outcomes.classify` understands.
"""

from __future__ import annotations

import functools
import os

from ..core.outcomes import Outcome, Transport, classify
from ..core.proxies import Proxy
from ..version import __version__
from .failures import (
    ConnectFailed,
    ConnectTimeout,
    DeadlineExceeded,
    PoolTimeout,
    ReadTimeout,
    TLSFailed,
    UpstreamError,
)
from .upstream import MAX_CONNECTIONS, ORIGIN_CONNECTIONS, Client, Timeouts

USER_AGENT = f"agent-reach/{__version__}"


def new_session(limit: int = MAX_CONNECTIONS, per_origin: int = ORIGIN_CONNECTIONS) -> Client:
    """A client with pooled keep-alive connections, at most `limit` in use at once and
    `per_origin` of them to one origin (call inside a running loop)."""
    return Client(USER_AGENT, limit, per_origin)


@functools.lru_cache(maxsize=64)
def _timeout(connect_s: float, read_s: float) -> Timeouts:
    return Timeouts(connect_s, read_s)


def timeouts(connect_s: float, read_s: float, remaining_s: float) -> Timeouts:
    """Separate connect and read timeouts, each capped by what is left of the deadline."""
    if remaining_s >= connect_s and remaining_s >= read_s:  # the usual case: one shared object
        return _timeout(connect_s, read_s)
    return Timeouts(max(0.001, min(connect_s, remaining_s)), max(0.001, min(read_s, remaining_s)))


def whole_timeouts(connect_s: float, read_s: float, remaining_s: float) -> Timeouts:
    """The timeouts of a request whose answer is read whole (a try, a health check): connect
    and read as `timeouts`, and what is left of the deadline for the whole exchange.
    `past_deadline` tells when that ran out."""
    left = max(remaining_s, 0.001)
    return Timeouts(min(connect_s, left), min(read_s, left), left)


def past_deadline(exc: BaseException) -> bool:
    """Whether `exc` is the whole exchange of `whole` running out."""
    return isinstance(exc, DeadlineExceeded)


_CONNECTING = (Transport.CONNECT, Transport.CONNECT_TIMEOUT, Transport.TLS)


def transport_failure(exc: BaseException, expired: bool, proxy: Proxy | None = None) -> Outcome:
    """A failure below HTTP; the request's deadline when its time limit `expired`. A
    failure to connect through `proxy` names it (host and port, never its credentials)."""
    kind, text = (Transport.DEADLINE, "") if expired else kind_of(exc)
    if proxy is not None and kind in _CONNECTING:
        text = f"{text or 'connection failed'} ({proxy.named})"
    return classify(transport=kind, transport_detail=text)


# Most specific first: the connect timeout is also a connect failure and a TimeoutError.
_KINDS: tuple[tuple[type[BaseException], Transport], ...] = (
    (ConnectTimeout, Transport.CONNECT_TIMEOUT),
    (TLSFailed, Transport.TLS),
    (ConnectFailed, Transport.CONNECT),
    (PoolTimeout, Transport.POOL_TIMEOUT),
    (TimeoutError, Transport.READ_TIMEOUT),
)

CLIENT_ERRORS = (UpstreamError, OSError, TimeoutError, ValueError)


def kind_of(exc: BaseException) -> tuple[Transport, str]:
    """The transport kind of a client exception, and a short description in plain words
    (never a library's class name, never a URL)."""
    for cls, kind in _KINDS:
        if isinstance(exc, cls):
            return kind, describe(exc)
    return Transport.DISCONNECTED, describe(exc)


def describe(exc: BaseException) -> str:
    """A client failure in plain words: "connection refused", "connection closed
    mid-answer", "DNS lookup failed", …"""
    if isinstance(exc, ReadTimeout | DeadlineExceeded):
        return ""  # the reason says it: `timeout`, detail "read timeout"
    if isinstance(exc, UpstreamError):
        return str(exc)
    if isinstance(exc, TimeoutError):
        return ""
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, OSError) and exc.errno:
        return os.strerror(exc.errno).lower()
    if isinstance(exc, ConnectionError):
        return "connection lost"
    return "invalid response" if isinstance(exc, ValueError) else "connection error"
