"""Writes made during one turn of the event loop, sent together at its end.

A write to a socket whose reader sleeps wakes that reader, and on a VM waking a sleeping peer
is the dearest part of a write (`sock_def_readable` in `perf`), two wakes per request. Written
one after another, the writes of every request answered in a turn wake each reader about once
(docs/decisions.md has the figures).

The turn's first write goes at once (`write`), and what follows it in the turn is held to the
turn's end: the first wakes its reader while the rest of the turn runs, and a request alone
waits for nothing (held too, each write would wait for the rest of the turn: the end of its
task, the teardown of its values). A stream's chunks are all held
(`hold`): a relay's chunks per second count there, not a chunk's microseconds.

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
    """Bytes for transports, written in the order given: the turn's first `write` at once, the
    rest at the end of the loop's turn (or at `flush`); at most `most` bytes held for one
    transport (64 KB: a stream's relay, moving up to 16 KB a read, seldom reaches it; 16 KB
    cost streams a third of what holding gained them)."""

    __slots__ = ("_open", "_pending", "_sizes", "most")

    def __init__(self, most: int = 2**16) -> None:
        self._pending: list[tuple[asyncio.WriteTransport, bytes]] = []
        self._sizes: dict[asyncio.WriteTransport, int] = {}  # what is pending, per transport
        self._open = False  # a turn's first write went: the turn's end is to come
        self.most = most

    def write(self, transport: asyncio.WriteTransport, data: bytes) -> None:
        """`data` at once if it is the turn's first write, else at the turn's end."""
        if self._open:
            self.hold(transport, data)
        else:
            self._begin()
            transport.write(data)

    def hold(self, transport: asyncio.WriteTransport, data: bytes) -> None:
        """`data` at the turn's end (or at once, after what is pending: see the module)."""
        size = self._sizes.get(transport, 0) + len(data)
        if size > self.most or transport.get_write_buffer_size():
            self.flush()
            transport.write(data)
            return
        if not self._open:
            self._begin()
        self._pending.append((transport, data))
        self._sizes[transport] = size

    def _begin(self) -> None:
        self._open = True
        asyncio.get_running_loop().call_soon(self._end)

    def _end(self) -> None:
        self._open = False
        self.flush()

    def flush(self) -> None:
        """Write what is pending, now."""
        pending, self._pending = self._pending, []
        self._sizes.clear()
        for transport, data in pending:
            if not transport.is_closing():
                transport.write(data)
