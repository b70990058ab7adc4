"""Sessions keep their home (issue 55, protocol §3.1) through `agent-reach serve`: a Claude
Code-shaped session (`metadata.user_id`'s `session_id`) under `balance: weighted` keeps the
provider that answered its first turn, fails over when it fails, and is home again on the next
turn; two client keys sending the same session id have homes of their own; a conversation with
no session id is known by its first messages; requests without a session keep their weights
(tests/e2e/test_balance.py). And `balance: least_busy` across a fleet on Redis."""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anthropic
import pytest

from ..fakes.upstream import Upstream, proxy_config
from .test_proxy import Proxy, start, stop

KEYS = ("sk-affinity-a-1f2e3d", "sk-affinity-b-4c5b6a")
CLAUDE = "claude-sonnet-4-6"


def config(up: Upstream) -> dict[str, Any]:
    def provider(name: str, scenario: str) -> dict[str, Any]:
        return {"name": name, "endpoint": up.url(scenario), "fallback_weight": 1}

    return proxy_config(
        [provider("home", "switch"), provider("other", "ok"), provider("third", "backup")],
        balance="weighted",
        server={"api_keys_env": "PROXY_KEYS"},
    )


def claude(proxy: Proxy, key: str = KEYS[0]) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=proxy.base, api_key=key, max_retries=0)


def turn(client: anthropic.Anthropic, session: str, n: int, **headers: str) -> tuple[str, str]:
    """Turn `n` of a Claude Code-shaped session: (who answered, the trace)."""
    messages: list[Any] = []
    for i in range(n):
        messages.append({"role": "user", "content": f"step {i}"})
        if i < n - 1:
            messages.append({"role": "assistant", "content": f"done {i}"})
    user_id = json.dumps({"device_id": "d" * 64, "account_uuid": "", "session_id": session})
    raw = client.messages.with_raw_response.create(
        model=CLAUDE,
        max_tokens=64,
        messages=messages,
        metadata={"user_id": user_id},
        extra_headers=headers,
    )
    return raw.headers["x-agent-reach-provider"], raw.headers["x-agent-reach-trace"]


@pytest.mark.parametrize("state", ["memory", "sqlite"])
def test_a_session_keeps_its_home_fails_over_and_comes_back(
    up: Upstream, tmp_path: Path, state: str
) -> None:
    where = "memory://" if state == "memory" else f"sqlite:///{tmp_path}/state.db"
    cfg = {**config(up), "state": where}
    proxy = start(cfg, tmp_path, up, env={"PROXY_KEYS": ",".join(KEYS)})
    try:
        client = claude(proxy)
        # its first turn goes where the route says: that is its home
        first, _ = turn(client, "s-1", 1, **{"X-Agent-Reach-Route": "home"})
        answered = [turn(client, "s-1", n)[0] for n in range(2, 7)]
        up.switch = "server"  # home fails: the turn fails over
        failed, trace = turn(client, "s-1", 7)
        up.switch = "ok"  # home is back: the next turn is home again
        back, _ = turn(client, "s-1", 8)
        # a session of its own, with no route: wherever its weight sends it, then kept there
        other = {turn(client, "s-2", n)[0] for n in range(1, 7)}
    finally:
        assert stop(proxy) == 0
    assert first == "home"
    assert answered == ["home"] * 5  # under weighted 1:1:1, six turns at home
    assert failed != "home"
    assert trace.startswith("home:server_error:")
    assert back == "home"
    assert len(other) == 1, other


def test_two_client_keys_with_one_session_id_have_homes_of_their_own(
    up: Upstream, tmp_path: Path
) -> None:
    proxy = start(config(up), tmp_path, up, env={"PROXY_KEYS": ",".join(KEYS)})
    try:
        a, b = claude(proxy, KEYS[0]), claude(proxy, KEYS[1])
        turn(a, "shared", 1, **{"X-Agent-Reach-Route": "home"})
        turn(b, "shared", 1, **{"X-Agent-Reach-Route": "other"})
        homes: Counter[tuple[str, str]] = Counter()
        for n in range(2, 6):
            homes[("a", turn(a, "shared", n)[0])] += 1
            homes[("b", turn(b, "shared", n)[0])] += 1
    finally:
        assert stop(proxy) == 0
    assert homes == {("a", "home"): 4, ("b", "other"): 4}


