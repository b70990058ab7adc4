"""Session affinity's pure parts (`engine/affinity.py`, `server/faces/sessions.py`): the home
after each turn, the order it gives, this process's bounded and expiring homes, and the
session ids each agent sends; and the library's caller, who names its session in the request's
`agent_reach.session`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent_reach import RequestError, Router
from agent_reach.chat.request import affinity_key
from agent_reach.core.routing import Walk
from agent_reach.engine.affinity import after
from agent_reach.server.faces.sessions import _claude_session, _conversation, _subagent
from agent_reach.state.homes import FRESH_S, Home, MemoryHomes, Shared, SQLiteHomes
from agent_reach.state.sqlite import SQLiteStore

from .fakes.upstream import Upstream, proxy_config


def test_home_is_the_first_seat_stays_through_a_failover_and_moves_after_enough() -> None:
    home = after(None, "a", 3)
    assert home == Home("a")
    assert after(home, "a", 3) is None  # unchanged: nothing to write
    away = after(home, "b", 3)
    assert away == Home("a", 1)  # served elsewhere once: home stays
    assert after(away, "a", 3) == Home("a")  # back home: the count starts again
    twice = after(away, "b", 3)
    assert twice == Home("a", 2)
    assert after(twice, "b", 3) == Home("b")  # the third turn away in a row moves it


def test_the_homes_provider_goes_first_when_it_is_in_the_order() -> None:
    def handed(order: tuple[str, ...], home: Home | None) -> list[str]:
        walk = Walk(order)
        if home is not None:
            walk.prefer(home.provider)
        return [pick[0] for pick in iter(lambda: walk.next(1.0), None)]  # type: ignore[index]

    assert handed(("x", "y", "z"), Home("z/KEY_2")) == ["z", "x", "y"]
    assert handed(("x", "y"), Home("gone")) == ["x", "y"]
    assert handed(("x", "y"), None) == ["x", "y"]


async def test_memory_homes_expire_and_keep_the_most_recently_used() -> None:
    homes = MemoryHomes(limit=2)
    await homes.set("s1", Home("a"), now=0, ttl_s=10)
    await homes.set("s2", Home("b"), now=0, ttl_s=10)
    assert await homes.get("s1", now=1) == Home("a")  # s1 used: s2 is the oldest now
    await homes.set("s3", Home("c"), now=1, ttl_s=10)
    assert await homes.get("s2", now=1) is None
    assert await homes.get("s1", now=10.5) is None  # expired
    await homes.forget("s3")
    assert await homes.get("s3", now=2) is None


@pytest.mark.parametrize(
    ("user_id", "session"),
    [
        (json.dumps({"device_id": "d", "account_uuid": "", "session_id": "abc-1"}), "abc-1"),
        (
            "user_0f1e_account__session_5b2c7c1e-0a8d-4f5e-9d3b-6a7c8e9f0a1b",
            "5b2c7c1e-0a8d-4f5e-9d3b-6a7c8e9f0a1b",
        ),
        ("a user of the client's own", None),
        ("{not json", None),
    ],
)
def test_claude_codes_session_in_its_user_id(user_id: str, session: str | None) -> None:
    assert _claude_session(user_id) == session


def test_a_conversation_is_known_from_its_second_turn_by_its_opening() -> None:
    opening = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "fix it"}]
    assert _conversation(opening) is None  # a first turn: nothing to keep a cache for
    second = [
        *opening,
        {"role": "assistant", "content": "done"},
        {"role": "user", "content": "and?"},
    ]
    third = [*second, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "more"}]
    assert _conversation(second) == _conversation(third) is not None
    other = [{"role": "user", "content": "other"}, {"role": "assistant", "content": "x"}]
    assert _conversation(other) != _conversation(second)


def test_a_session_is_scoped_by_its_client_key() -> None:
    assert affinity_key("owner-a", "s") != affinity_key("owner-b", "s")
    assert affinity_key("owner-a", "s") == affinity_key("owner-a", "s")


def test_a_claude_code_subagent_is_a_session_of_its_own() -> None:
    billing = (
        "x-anthropic-billing-header: cc_version=2.1.332; cc_entrypoint=cli; cc_is_subagent=true;"
    )
    explorer = [{"type": "text", "text": billing}, {"type": "text", "text": "You explore code."}]
    planner = [{"type": "text", "text": billing}, {"type": "text", "text": "You plan work."}]
    main = [{"type": "text", "text": billing.replace(" cc_is_subagent=true;", "")}]
    assert _subagent({"system": main}) is None
    assert _subagent({"system": "You are Claude Code."}) is None
    a, b = _subagent({"system": explorer}), _subagent({"system": planner})
    assert a is not None
    assert b is not None
    assert a != b
    assert _subagent({"system": explorer}) == a  # the same kind of subagent, the same key


async def test_two_processes_share_homes_through_sqlite_each_with_a_fresh_view(
    tmp_path: Path,
) -> None:
    """Two processes' homes over one SQLite file: what one sets the other reads; a read
    within `FRESH_S` is this process's view (no round trip), after it the file again."""
    stores = [SQLiteStore(str(tmp_path / "state.db")) for _ in range(2)]
    try:
        a, b = (Shared(SQLiteHomes(s, 100), 100) for s in stores)
        await a.set("s", Home("p1"), now=0, ttl_s=100)
        assert await b.get("s", now=1) == Home("p1")
        await a.set("s", Home("p2"), now=1.5, ttl_s=100)
        assert await b.get("s", now=2) == Home("p1")  # its view, read at 1: fresh still
        assert await b.get("s", now=1 + FRESH_S) == Home("p2")  # stale: read again
        await b.forget("s")
        assert await a.get("s", now=10) is None
    finally:
        for store in stores:
            await store.aclose()


async def test_a_library_caller_names_its_session_in_the_extension(up: Upstream) -> None:
    """Under `balance: weighted` over three providers, the turns of a session named in
    `agent_reach.session` all go where its first went, and reach the provider's
    `session_header` as one key; requests that name none are drawn by weight."""
    names = ("p1", "p2", "p3")
    providers = [up.provider("ok", name=n, api_key_env="", session_header="x-conv") for n in names]
    cfg = proxy_config(providers, balance="weighted")

    def turn(session: str | None) -> dict[str, object]:
        ext = {} if session is None else {"agent_reach": {"session": session}}
        return {"model": "m", "messages": [{"role": "user", "content": "hi"}], **ext}

    async with Router(cfg) as router:
        kept = {(await router.achat(turn("s-1"))).provider for _ in range(12)}
        spread = {(await router.achat(turn(None))).provider for _ in range(30)}
        with pytest.raises(RequestError) as info:
            await router.achat(turn(""))
    assert len(kept) == 1
    assert len(spread) > 1  # one provider for 30 weighted draws: 3 * 3**-30
    conv = [r.headers.get("x-conv") for r in up.received]
    assert conv[:12] == [affinity_key("", "s-1")] * 12
    assert set(conv[12:]) == {None}
    assert info.value.param == "agent_reach"
