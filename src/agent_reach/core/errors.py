"""The exception tree of agent-reach.

    AgentReachError
    ├── ConfigError            the user's fault: a bad config file or value (CLI exit 2)
    ├── RequestError           the caller's fault: a malformed request (proxy 400/404)
    └── AllProvidersFailed     the network's fault: no provider answered (CLI exit 1, proxy 502)
        └── StreamInterrupted  a stream broke after its first chunk reached the caller

Provider failures never escape as exceptions of their own: each becomes an `Attempt` with a
reason, and `AllProvidersFailed.attempts` carries all of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .trace import Attempt


class AgentReachError(Exception):
    """Base of every error agent-reach raises on purpose."""


class ConfigError(AgentReachError):
    """A config file or value is wrong. The message names file, provider and field."""

    def __init__(self, message: str, *, file: str | None = None) -> None:
        self.file = file
        super().__init__(f"{file}: {message}" if file else message)


class RequestError(AgentReachError):
    """A request is malformed or names something that does not exist."""

    def __init__(self, message: str, *, status: int = 400, param: str | None = None) -> None:
        self.status = status
        self.param = param
        super().__init__(message)


_ESCAPES = {
    ord("\\"): "\\\\",
    **{c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7F, 0xA0))},
}


def escaped(text: str, limit: int = 200) -> str:
    """`text` safe to show on one line: at most `limit` characters (then `…`), control
    characters and undecodable bytes escaped (`\\x0a`, `\\xff`)."""
    if text.isascii() and text.isprintable() and "\\" not in text:  # the usual case, quickly
        return text if len(text) <= limit else text[:limit] + "…"
    cut = text[:limit].translate(_ESCAPES)
    try:  # header values keep undecodable bytes as surrogates: show them as the bytes
        raw = cut.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        raw = cut.encode("utf-8", "backslashreplace")
    shown = raw.decode("utf-8", "backslashreplace")
    return shown + "…" if len(text) > limit else shown


def quoted(text: str, limit: int = 200) -> str:
    """Client input as an error message may quote it (protocol §14): `escaped`, in quotes."""
    return "'" + escaped(text, limit).replace("'", "\\'") + "'"


class AllProvidersFailed(AgentReachError):
    """No provider in the route produced a valid answer; `.attempts` says why, one by one.

    `.status` says whose fault it is (protocol §5.1, `fault.fault_of`): 4xx when the request
    itself is at fault (no such model, blocked content, too long for every provider, refused
    by all as malformed), 429 when every provider asks to come back later (`.retry_after`),
    else 502. `stopped`: the walk stopped on a `content_blocked` refusal; `model`: the model
    the request asked for.
    """

    def __init__(
        self,
        attempts: list[Attempt],
        message: str | None = None,
        *,
        stopped: bool = False,
        model: str | None = None,
    ) -> None:
        from .fault import fault_of

        self.attempts = attempts
        self.fault = fault_of(attempts, stopped, quoted(model, 100) if model else None)
        super().__init__(message or self.fault.message or self._summary(attempts))

    @property
    def status(self) -> int:
        """The HTTP status the proxy answers this failure with."""
        return self.fault.status

    @property
    def code(self) -> str:
        """The error code: `model_not_found`, `content_filter`, `context_length_exceeded`,
        `bad_request`, `rate_limited`, `model_required` or `all_providers_failed`."""
        return self.fault.code

    @property
    def retry_after(self) -> float | None:
        """For a 429: seconds until the soonest provider may be asked again, when known."""
        return self.fault.retry_after

    @staticmethod
    def _summary(attempts: list[Attempt]) -> str:
        if not attempts:
            return "all providers failed: the route is empty"
        parts = ", ".join(f"{a.provider}: {a.reason}" for a in attempts)
        return f"all providers failed ({parts})"


class StreamInterrupted(AllProvidersFailed):
    """The provider that was streaming failed after content had been delivered. `.cut` is
    that failure's attempt: the reason the stream ended, even when providers asked to
    continue the answer failed after it (they are in `.attempts` too)."""

    def __init__(self, attempts: list[Attempt], message: str, *, cut: Attempt) -> None:
        self.cut = cut
        super().__init__(attempts, message)