def test_a_provider_that_routes_its_cache_by_a_header_gets_each_sessions_key(
    up: Upstream, tmp_path: Path
) -> None:
    """xAI routes prompt-cache hits by `x-grok-conv-id` (`session_header`): every turn of a
    session carries one key in it; another session, or the same session id from another client
    key, another; a first question with no session id, none; one that names the session in
    `agent_reach.session`, the session's."""
    provider = up.provider("ok", session_header="x-grok-conv-id")
    cfg = proxy_config([provider], server={"api_keys_env": "PROXY_KEYS"})
    proxy = start(cfg, tmp_path, up, env={"PROXY_KEYS": ",".join(KEYS)})
    try:
        a, b = claude(proxy, KEYS[0]), claude(proxy, KEYS[1])
        for n in (1, 2, 3):
            turn(a, "s-1", n)
        turn(a, "s-2", 1)
        turn(b, "s-1", 1)
        question = [{"role": "user", "content": "one question"}]
        chat = proxy.client(KEYS[0]).chat.completions
        chat.create(model="m", messages=question)
        chat.create(model="m", messages=question, extra_body={"agent_reach": {"session": "s-1"}})
    finally:
        assert stop(proxy) == 0
    sent = [{k.lower(): v for k, v in r.headers.items()}.get("x-grok-conv-id") for r in up.received]
    assert len(sent) == 7
    *session, other, other_key, none, named = sent
    assert named == session[0]  # the body's `agent_reach.session` names the same session
    assert session[0] is not None
    assert re.fullmatch(r"[0-9a-f]{32}", session[0])  # a digest: the session id stays ours
    assert session == [session[0]] * 3
    assert None not in (other, other_key)
    assert len({session[0], other, other_key}) == 3
    assert none is None


def test_a_provider_that_takes_prompt_cache_key_gets_each_sessions_key(
    up: Upstream, tmp_path: Path
) -> None:
    """OpenAI's chat routes prompt-cache hits by `prompt_cache_key` (`prompt_cache_key: true`):
    a Claude Code-shaped session's turns reach it with one key, its home's; a chat client's own
    key goes as it came."""
    cfg = proxy_config([up.provider("ok", prompt_cache_key=True)])
    proxy = start(cfg, tmp_path, up)
    try:
        client = claude(proxy)
        turn(client, "s-1", 1)
        turn(client, "s-1", 2)
        proxy.client().chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], prompt_cache_key="mine"
        )
    finally:
        assert stop(proxy) == 0
    first, second, own = (r.body.get("prompt_cache_key") for r in up.received)
    assert re.fullmatch(r"[0-9a-f]{32}", first)
    assert second == first
    assert own == "mine"


def test_a_conversation_without_a_session_id_is_known_by_its_first_messages(
    up: Upstream, tmp_path: Path
) -> None:
    """A chat client that sends no session id: from its second turn (the first that holds an
    answer) its turns keep one home; a conversation that begins differently is another."""
    proxy = start(config(up), tmp_path, up, env={"PROXY_KEYS": ",".join(KEYS)})
    try:
        client = proxy.client(KEYS[0])
        seen: dict[str, set[str]] = {}
        for opening in ("fix the bug", "write the docs"):
            history: list[Any] = [{"role": "user", "content": opening}]
            for n in range(6):
                history += [{"role": "assistant", "content": f"ok {n}"}]
                history += [{"role": "user", "content": f"next {n}"}]
                raw = client.chat.completions.with_raw_response.create(model="m", messages=history)
                seen.setdefault(opening, set()).add(raw.headers["x-agent-reach-provider"])
    finally:
        assert stop(proxy) == 0
    assert [len(homes) for homes in seen.values()] == [1, 1], seen


