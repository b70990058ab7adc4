"""Request heads still arriving (protocol §14), so that clients who send theirs a byte at a time
cannot keep new clients out (issue 47): at `max_connections`, with no idle connection to close,
a new one closes the connection whose head began first, once it has had `GRACE_S` (a real
client's head comes in one piece, or a few within milliseconds); and one address may have at
most `server.max_pending_heads_per_ip` heads unfinished at once (as nginx's `limit_conn`), a
head past that answered 429 at once. Each is logged per episode (`descriptors.Episode`)."""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Generic, Protocol, TypeVar

from .descriptors import Episode

GRACE_S = 1.0  # how long a head may take before a new client may close its connection


class Closable(Protocol):
    def close(self, *, linger: bool = False) -> None: ...


C = TypeVar("C", bound=Closable)


class PendingHeads(Generic[C]):
    """The connections whose head has begun and is not complete, the first begun first, and
    how many each address has."""

    def __init__(self, log: logging.Logger, cap: int, per_ip: int) -> None:
        self.per_ip = per_ip
        self._began: OrderedDict[C, tuple[float, str | None]] = OrderedDict()
        self._by_ip: dict[str | None, int] = {}
        self.evictions = Episode(
            log,
            f"closing connections whose request heads are unfinished after {GRACE_S:g} s for "
            f"new ones: {cap} open (server.max_connections)",
            "closed %d connections with unfinished request heads for new ones",
        )
        self.refusals = Episode(
            log,
            f"refusing request heads past {per_ip} unfinished from one address (429, "
            "server.max_pending_heads_per_ip)",
            "accepting request heads again after refusing %d",
        )

    def begin(self, conn: C, ip: str | None, now: float) -> bool:
        """Count `conn`'s unfinished head (once); False when `ip` has `per_ip` already."""
        if conn in self._began:
            return True
        count = self._by_ip.get(ip, 0)
        if count >= self.per_ip:
            self.refusals.happened()
            return False
        self.refusals.calm()
        self._began[conn] = (now, ip)
        self._by_ip[ip] = count + 1
        return True

    def end(self, conn: C) -> None:
        """`conn`'s head is complete, or it is closed."""
        entry = self._began.pop(conn, None)
        if entry is None:
            return
        ip = entry[1]
        left = self._by_ip[ip] - 1
        if left:
            self._by_ip[ip] = left
        else:
            del self._by_ip[ip]

    def evict(self, now: float) -> C | None:
        """Close the connection whose head began first, if it began `GRACE_S` ago or more: it,
        or None."""
        for conn, (began, _) in self._began.items():
            if now - began < GRACE_S:
                return None
            self.end(conn)
            conn.close()
            self.evictions.happened()
            return conn
        return None

    def calm(self) -> None:
        self.evictions.calm()
