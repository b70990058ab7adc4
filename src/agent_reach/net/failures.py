"""What can go wrong below HTTP in an exchange with an upstream: the client's own failure
exceptions (`UpstreamError` and its kinds), which `transport` reduces to reasons."""

from __future__ import annotations


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
