"""Writes made during one turn of the event loop, sent together at its end.

A write to a socket whose reader sleeps wakes that reader, and on a VM waking a sleeping peer
is the dearest part of a write: at 32 requests in flight, 13 % of the proxy's CPU went to it
(`sock_def_readable`, `perf`), two wakes per request. Written one after another at the end of
the turn, the writes of every request answered in it wake each reader once: 276 → 194 µs of
CPU per request (docs/decisions.md). A turn is short (what is ready runs, then this), so a write
waits microseconds; at one request in flight it costs one more poll of nothing.

An `Outbox` belongs to one loop (the server's, the upstream client's). Whoever writes through it
writes every byte of that transport through it, so that they go out in order, and flushes it
before closing the transport. A transport closed before the end of the turn gets nothing.
"""

from __future__ import annotations

import asyncio


class Outbox:
    """Bytes for transports, written in the order given at the end of the loop's turn, or
    at `flush`."""

    __slots__ = ("_pending",)

    def __init__(self) -> None:
        self._pending: list[tuple[asyncio.WriteTransport, bytes]] = []

    def write(self, transport: asyncio.WriteTransport, data: bytes) -> None:
        if not self._pending:
            asyncio.get_running_loop().call_soon(self.flush)
        self._pending.append((transport, data))

    def flush(self) -> None:
        pending, self._pending = self._pending, []
        for transport, data in pending:
            if not transport.is_closing():
                transport.write(data)
