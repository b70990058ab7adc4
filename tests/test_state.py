"""State stores: shared between instances, de-duplicating, logging, and failing safe."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_reach import Router
from agent_reach.core.breaker import CLOSED, CircuitState
from agent_reach.core.outcomes import Outcome
from agent_reach.core.routing import Health
from agent_reach.core.trace import Reason
from agent_reach.state import Keep, LearnedCap, LoggedAttempt, MemoryStore, open_store
from agent_reach.state.cached import CachedStore
from agent_reach.state.memory import MAX_CAPS, Kept, overflow
from agent_reach.state.redis import RedisStore
from agent_reach.state.sqlite import SQLiteStore

from .fakes.upstream import Upstream
from .services import RedisServer

OPEN = CircuitState(3, 1_900_000_000.0, False, "server_error")
NOW = time.time()

Factory = Callable[[], CachedStore]


@pytest.fixture(params=["sqlite", pytest.param("redis", marks=pytest.mark.redis)])
async def make(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Factory]:
    """Stores of one kind that share one backend."""
    url = (
        f"sqlite:///{tmp_path}/state.db"
        if request.param == "sqlite"
        else request.getfixturevalue("redis_url")
    )
    stores: list[CachedStore] = []

    def new() -> CachedStore:
        store = open_store(url)
        assert isinstance(store, CachedStore)
        store.refresh_s = 0  # always re-read, so the tests see each other's writes at once
        stores.append(store)
        return store

    yield new
    for store in stores:
        await store.aclose()


async def settle(*stores: CachedStore) -> None:
    """Wait until queued writes have reached the backend."""
    for store in stores:
        await store._flush()
        await store.settle()


async def test_circuits_are_shared(make: Factory) -> None:
    a, b = make(), make()
    assert await b.circuit("p") == CLOSED
    await a.set_circuit("p", OPEN)
    await settle(a)
    await b.refresh()
    assert await b.circuit("p") == OPEN
    await b.set_circuit("p", CLOSED)
    await settle(b)
    await a.refresh()
    assert await a.circuit("p") == CLOSED


async def test_learned_output_caps_are_shared_and_only_go_down(make: Factory) -> None:
    a, b = make(), make()
    key, day = "ds@x|deepseek-chat", NOW + 86400
    assert await b.cap(key, NOW) is None
    assert await a.set_cap(key, LearnedCap(8192, day), NOW) is None
    await settle(a)
    await b.refresh()
    assert await b.cap(key, NOW) == 8192
    assert await b.set_cap(key, LearnedCap(16384, day), NOW) == 8192  # a higher one: not kept
    await b.set_cap(key, LearnedCap(4096, day), NOW)
    await settle(b)
    await a.refresh()
    assert await a.cap(key, NOW) == 4096
    assert await make().cap(key, NOW) == 4096  # a new process reads it


async def test_learned_output_caps_expire_and_are_forgotten_everywhere(make: Factory) -> None:
    """Issue 40, 1: a TTL in every store, and `caps --forget` reaching every process."""
    a, b = make(), make()
    await a.set_cap("ds@x|m", LearnedCap(8192, time.time() + 0.5), NOW)
    await a.set_cap("ds@x|n", LearnedCap(4096, NOW + 86400), NOW)
    await a.set_cap("kimi@y|m", LearnedCap(2048, NOW + 86400), NOW)
    await settle(a)
    await b.refresh()
    assert sorted(await b.learned_caps(NOW)) == ["ds@x|m", "ds@x|n", "kimi@y|m"]
    await asyncio.sleep(0.6)
    assert await b.cap("ds@x|m", time.time()) is None  # its day is over
    assert await make().cap("ds@x|m", time.time()) is None  # and the backend let it go
    assert await b.forget_caps(time.time(), "ds@") == 1
    await a.refresh()
    assert sorted(await a.learned_caps(time.time())) == ["kimi@y|m"]
    assert await a.forget_caps(time.time()) == 1
    assert await make().learned_caps(time.time()) == {}


async def test_a_store_keeps_a_bounded_number_of_learned_caps() -> None:
    store = MemoryStore()
    for i in range(MAX_CAPS + 50):
        await store.set_cap(f"p@x|model-{i}", LearnedCap(4096, NOW + 86400 + i), NOW)
    kept = await store.learned_caps(NOW)
    assert len(kept) == MAX_CAPS
    assert "p@x|model-0" not in kept  # the one to expire first went first
    assert f"p@x|model-{MAX_CAPS + 49}" in kept


async def test_usage_counters_are_shared(make: Factory) -> None:
    a, b = make(), make()
    assert await a.add_usage("p", "day:2026-11-30|req", 3, 3600) == 3
    await settle(a)
    await b.add_usage("p", "day:2026-11-30|req", 2, 3600)
    await settle(b)
    await a.refresh()
    assert await a.usage("p", "day:2026-11-30|req") == 5
    assert await b.usage("p", "day:2026-11-30|req") == 5
    assert await a.usage("p", "day:2026-12-01|req") == 0


async def test_reservations_never_pass_the_limit_across_instances(make: Factory) -> None:
    stores = [make(), make(), make()]
    key = "day:2026-11-30|req"
    taken = await asyncio.gather(*(s.reserve("p", key, 4, 3600) for s in stores * 5))
    assert sorted(t for t in taken if t is not None) == [1, 2, 3, 4]
    await stores[0].release("p", key, 3600)
    assert await stores[1].reserve("p", key, 4, 3600) == 4
    assert await stores[2].reserve("p", key, 4, 3600) is None
    memory = MemoryStore()
    assert [await memory.reserve("p", key, 1, 3600) for _ in range(2)] == [1, None]
    await memory.release("p", key, 3600)
    assert await memory.usage("p", key) == 0


async def test_a_reservation_of_several_takes_all_or_none(make: Factory) -> None:
    """An embeddings try sends one request per batch, and takes them all before it starts."""
    a, b = make(), make()
    key = "day:2026-12-06|req"
    assert await a.reserve("p", key, 5, 3600, 3) == 3
    assert await b.reserve("p", key, 5, 3600, 3) is None  # two are left
    assert await b.reserve("p", key, 5, 3600, 2) == 5
    await a.release("p", key, 3600, 2)
    assert await b.reserve("p", key, 5, 3600, 3) is None
    assert await b.reserve("p", key, 5, 3600, 2) == 5


async def test_claims_deduplicate_across_instances(make: Factory) -> None:
    a, b = make(), make()
    now = time.time()
    assert await a.claim("alert:x", now + 0.3, now)
    assert not await b.claim("alert:x", now + 0.3, now)
    assert not await a.claim("alert:x", now + 0.3, now)
    await asyncio.sleep(0.4)
    now = time.time()
    assert await b.claim("alert:x", now + 60, now)  # the first claim has expired


async def test_attempt_log_is_batched_and_read_back(make: Factory) -> None:
    a = make()
    now = time.time()
    for i in range(5):
        a.record(LoggedAttempt(now - 5 + i, f"r{i}", "default", "p", "ok", 200, 1.5 * i, True))
    await asyncio.sleep(a.flush_s + 0.3)  # the batch is written without anyone asking
    b = make()
    got = await b.attempts(now - 4)
    assert [x.request for x in got] == ["r1", "r2", "r3", "r4"]
    assert got[0] == LoggedAttempt(now - 4, "r1", "default", "p", "ok", 200, 1.5, True)


async def test_health_results_are_shared_until_they_expire(make: Factory) -> None:
    a, b = make(), make()
    sick = Health(
        False, time.time(), Outcome(Reason.CONNECT_FAILED, None, "connection refused"), ms=1.5
    )
    listed = Health(True, time.time(), Outcome(Reason.OK), frozenset({"m1", "m2"}), ms=3.0)
    await a.set_health("dead", sick, 0.5)
    await a.set_health("good", listed, 60)
    await settle(a)
    assert await b.health("dead") == sick
    assert await b.health("good") == listed
    assert await b.health("other") is None
    if isinstance(a, RedisStore):  # every key carries a TTL
        ttl_ms = await a.redis.pttl("agent-reach:health:dead")
        assert 0 < ttl_ms <= 500
    await asyncio.sleep(0.6)
    c = make()  # a new process: the expired result is gone, the live one is there
    assert await c.health("dead") is None
    assert await c.health("good") == listed


async def test_memory_store_has_the_same_interface() -> None:
    m = MemoryStore()
    await m.set_circuit("p", OPEN)
    assert await m.circuit("p") == OPEN
    assert await m.add_usage("p", "k", 2, 10) == 2
    assert await m.claim("c", NOW + 5, NOW)
    assert not await m.claim("c", NOW + 5, NOW)
    m.record(LoggedAttempt(NOW, "r", "default", "p", "ok", 200, 1.0, True))
    assert len(await m.attempts(NOW - 1)) == 1


async def test_sqlite_unavailable_logs_once_and_keeps_working(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    store = SQLiteStore(str(blocker / "state.db"))
    with caplog.at_level(logging.WARNING, logger="agent_reach"):
        assert await store.circuit("p") == CLOSED
        await store.set_circuit("p", OPEN)
        assert await store.circuit("p") == OPEN  # in memory
        assert await store.add_usage("p", "k", 1, 10) == 1
        await settle(store)
        await store.aclose()
    warnings = [r.getMessage() for r in caplog.records if "is down" in r.getMessage()]
    assert len(warnings) == 1
    assert "routing on in-memory state" in warnings[0]


async def test_redis_down_then_back(
    redis_server: RedisServer, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = RedisStore(redis_url)
    store.refresh_s = 0
    store.retry_s = 0.2
    with caplog.at_level(logging.WARNING, logger="agent_reach"):
        await store.set_circuit("p", OPEN)
        await settle(store)
        redis_server.kill()
        start = time.perf_counter()
        for _ in range(20):
            assert await store.circuit("p") == OPEN  # the view keeps answering
            await store.add_usage("p", "k", 1, 60)
        assert time.perf_counter() - start < 3
        redis_server.start()
        await asyncio.sleep(0.3)
        await store.set_circuit("q", OPEN)
        await settle(store)
        await store.aclose()
    messages = [r.getMessage() for r in caplog.records]
    assert sum("is down" in m for m in messages) == 1
    assert any("is back" in m for m in messages)
    assert "redis://127.0.0.1" in next(m for m in messages if "is down" in m)


def test_open_store_by_url(tmp_path: Path) -> None:
    assert isinstance(open_store("memory://"), MemoryStore)
    store = open_store(f"sqlite:///{tmp_path}/x.db")
    assert isinstance(store, SQLiteStore)
    assert store.path == tmp_path / "x.db"
    home = open_store("sqlite:///~/.agent-reach/state.db")
    assert isinstance(home, SQLiteStore)
    assert home.path == Path("~/.agent-reach/state.db").expanduser()
    assert isinstance(open_store("redis://127.0.0.1:1/0"), RedisStore)


def test_sync_chat_keeps_shared_state_between_event_loops(tmp_path: Path, up: Upstream) -> None:
    config = {
        "state": f"sqlite:///{tmp_path}/s.db",
        "health": {"mode": "off"},
        "circuit": {"failures": 1, "cooldown_s": 60},
        "defaults": {"retries": 0},
        "providers": [
            {"name": "bad", "endpoint": up.url("server")},
            {"name": "good", "endpoint": up.url("backup")},
        ],
    }
    request = {"model": "gpt-test", "messages": [{"role": "user", "content": "hi"}]}
    first = Router(config).chat(request)
    assert [a.reason for a in first.trace] == ["server_error", "ok"]
    again = Router(config)  # a new router, as a new process would have
    assert [a.reason for a in again.chat(request).trace] == ["circuit_open", "ok"]
    assert [a.reason for a in again.chat(request).trace] == ["circuit_open", "ok"]


async def test_stored_responses_are_shared_and_expire(make: Factory) -> None:
    a, b = make(), make()
    now = time.time()
    await a.save_response("resp_1", '{"x": 1}', now, 60)
    await a.save_response("resp_old", '{"x": 0}', now - 120, 60)
    await settle(a)
    assert await b.load_response("resp_1", time.time()) == '{"x": 1}'
    assert await b.load_response("resp_old", time.time()) is None  # expired
    assert await b.load_response("resp_none", time.time()) is None
    assert await b.delete_response("resp_1", time.time())
    assert await a.load_response("resp_1", time.time()) is None  # deleted for every instance
    assert not await b.delete_response("resp_1", time.time())


async def test_memory_store_keeps_the_latest_responses() -> None:
    store = MemoryStore()
    for n in range(3):
        await store.save_response(f"r{n}", str(n), NOW, 60, Keep(max_count=2))
    assert await store.load_response("r0", NOW) is None
    assert await store.load_response("r2", NOW) == "2"
    assert await store.load_response("r2", NOW + 61) is None
    assert await store.delete_response("r1", NOW)
    assert not await store.delete_response("r1", NOW)


def record(owner: str, size: int) -> str:
    return json.dumps({"owner": owner, "pad": "x" * size})


async def test_stored_responses_are_evicted_oldest_first_past_their_caps(make: Factory) -> None:
    a, b = make(), make()
    now = time.time()
    caps = {"max_count": 4, "max_bytes": 10_000, "owner_max_count": 3, "owner_max_bytes": 2500}
    for n in range(4):  # the key's fourth pushes out its first
        await a.save_response(f"mine{n}", record("me", 100), now, 60, Keep("me", **caps))
        await settle(a)
    for n in range(2):  # big ones of its own push out its older ones
        await b.save_response(f"big{n}", record("me", 1000), now, 60, Keep("me", **caps))
        await settle(b)
    await b.save_response("huge", record("me", 2600), now, 60, Keep("me", **caps))  # too big
    await settle(b)
    for n in range(3):  # another key's: the store's count pushes out the oldest of all
        await a.save_response(f"theirs{n}", record("them", 100), now, 60, Keep("them", **caps))
        await settle(a)
    kept = [
        id
        for id in [f"mine{n}" for n in range(4)]
        + ["big0", "big1", "huge"]
        + [f"theirs{n}" for n in range(3)]
        if await b.load_response(id, time.time()) is not None
    ]
    assert kept == ["big1", "theirs0", "theirs1", "theirs2"]


async def test_the_sqlite_file_and_its_directory_are_private(tmp_path: Path) -> None:
    path = tmp_path / "home" / ".agent-reach" / "state.db"
    store = open_store(f"sqlite:///{path}")
    assert isinstance(store, SQLiteStore)
    await store.save_response("r", '{"a whole": "conversation"}', time.time(), 60)
    await settle(store)
    modes = {p.name: p.stat().st_mode & 0o777 for p in [path.parent, *path.parent.iterdir()]}
    await store.aclose()
    assert modes == {
        ".agent-reach": 0o700,
        "state.db": 0o600,
        "state.db-wal": 0o600,
        "state.db-shm": 0o600,
    }
    path.chmod(0o644)  # a file from before: made private when opened
    again = open_store(f"sqlite:///{path}")
    await again.usage("p", "k")
    await again.refresh()
    assert path.stat().st_mode & 0o777 == 0o600
    await again.aclose()


class Reference:
    """Stored responses as `MemoryStore` kept them before `Kept`: every save walks them all,
    drops every expired one and evicts what `memory.overflow` names."""

    def __init__(self) -> None:
        self.rows: dict[str, tuple[float, str, str]] = {}

    def save(self, id: str, data: str, expiry: float, now: float, keep: Keep) -> None:
        self.rows.pop(id, None)
        self.rows = {i: row for i, row in self.rows.items() if row[0] > now}
        self.rows[id] = (expiry, data, keep.owner)
        for evicted in overflow(((i, o, len(d)) for i, (_, d, o) in self.rows.items()), keep):
            del self.rows[evicted]

    def live(self, now: float) -> list[str]:
        return [i for i, row in self.rows.items() if row[0] > now]


SAVE = st.tuples(
    st.sampled_from("abcdefgh"),  # id
    st.sampled_from(["", "me", "them"]),  # owner
    st.integers(1, 40),  # size
    st.sampled_from([0, 0, 1, 3]),  # the clock steps on
    st.sampled_from([6, 6, 6, 1, 12]),  # ttl: mostly one, sometimes out of order
    st.booleans(),  # delete it instead
)


@given(st.lists(SAVE, max_size=40), st.integers(1, 4), st.integers(20, 120))
@settings(max_examples=500, deadline=None)
def test_kept_responses_evict_and_expire_as_a_walk_over_all_of_them(
    saves: list[tuple[str, str, int, int, int, bool]], owner_count: int, owner_bytes: int
) -> None:
    kept, reference = Kept(), Reference()
    now = 0.0
    for id, who, size, step, ttl, delete in saves:
        now += step
        if delete:
            kept.forget(id)
            reference.rows.pop(id, None)
            continue
        keep = Keep(who, max_count=4, max_bytes=150, owner_max_count=owner_count,
                    owner_max_bytes=owner_bytes)  # fmt: skip
        kept.save(id, "x" * size, now + ttl, now, keep)
        reference.save(id, "x" * size, now + ttl, now, keep)
        assert [i for i in kept.rows if kept.load(i, now)] == reference.live(now)
        assert kept.bytes == sum(len(d) for _, d, _ in kept.rows.values())


async def test_circuits_of_the_old_sqlite_layout_move_to_their_records(tmp_path: Path) -> None:
    """A state file whose circuits have a column per field: each moves to its record
    (`CircuitState.to_dict`), open as it was."""
    import sqlite3

    db = tmp_path / "state.db"
    conn = sqlite3.connect(db)
    conn.execute(
        "CREATE TABLE circuits (provider TEXT PRIMARY KEY, failures INTEGER NOT NULL, "
        "open_until REAL NOT NULL, trial INTEGER NOT NULL, cause TEXT NOT NULL)"
    )
    conn.execute("INSERT INTO circuits VALUES ('p@x', 3, 1900000000.0, 0, 'server_error')")
    conn.commit()
    conn.close()
    store = open_store(f"sqlite:///{db}")
    try:
        assert await store.circuit("p@x") == OPEN
    finally:
        await store.aclose()


def test_a_circuit_serializes_itself() -> None:
    state = CircuitState(2, 1_900_000_000.5, True, "timeout")
    assert CircuitState.from_dict(state.to_dict()) == state
    as_text = {"failures": "2", "open_until": "1900000000.5", "trial": "1", "cause": "timeout"}
    assert CircuitState.from_dict(as_text) == state  # a Redis hash
    assert CircuitState.from_dict({}) == CLOSED
    with pytest.raises(ValueError):  # noqa: PT011
        CircuitState.from_dict({"failures": "many"})
