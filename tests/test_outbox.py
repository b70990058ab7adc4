"""The outbox (`agent_reach.outbox`): writes of one turn of the loop go out together at its end,
in order, on real sockets (socket pairs: the far end is read without the loop)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import pytest

from agent_reach.net.outbox import Outbox

Ends = list[tuple[asyncio.WriteTransport, socket.socket]]
MOST = 2**16


@pytest.fixture
async def ends() -> AsyncIterator[Ends]:
    """Three transports, each with the raw socket at its far end (non-blocking)."""
    loop = asyncio.get_running_loop()
    made: Ends = []
    for _ in range(3):
        near, far = socket.socketpair()
        far.setblocking(False)
        transport, _ = await loop.create_connection(asyncio.Protocol, sock=near)
        made.append((transport, far))
    yield made
    for transport, far in made:
        transport.close()
        far.close()


def received(far: socket.socket) -> bytes:
    try:
        return far.recv(65536)
    except BlockingIOError:
        return b""


async def test_the_turns_first_write_goes_at_once_the_rest_at_its_end_in_order(ends: Ends) -> None:
    outbox = Outbox(MOST)
    (one, one_far), (two, two_far), _ = ends
    outbox.write(one, b"first ")
    assert received(one_far) == b"first "  # the turn's first: at once
    outbox.write(two, b"other")
    outbox.write(one, b"second")
    assert received(one_far) == received(two_far) == b""  # the rest: not before the turn ends
    await asyncio.sleep(0)
    assert received(one_far) == b"second"
    assert received(two_far) == b"other"
    outbox.write(two, b"next turn")  # a new turn's first
    assert received(two_far) == b"next turn"


async def test_what_is_held_waits_for_the_turns_end_even_first(ends: Ends) -> None:
    outbox = Outbox(MOST)
    (one, one_far), (two, two_far), _ = ends
    outbox.hold(one, b"a chunk")
    outbox.write(two, b"an answer")  # the turn is under way: held behind it
    outbox.hold(one, b", another")
    assert received(one_far) == received(two_far) == b""
    await asyncio.sleep(0)
    assert received(one_far) == b"a chunk, another"
    assert received(two_far) == b"an answer"


async def test_flush_sends_what_is_pending_at_once(ends: Ends) -> None:
    outbox = Outbox(MOST)
    (one, one_far), (two, two_far), _ = ends
    outbox.hold(one, b"before a close")
    outbox.hold(two, b"too")
    outbox.flush()  # what `Connection.close` does first
    assert received(one_far) == b"before a close"
    assert received(two_far) == b"too"
    await asyncio.sleep(0)  # the end of the turn finds nothing left
    assert received(one_far) == received(two_far) == b""


async def test_a_transport_closed_before_the_end_of_the_turn_gets_nothing(
    ends: Ends, caplog: pytest.LogCaptureFixture
) -> None:
    outbox = Outbox(MOST)
    (one, one_far), (two, two_far), _ = ends
    for _ in range(6):  # asyncio warns of writes to a lost connection from the fifth on
        outbox.hold(one, b"dropped")
    outbox.hold(two, b"sent")
    one.close()  # say the client went away: what was for it is neither written nor warned of
    await asyncio.sleep(0)
    assert received(one_far) == b""  # the end of the stream: nothing came before it
    assert received(two_far) == b"sent"
    assert not caplog.records


class _Paused(asyncio.Protocol):
    def __init__(self) -> None:
        self.paused = False

    def pause_writing(self) -> None:
        self.paused = True


async def test_a_transport_whose_reader_is_behind_is_written_at_once_and_pauses_then() -> None:
    near, far = socket.socketpair()
    far.setblocking(False)
    near.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    transport, protocol = await asyncio.get_running_loop().create_connection(_Paused, sock=near)
    transport.set_write_buffer_limits(high=64 * 1024)
    try:
        while not transport.get_write_buffer_size():  # the far end reads nothing: fill it
            transport.write(b"x" * 4096)
        outbox = Outbox(MOST)
        other_near, other_far = socket.socketpair()
        other_far.setblocking(False)
        other, _ = await asyncio.get_running_loop().create_connection(
            asyncio.Protocol, sock=other_near
        )
        outbox.hold(other, b"pending")  # a healthy reader's: held to the end of the turn
        held = transport.get_write_buffer_size()
        outbox.write(transport, b"y" * 128 * 1024)
        assert transport.get_write_buffer_size() == held + 128 * 1024  # written now
        assert protocol.paused  # over its high-water mark: paused now, not at the turn's end
        assert received(other_far) == b"pending"  # what was pending went first
        other.close()
        other_far.close()
    finally:
        transport.abort()
        far.close()


async def test_a_write_past_most_held_for_its_transport_goes_at_once_after_the_rest(
    ends: Ends,
) -> None:
    outbox = Outbox(MOST)
    (one, one_far), (two, two_far), _ = ends
    outbox.hold(two, b"other")
    outbox.hold(one, b"a" * (MOST - 1))
    outbox.hold(one, b"b")  # exactly `most` held: still held
    assert received(one_far) == received(two_far) == b""
    outbox.hold(one, b"c")  # one byte more: what is held goes, then this
    assert received(two_far) == b"other"
    got = b""
    while len(got) < MOST + 1:
        more = received(one_far)
        assert more
        got += more
    assert got == b"a" * (MOST - 1) + b"bc"
    outbox.hold(one, b"d")  # held again: what went was counted off
    assert received(one_far) == b""
    await asyncio.sleep(0)
    assert received(one_far) == b"d"
