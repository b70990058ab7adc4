"""Where upstream connections go and how many at once: an `Origin` (one pool each) and `Slots`
(at most so many exchanges at once, the longest waiting served first)."""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from dataclasses import dataclass

from ..core.proxies import Proxy


@dataclass(frozen=True, slots=True)
class Origin:
    """Where connections go: one pool each."""

    host: str
    port: int
    tls: ssl.SSLContext | None
    authority: bytes  # the Host header
    via: Proxy | None = None  # the proxy connections go through: CONNECT (https) or not (http)
    proxy_auth: bytes = b""  # an http origin's `Proxy-Authorization` line, through `via`

    @property
    def tunnelled(self) -> bool:
        """Whether connections go through a CONNECT tunnel (an https origin via a proxy)."""
        return self.via is not None and self.tls is not None


class Slots:
    """At most `limit` exchanges at once; the others wait, the longest waiting first (as with
    `asyncio.Semaphore`, whose `locked` walks its waiters in Python at every take: here a
    take while one is free is a subtraction)."""

    __slots__ = ("_free", "_waiters", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._free = limit
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def full(self) -> bool:
        return self._free <= 0 or bool(self._waiters)

    def grab(self) -> bool:
        """Take a slot that is free now (none is, while others wait); whether one was."""
        if self.full:
            return False
        self._free -= 1
        return True

    async def take(self) -> None:
        if self.grab():
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter  # `give` hands its slot over
        except BaseException:
            if waiter.done() and not waiter.cancelled():  # handed one as it was cancelled
                self.give()
            else:
                self._waiters.remove(waiter)
            raise

    def give(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self._free += 1
