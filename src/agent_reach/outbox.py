"""Writes made during one turn of the event loop, sent together at its end.

A write to a socket whose reader sleeps wakes that reader, and on a VM waking a sleeping peer
is the dearest part of a write: at 32 requests in flight, 13 % of the proxy's CPU went to it
(`sock_def_readable`, `perf`), two wakes per request. Written one after another at the end of
the turn, the writes of every request answered in it wake each reader once: 276 → 194 µs of
CPU per request (docs/decisions.md). A turn is short (what is ready runs, then this), so a write
waits microseconds; at one request in flight it costs one more poll of nothing.

Two kinds of write go out at once, after what is pending: one to a transport that already
holds bytes its reader has not taken (a client that reads slowly, or nothing: its writes would
wake no one), and one that would make what is pending for its transport more than `most` bytes.
A transport's `pause_writing` then comes as its bytes do, not at the end of the turn; else a
stream's relay would go on moving its upstream's reads (uvloop's are of up to 256 KB) into the
outbox until the turn ends, and an unread stream would hold that much more (bench/abuse.py:
157 → 265 KB per unread stream, until these two).

An `Outbox` belongs to one loop (the server's, the upstream client's). Whoever writes through it
writes every byte of that transport through it, so that they go out in order, and flushes it
before closing the transport. A transport closed before the end of the turn gets nothing.
"""

from __future__ import annotations

import asyncio


class Outbox:
    """Bytes for transports, written in the order given at the end of the loop's turn, or
    at `flush`; at most `most` bytes held for one transport (64 KB: a stream's relay, moving
    up to 16 KB a read, seldom reaches it; 16 KB cost a third of what holding gained it)."""

    __slots__ = ("_pending", "_sizes", "most")

    def __init__(self, most: int = 2**16) -> None:
        self._pending: list[tuple[asyncio.WriteTransport, bytes]] = []
        self._sizes: dict[asyncio.WriteTransport, int] = {}  # what is pending, per transport
        self.most = most

    def write(self, transport: asyncio.WriteTransport, data: bytes) -> None:
        size = self._sizes.get(transport, 0) + len(data)
        if size > self.most or transport.get_write_buffer_size():
            self.flush()
            transport.write(data)
            return
        if not self._pending:
            asyncio.get_running_loop().call_soon(self.flush)
        self._pending.append((transport, data))
        self._sizes[transport] = size

    def flush(self) -> None:
        pending, self._pending = self._pending, []
        self._sizes.clear()
        for transport, data in pending:
            if not transport.is_closing():
                transport.write(data)
