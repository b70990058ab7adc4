"""What the proxy writes to stderr (protocol §10, §14): one access line per request, one line per
connection-level problem, never a traceback (unless `--log-level debug`), a key or a body.

    2026-11-30T13:22:20.123Z POST /v1/messages 200 model=claude-opus-4-8 provider=ok
        provider_model=deepseek-chat attempts=dead:connect_failed,auth:skip(circuit_open),ok:ok
        ms=12  (one line)
    2026-11-30T13:22:21.456Z POST /v1/chat/completions 200 interrupted model=m provider=-
        provider_model=- cut=ok:timeout attempts=ok:ok,ok:timeout ms=3012  (one line)

The model the client asked for, who answered and the model it was asked for, and each attempt
as `provider:reason` (`skip(reason)` for a provider passed over without a request). The second
is a stream that broke after it began (its 200 was sent) and that no provider finished.

The provider and the attempts come from the engine's events: the guard gives each request
a `Served` record and makes it current for the request's task; `observe`, subscribed to the
engine, fills it in; `AccessLog` (the server's access-log hook) makes the line when the
response is done, streams included. Access lines are written once per turn of the event loop,
one write for every request that ended in it (a write per line is a cost per request,
docs/decisions.md), and always before any other line, so the order holds.
"""

from __future__ import annotations

import asyncio
import atexit
import functools
import logging
import sys
import time
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import IO

from ..core.errors import escaped
from ..core.events import AttemptEvent, CapEvent, Event, RequestEvent
from .http11.wire import Request

server_log = logging.getLogger("agent_reach.server")
access_log = logging.getLogger("agent_reach.access")
LEVELS = ("debug", "info", "warning", "error")
SERVED = "agent_reach.served"  # the request's key for its `Served` record


@dataclass(slots=True)
class Served:
    """What the access line says about a request besides its status: who answered and after
    how many attempts."""

    provider: str | None = None
    model: str | None = None  # the model the client asked for
    provider_model: str | None = None  # the model the provider was asked for
    attempts: list[str] = field(default_factory=list)  # `provider:reason` of each attempt
    cut: str | None = None  # `provider:reason` of a stream that broke after it began, unfinished


_current: ContextVar[Served | None] = ContextVar("agent_reach_served", default=None)


def track(request: Request) -> None:
    """Give `request` its `Served` record and make it current for the task serving it."""
    served = request[SERVED] = Served()
    _current.set(served)


def observe(event: Event) -> None:
    """An engine observer: counts the current request's attempts and notes who answered; a
    learned output cap is a line of its own."""
    if isinstance(event, CapEvent):
        before = "none" if event.before is None else event.before
        server_log.info(
            "learned output cap: %s model %s: %s → %d tokens (kept %g h; agent-reach caps)",
            event.provider,
            escaped(event.model, 100),
            before,
            event.tokens,
            event.keep_s / 3600,
        )
        return
    served = _current.get()
    if served is None:
        return
    if isinstance(event, AttemptEvent):
        attempt = event.attempt
        served.attempts.append(f"{attempt.who}:{attempt.label}")
        if served.provider is None:
            return
        if attempt.ok:  # another provider finished the answer that was cut, with its model
            served.provider, served.provider_model, served.cut = attempt.provider, event.model, None
        elif served.cut is None:  # the stream under way broke: the first cut is the one to tell
            served.cut = f"{attempt.provider}:{attempt.reason}"
    elif isinstance(event, RequestEvent):
        served.provider = event.provider
        served.model = event.model
        served.provider_model = event.provider_model


def stamp(at: float | None = None) -> str:
    """UTC time with milliseconds: `2026-11-30T13:22:20.123Z`."""
    now = time.time() if at is None else at
    return f"{_second(int(now))}.{int(now * 1000) % 1000:03d}Z"


@functools.lru_cache(maxsize=4)
def _second(second: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))


_pending: list[str] = []  # access lines not yet written
_stream: list[IO[str]] = []  # where they go, when not stderr (`configure`)


def flush() -> None:
    """Write the access lines made since the last write, in one write."""
    if _pending:
        lines = "".join(_pending)
        _pending.clear()
        out = _stream[0] if _stream else sys.stderr
        out.write(lines)
        out.flush()


atexit.register(flush)


class AccessLog:
    """The server's access-log hook. The line goes to stderr (not through `logging`: a log record
    per request would cost ten times as much) at the end of the loop's turn. It is on while
    the `agent_reach.access` logger is enabled for info."""

    def log(self, request: Request, status: int, time: float) -> None:
        served: Served | None = request.get(SERVED)
        _line(request.method, request.path, status, time, served or Served())

    def __init__(self, logger: logging.Logger) -> None:
        self.logger = logger

    @property
    def enabled(self) -> bool:
        return self.logger.isEnabledFor(logging.INFO)


def _line(method: str, path: str, status: int, time: float, served: Served) -> None:
    if not _pending:
        asyncio.get_running_loop().call_soon(flush)
    models = f"model={_word(served.model)}"
    if served.cut is None:
        who = f"provider={served.provider or '-'} provider_model={_word(served.provider_model)}"
        outcome = f"{status} {models} {who}"
    else:
        who = f"provider=- provider_model=- cut={served.cut}"
        outcome = f"{status} interrupted {models} {who}"
    _pending.append(
        f"{stamp()} {method} {escaped(path, 200) or '-'} {outcome}"
        f" attempts={','.join(served.attempts) or '-'} ms={round(time * 1000)}\n"
    )


def turn() -> Served:
    """A new `Served` record, current for the task serving it: one message of a WebSocket
    (the upgrade's request has its own)."""
    served = Served()
    _current.set(served)
    return served


def turn_line(path: str, status: int, time: float, served: Served) -> None:
    """The access line of one message of a WebSocket on `path` (method `WS`), when access
    lines are on."""
    if access_log.isEnabledFor(logging.INFO):
        _line("WS", path, status, time, served)


def _word(text: str | None) -> str:
    """A value from the client (a model name) as one word of the line, `-` when absent."""
    return escaped(text, 100).replace(" ", "\\x20") if text else "-"


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


def configure(level: str = "info", access: bool = True, stream: IO[str] | None = None) -> None:
    """Send every log record to stderr (or `stream`) as one line: ours at `level`, other
    libraries' at warning and above (everything at debug, with tracebacks); access lines
    unless `access` is False."""
    _stream[:] = [] if stream is None else [stream]
    handler = _AfterAccess(stream or sys.stderr)
    debug = level == "debug"
    handler.setFormatter(_OneLine(tracebacks=debug))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if debug else logging.WARNING)
    logging.getLogger("agent_reach").setLevel(level.upper())
    access_log.disabled = not access


def access_logger(access: bool) -> AccessLog | None:
    """What writes our access lines (or none at all)."""
    return AccessLog(access_log) if access else None
