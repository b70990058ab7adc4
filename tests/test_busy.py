"""Requests in flight shared by a fleet on Redis (`state/busy.py`, `balance: least_busy`): what
one instance has in flight, the other sees after a swap; a stopped instance's counts expire."""

from __future__ import annotations

import asyncio

import redis.asyncio as aioredis

from agent_reach.core.balance import Signals, arranged
from agent_reach.state import busy
from agent_reach.state.busy import Busy


async def settled(counts: Busy) -> None:
    """Wait for `counts`' swap with the fleet under way, if any, to end."""
    if counts._task is not None:
        await asyncio.wait_for(counts._task, 10)


async def test_an_instance_sees_what_the_others_have_in_flight(redis_url: str) -> None:
    a_redis = aioredis.from_url(redis_url, decode_responses=True)
    b_redis = aioredis.from_url(redis_url, decode_responses=True)
    a, b = Busy(a_redis, "a"), Busy(b_redis, "b")
    try:
        for _ in range(3):
            a.enter("slow")
        await settled(a)  # a's swap sent its counts
        b._at = 0.0
        b.enter("fast")
        b.leave("fast")
        await settled(b)  # b's swap read them
        assert b["slow"] == 3
        assert b["fast"] == 0
        order = arranged("least_busy", ("slow", "fast"), {}, Signals(lambda: 0.5, {}, b))
        assert order == ("fast", "slow")
        await a_redis.delete(f"{busy.PREFIX}busy:a")  # a stopped: its counts are gone
        b._at = 0.0
        b.enter("fast")
        await settled(b)
        assert b.get("slow", 0) == 0
    finally:
        await a.aclose()
        await b.aclose()
        await a_redis.aclose()
        await b_redis.aclose()
