"""File descriptors (protocol §14): every client connection, upstream socket and open file takes
one, and a process may hold `RLIMIT_NOFILE` of them (often 1024: shells, systemd).

At start the soft limit is raised to the hard one, and `server.max_connections` is clamped so
that each client connection may have one upstream socket open besides, with `RESERVE` left for
files (the state store, logs); the start says so when it clamps. At the cap a new connection
closes the one idle the longest (waiting for its first byte, or between requests), and only when
none is idle is it refused (each an `Episode`: one log line when it starts and one when it ends,
not one per socket), so that silent sockets cannot keep new clients out. Should the process
still run out, asyncio logs each failed `accept` and retries in a tight loop: `accept_batch`
keeps a burst of accepts within the spare descriptors, and `quiet_accept_errors` lets one
such line through every `ACCEPT_LOG_S`.
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
QUIET_S = 1.0  # an episode ends with a connection accepted this long after its last one
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


class Episode:
    """Something done to connection after connection (refusing new ones past the cap, closing
    idle ones to admit new ones), logged per episode: `starts` when it starts, `ends` (with the
    count) when a connection is accepted without it `QUIET_S` after the last time (an attacker
    refilling the cap as fast as it frees keeps one episode going)."""

    __slots__ = ("_ends", "_last", "_log", "_starts", "count")

    def __init__(self, log: logging.Logger, starts: str, ends: str) -> None:
        self._log = log
        self._starts = starts
        self._ends = ends  # with one %d: the count
        self.count = 0  # in the current episode
        self._last = 0.0  # when the last one was

    def happened(self) -> None:
        if self.count == 0:
            self._log.warning(self._starts)
        self.count += 1
        self._last = time.monotonic()

    def calm(self) -> None:
        if self.count and time.monotonic() - self._last >= QUIET_S:
            self._log.warning(self._ends, self.count)
            self.count = 0


def refusals(log: logging.Logger, cap: int) -> Episode:
    """New connections refused (503): every one of the `cap` is busy with a request."""
    starts = f"refusing new connections (503): {cap} open (server.max_connections)"
    return Episode(log, starts, "accepting connections again after refusing %d")


def evictions(log: logging.Logger, cap: int) -> Episode:
    """Idle connections closed to admit new ones, the longest idle first (as nginx does)."""
    starts = f"closing idle connections for new ones: {cap} open (server.max_connections)"
    return Episode(log, starts, "closed %d idle connections for new ones")


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
