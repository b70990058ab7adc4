"""What the proxy writes to stderr (protocol §10, §14): one access line per request, one line per
connection-level problem, never a traceback (unless `--log-level debug`), a key or a body.

    2026-11-30T13:22:20.123Z POST /v1/chat/completions 200 provider=ok attempts=2 ms=12
    2026-11-30T13:22:21.456Z POST /v1/chat/completions 200 interrupted provider=- cut=ok:timeout
        attempts=2 ms=3012  (one line)

The second is a stream that broke after it began (its 200 was sent) and that no provider finished.

The provider and the attempt count come from the engine's events: the guard gives each request
a `Served` record and makes it current for the request's task; `observe`, subscribed to the
engine, fills it in; `AccessLog` (aiohttp's access-logger hook) makes the line when the
response is done, streams included. Access lines are written once per turn of the event loop,
one write for every request that ended in it (a write per line cost 8 % of the proxy's CPU per
request under load), and always before any other line, so the order holds.
"""

from __future__ import annotations

import asyncio
import atexit
import functools
import logging
import sys
import time
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger

from ..errors import escaped
from ..events import AttemptEvent, Event, RequestEvent

server_log = logging.getLogger("agent_reach.server")
access_log = logging.getLogger("agent_reach.access")
LEVELS = ("debug", "info", "warning", "error")
SERVED = "agent_reach.served"  # the request's key for its `Served` record


@dataclass(slots=True)
class Served:
    """What the access line says about a request besides its status: who answered and after
    how many attempts; `logged` when a line about it was written already."""

    provider: str | None = None
    attempts: int = 0
    cut: str | None = None  # `provider:reason` of a stream that broke after it began, unfinished
    logged: bool = False


_current: ContextVar[Served | None] = ContextVar("agent_reach_served", default=None)


def track(request: web.BaseRequest) -> None:
    """Give `request` its `Served` record and make it current for the task serving it."""
    served = request[SERVED] = Served()
    _current.set(served)


def mark_logged(request: web.BaseRequest) -> None:
    """A line about `request` was written already: the access log leaves it out."""
    request[SERVED] = Served(logged=True)


def observe(event: Event) -> None:
    """An engine observer: counts the current request's attempts and notes who answered."""
    served = _current.get()
    if served is None:
        return
    if isinstance(event, AttemptEvent):
        served.attempts += 1
        attempt = event.attempt
        if served.provider is None:
            return
        if attempt.ok:  # another provider finished the answer that was cut
            served.provider, served.cut = attempt.provider, None
        elif served.cut is None:  # the stream under way broke: the first cut is the one to tell
            served.cut = f"{attempt.provider}:{attempt.reason}"
    elif isinstance(event, RequestEvent):
        served.provider = event.provider


def stamp(at: float | None = None) -> str:
    """UTC time with milliseconds: `2026-11-30T13:22:20.123Z`."""
    now = time.time() if at is None else at
    return f"{_second(int(now))}.{int(now * 1000) % 1000:03d}Z"


@functools.lru_cache(maxsize=4)
def _second(second: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))


_pending: list[str] = []  # access lines not yet written


def flush() -> None:
    """Write the access lines made since the last write, in one write."""
    if _pending:
        lines = "".join(_pending)
        _pending.clear()
        sys.stderr.write(lines)


atexit.register(flush)


class AccessLog(AbstractAccessLogger):
    """aiohttp's access-log hook. The line goes to stderr (not through `logging`: a log record
    per request would cost ten times as much) at the end of the loop's turn. It is on while
    the `agent_reach.access` logger is enabled for info."""

    def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
        served: Served | None = request.get(SERVED)
        if served is None:
            served = Served()
        elif served.logged:
            return
        if not _pending:
            asyncio.get_running_loop().call_soon(flush)
        if served.cut is None:
            outcome = f"{response.status} provider={served.provider or '-'}"
        else:
            outcome = f"{response.status} interrupted provider=- cut={served.cut}"
        _pending.append(
            f"{stamp()} {request.method} {escaped(request.path, 200) or '-'} {outcome}"
            f" attempts={served.attempts} ms={round(time * 1000)}\n"
        )

    @property
    def enabled(self) -> bool:
        return self.logger.isEnabledFor(logging.INFO)


class _AfterAccess(logging.StreamHandler):  # type: ignore[type-arg]
    """A stream handler that writes pending access lines before its own."""

    def emit(self, record: logging.LogRecord) -> None:
        flush()
        super().emit(record)


class _OneLine(logging.Formatter):
    """Time, level (but for info) and message on one line; an exception as its type and
    message, or as a full traceback when `tracebacks` (debug)."""

    def __init__(self, tracebacks: bool) -> None:
        super().__init__()
        self.tracebacks = tracebacks

    def format(self, record: logging.LogRecord) -> str:
        text = record.getMessage()
        if record.levelno != logging.INFO:
            text = f"{record.levelname.lower()}: {text}"
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None and not self.tracebacks:
            text += f" ({type(exc).__name__}: {exc})"
        line = f"{stamp(record.created)} {escaped(text, 1000)}"
        if exc is not None and self.tracebacks:
            line += "\n" + self.formatException(record.exc_info)  # type: ignore[arg-type]
        return line


def configure(level: str = "info", access: bool = True) -> None:
    """Send every log record to stderr as one line: ours at `level`, other libraries' at
    warning and above (everything at debug, with tracebacks); access lines unless `access`
    is False."""
    handler = _AfterAccess(sys.stderr)
    debug = level == "debug"
    handler.setFormatter(_OneLine(tracebacks=debug))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if debug else logging.WARNING)
    logging.getLogger("agent_reach").setLevel(level.upper())
    access_log.disabled = not access


def options(access: bool) -> dict[str, Any]:
    """The AppRunner options for our access line (or none at all)."""
    return {"access_log": access_log if access else None, "access_log_class": AccessLog}