def test_a_fleet_on_redis_sends_a_sessions_turns_home_from_every_instance(
    up: Upstream, tmp_path: Path, redis_url: str
) -> None:
    """Two instances sharing Redis: the session's first turn on one sets its home, and its
    later turns, alternating between the instances, all go there."""
    cfg = {**config(up), "state": redis_url}
    fleet = []
    try:
        for name in ("a", "b"):
            (tmp_path / name).mkdir()
            fleet.append(start(cfg, tmp_path / name, up, env={"PROXY_KEYS": ",".join(KEYS)}))
        clients = [claude(p) for p in fleet]
        turn(clients[0], "fleet-1", 1, **{"X-Agent-Reach-Route": "home"})
        answered = [turn(clients[n % 2], "fleet-1", n)[0] for n in range(2, 10)]
    finally:
        for proxy in fleet:
            assert stop(proxy) == 0
    assert answered == ["home"] * 8


def test_least_busy_sends_more_to_the_fast_one_across_a_fleet(
    up: Upstream, tmp_path: Path, redis_url: str
) -> None:
    """`balance: least_busy` over a slow provider (0.6 s, listed first) and a fast one, two
    instances on Redis, eight clients at once: the fast one takes most of it (in order, the
    slow one would take it all)."""
    cfg = proxy_config(
        [
            {"name": "slow", "endpoint": up.url("slow")},
            {"name": "fast", "endpoint": up.url("ok")},
        ],
        balance="least_busy",
        state=redis_url,
    )
    fleet = []
    try:
        for name in ("a", "b"):
            (tmp_path / name).mkdir()
            fleet.append(start(cfg, tmp_path / name, up))
        until = time.monotonic() + 3.0

        def client(n: int) -> Counter[str]:
            seen: Counter[str] = Counter()
            sdk = fleet[n % 2].client()
            while time.monotonic() < until:
                raw = sdk.chat.completions.with_raw_response.create(
                    model="m", messages=[{"role": "user", "content": "hi"}]
                )
                seen[raw.headers["x-agent-reach-provider"]] += 1
            return seen

        with ThreadPoolExecutor(8) as pool:
            got = sum(pool.map(client, range(8)), Counter())
    finally:
        for proxy in fleet:
            assert stop(proxy) == 0
    print(f"least_busy, 8 clients over 2 instances: {dict(got)}")
    assert got["fast"] >= 3 * got["slow"], got
    assert got["slow"] >= 1, got  # an idle slow one is first in its order: it had some


def test_a_sessions_home_is_a_seat_down_to_the_key(up: Upstream, tmp_path: Path) -> None:
    """A provider with two keys shared by weight: a session's turns keep the key its first
    turn went out with (its cache may be the key's or its account's), and `X-Agent-Reach-Session`
    names the session of a client that sends no id of its own."""
    keys = {"SEAT_KEY_A": "sk-seat-a-9a8b7c", "SEAT_KEY_B": "sk-seat-b-6d5e4f"}
    cfg = proxy_config(
        [{"name": "pool", "endpoint": up.url("ok"), "keys": [{"env": k} for k in keys]}],
        balance="weighted",
    )
    proxy = start(cfg, tmp_path, up, env=keys)
    try:
        client = proxy.client()
        for n in range(8):
            client.chat.completions.create(
                model="m",
                messages=[{"role": "user", "content": f"turn {n}"}],
                extra_headers={"X-Agent-Reach-Session": "my-session"},
            )
    finally:
        assert stop(proxy) == 0
    sent = {r.headers["Authorization"] for r in up.received if r.scenario == "ok"}
    assert len(sent) == 1, sent  # by weight alone, eight turns on one key: once in 128 runs
