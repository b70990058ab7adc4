"""Redis as a fleet's one circuit (protocol §12.1), with in-process stores on a real redis-server:
failures counted across instances, openings published, one half-open trial."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable

import pytest

from agent_reach.config import CircuitConfig
from agent_reach.core.breaker import CLOSED, CircuitState, admit, record
from agent_reach.core.trace import Reason
from agent_reach.state.redis import RedisStore

POLICY = CircuitConfig(failures=4, cooldown_s=30, auth_cooldown_s=300)
KEY = "p@0123456789ab"

Fleet = Callable[[int], list[RedisStore]]


@pytest.fixture
async def fleet(redis_url: str) -> AsyncIterator[Fleet]:
    made: list[RedisStore] = []
    changes: list[tuple[str, CircuitState, CircuitState]] = []

    def make(n: int) -> list[RedisStore]:
        for _ in range(n):
            store = RedisStore(redis_url)
            store.follow(POLICY, lambda k, b, a: changes.append((k, b, a)))
            made.append(store)
        return made[-n:]

    yield make
    for store in made:
        await store.aclose()


async def fail(store: RedisStore, reason: Reason = Reason.SERVER_ERROR) -> CircuitState:
    """What the engine does after a failed attempt: record it and write the new state."""
    before = await store.circuit(KEY)
    after = record(before, reason, time.time(), POLICY)
    if after != before:
        await store.set_circuit(KEY, after)
    return after


async def until(condition: Callable[[], bool], timeout: float = 2.0) -> float:
    start = time.perf_counter()
    while not condition():
        assert time.perf_counter() - start < timeout, "timed out"
        await asyncio.sleep(0.002)
    return time.perf_counter() - start


async def test_failures_add_up_across_instances_and_the_opening_is_published(
    fleet: Fleet,
) -> None:
    stores = fleet(4)
    for s in stores:  # subscribe
        await s.circuit(KEY)
    await asyncio.sleep(0.2)
    # one failure at each instance: no instance alone reaches 4, the fleet does
    for s in stores:
        assert (await fail(s)).closed
        await s.settle()
    now = time.time()
    opened = [s for s in stores if s.circuits.get(KEY, CLOSED).is_open(now)]
    assert opened, "the fleet's fourth failure opens the circuit"
    await until(lambda: all(s.circuits.get(KEY, CLOSED).is_open(time.time()) for s in stores))
    assert {s.circuits[KEY].cause for s in stores} == {"server_error"}


async def test_a_success_resets_the_fleet_count(fleet: Fleet) -> None:
    a, b = fleet(2)
    for _ in range(3):
        await fail(a)
    await a.settle()
    await b.refresh()
    assert (await b.circuit(KEY)).failures == 3
    await b.set_circuit(KEY, CLOSED)  # b's success
    await b.settle()
    await until(lambda: a.circuits.get(KEY, CLOSED) == CLOSED)
    await fail(a)
    await a.settle()
    assert (await a.circuit(KEY)).closed  # counting starts again from one


async def test_one_half_open_trial_across_the_fleet(fleet: Fleet) -> None:
    stores = fleet(4)
    cooled = CircuitState(4, time.time() - 1, False, "server_error")
    await stores[0].set_circuit(KEY, cooled)
    await stores[0].settle()
    for s in stores:
        await s.refresh()
    now = time.time()
    admitted = 0
    for _ in range(5):  # every instance asks, several times, as requests come in
        for s in stores:
            state = await s.circuit(KEY)
            if state.is_open(time.time()):
                continue
            _, leased = admit(state, now, 5.0)
            admitted += await s.lease(KEY, leased)
        await asyncio.gather(*(s.settle() for s in stores))
    assert admitted == 1


async def test_every_key_has_a_ttl(fleet: Fleet) -> None:
    (a,) = fleet(1)
    await fail(a)
    await a.set_circuit("q@0123456789ab", CircuitState(1, time.time() + 30, False, "timeout"))
    await a.add_usage(KEY, "day:2026-11-30|req", 1, 3600)
    await a.claim("alert", time.time() + 30, time.time())
    await a.flush()
    keys = [k async for k in a.redis.scan_iter(match="agent-reach:*")]
    assert len(keys) >= 4
    for key in keys:
        if key != "agent-reach:attempts":
            assert await a.redis.ttl(key) > 0, key
