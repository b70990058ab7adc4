"""File descriptors (protocol §14): every client connection, upstream socket and open file takes
one, and a process may hold `RLIMIT_NOFILE` of them (often 1024: shells, systemd).

At start the soft limit is raised to the hard one, and `server.max_connections` is clamped so
that each client connection may have one upstream socket open besides, with `RESERVE` left for
files (the state store, logs); the start says so when it clamps. Past the cap new connections
are refused (`Refusals`: one log line when refusing starts and one when it ends, not one per
socket). Should the process still run out, asyncio logs each failed `accept` and retries in a
tight loop: `accept_batch` keeps a burst of accepts within the spare descriptors, and
`quiet_accept_errors` lets one such line through every `ACCEPT_LOG_S`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

try:
    import resource
except ImportError:  # Windows: no such limit to raise
    resource = None  # type: ignore[assignment]

RESERVE = 64  # descriptors kept for files and listening sockets
ACCEPT_LOG_S = 10.0  # at most one "accept failed" line this often
QUIET_S = 1.0  # an episode of refusals ends with a connection accepted this long after the last
_ACCEPT_FAILED = "socket.accept() out of system resource"


def raise_limit() -> int | None:
    """Raise the soft RLIMIT_NOFILE to the hard limit; the limit now in force (None: none)."""
    if resource is None:
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = hard if hard != resource.RLIM_INFINITY else max(soft, 2**20)
    if wanted > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (ValueError, OSError):  # e.g. above the kernel's nr_open: keep the soft one
            pass
    return None if soft == resource.RLIM_INFINITY else soft


def connection_cap(configured: int, nofile: int | None) -> int:
    """`max_connections` as it can be kept with `nofile` descriptors: each client connection
    with one upstream socket, `RESERVE` for the rest."""
    if nofile is None:
        return configured
    return max(1, min(configured, (nofile - RESERVE) // 2))


def accept_batch(cap: int) -> int:
    """The listening socket's backlog for a connection cap of `cap`, which is also how many
    connections asyncio accepts in one go, before any is refused: a quarter of the cap, so that
    a burst cannot take the descriptors kept for upstream sockets (2048 at most)."""
    return max(16, min(2048, cap // 4))


class Refusals:
    """Connections refused past the cap, logged per episode: one line when refusing starts,
    one (with the count) when a connection is accepted `QUIET_S` after the last refusal (an
    attacker refilling the cap as fast as it frees keeps one episode going)."""

    __slots__ = ("_last", "_log", "count")

    def __init__(self, log: logging.Logger) -> None:
        self._log = log
        self.count = 0  # refused in the current episode
        self._last = 0.0  # when the last one was

    def refused(self, cap: int) -> None:
        if self.count == 0:
            self._log.warning(
                "refusing new connections (503): %d open (server.max_connections)", cap
            )
        self.count += 1
        self._last = time.monotonic()

    def accepted(self) -> None:
        if self.count and time.monotonic() - self._last >= QUIET_S:
            self._log.warning("accepting connections again after refusing %d", self.count)
            self.count = 0


def quiet_accept_errors(loop: asyncio.AbstractEventLoop, log: logging.Logger) -> None:
    """Make `loop` log a failed `accept` (out of descriptors) at most once every
    `ACCEPT_LOG_S`, with how many were left out; other errors go to its handler as before."""
    last = [-ACCEPT_LOG_S, 0]  # when the last line was written, failures since

    def handle(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if context.get("message") != _ACCEPT_FAILED:
            loop.default_exception_handler(context)
            return
        now = loop.time()
        if now - last[0] < ACCEPT_LOG_S:
            last[1] += 1
            return
        more = f" ({last[1]} more since the last such line)" if last[1] else ""
        log.warning("cannot accept a connection: %s%s", context.get("exception"), more)
        last[0], last[1] = now, 0

    loop.set_exception_handler(handle)
