"""Pools of keys (`keys:`, `api_key_env: [A, B]`, protocol §2.3): the config's forms and its
refusals, and the engine against real servers on 127.0.0.1: a key's own failure moves to the
next key, the endpoint's moves to the next provider, keys share by weight under `weighted`, a
key's own budget, a key not set."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent_reach import Router
from agent_reach.config import load_config
from agent_reach.config.load import config_from_data
from agent_reach.core.errors import ConfigError

from .fakes.upstream import KEYED_GOOD, Upstream, refused_url

HELLO = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
ENV = {"K_BAD": "sk-pool-bad-9f8e7d", "K_GOOD": KEYED_GOOD, "K_OTHER": "sk-pool-other-1a2b"}


def router(*providers: dict[str, Any], **top: Any) -> Router:
    config = {
        "version": "0.3.2",
        "health": {"mode": "off"},
        "state": "memory://",
        "defaults": {"model_map": {"*": ""}},
        "providers": list(providers),
        **top,
    }
    return Router(config, environ=ENV)


def chain(trace: list[Any]) -> list[str]:
    return [f"{a.who}:{a.label}" for a in trace]


def test_a_list_of_variables_is_a_pool_and_api_key_env_names_its_first() -> None:
    cfg = config_from_data(
        {
            "version": "0.3.2",
            "providers": [
                {"name": "a", "endpoint": "http://h/v1/chat/completions", "api_key_env": ["X", "Y"]}
            ],
        }
    )
    (p,) = cfg.providers
    assert [k.env for k in p.keys] == ["X", "Y"]
    assert p.api_key_env == "X"
    assert p.key_envs == ("X", "Y")


@pytest.mark.parametrize(
    ("entry", "said"),
    [
        ({"api_key_env": "X", "keys": [{"env": "Y"}]}, "either api_key_env or keys"),
        ({"api_key_env": ["X"], "keys": [{"env": "Y"}]}, "either a list in api_key_env or keys"),
        ({"keys": [{"env": "X"}, {"env": "X"}]}, "named twice: X"),
        ({"keys": [{"env": "X", "quota": "lots"}]}, "is not like 100req/day"),
        ({"keys": [{"env": "X", "weight": -1}]}, "greater than or equal to 0"),
    ],
)
def test_a_wrong_pool_is_refused_by_name(entry: dict[str, Any], said: str, tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    provider = {"name": "a", "endpoint": "http://h/v1/chat/completions", **entry}
    path.write_text(yaml.safe_dump({"version": "0.3.2", "providers": [provider]}))
    with pytest.raises(ConfigError) as refused:
        load_config(path)
    assert said in str(refused.value)
    assert str(path) in str(refused.value)


def test_a_secret_written_as_a_keys_variable_is_not_repeated(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    secret = "sk-live-0123456789abcdef"
    provider = {"name": "a", "endpoint": "http://h/v1/chat/completions", "keys": [{"env": secret}]}
    path.write_text(yaml.safe_dump({"version": "0.3.2", "providers": [provider]}))
    with pytest.raises(ConfigError) as refused:
        load_config(path)
    assert "NAME of an environment variable" in str(refused.value)
    assert secret not in str(refused.value)


async def test_a_bad_key_moves_to_the_next_key_then_stays_out(up: Upstream) -> None:
    pool = {"name": "p", "endpoint": up.url("keyed"), "keys": [{"env": "K_BAD"}, {"env": "K_GOOD"}]}
    async with router(pool) as r:
        first = await r.achat(HELLO)
        second = await r.achat(HELLO)
    assert chain(first.trace) == ["p/K_BAD:auth_failed", "p/K_GOOD:ok"]
    assert chain(second.trace) == ["p/K_BAD:skip(circuit_open)", "p/K_GOOD:ok"]
    sent = [r.headers["Authorization"] for r in up.received if r.scenario == "keyed"]
    assert sent == [f"Bearer {ENV['K_BAD']}", f"Bearer {KEYED_GOOD}", f"Bearer {KEYED_GOOD}"]
    assert ENV["K_BAD"] not in first.trace[0].detail  # the 401 quoted it


async def test_a_failure_of_the_endpoint_moves_to_the_next_provider(up: Upstream) -> None:
    pool = {"name": "p", "endpoint": refused_url(), "api_key_env": ["K_BAD", "K_GOOD"]}
    backup = {"name": "b", "endpoint": up.url("ok")}
    async with router(pool, backup) as r:
        result = await r.achat(HELLO)
        status = {row["provider"]: row for row in await r.status()}
    assert chain(result.trace) == ["p/K_BAD:connect_failed", "b:ok"]
    # the endpoint's failure counts for each key, since each reaches that endpoint
    assert [k["circuit"]["failures"] for k in status["p"]["keys"]] == [1, 1]


async def test_a_key_not_set_is_passed_over_for_the_next(up: Upstream) -> None:
    pool = {"name": "p", "endpoint": up.url("keyed"), "api_key_env": ["K_UNSET", "K_GOOD"]}
    async with router(pool) as r:
        result = await r.achat(HELLO)
    assert chain(result.trace) == ["p/K_UNSET:skip(auth_failed)", "p/K_GOOD:ok"]
    assert result.trace[0].detail == "K_UNSET is not set"


async def test_a_keys_own_budget_moves_its_traffic_to_the_next_key(up: Upstream) -> None:
    keys = [{"env": "K_GOOD", "quota": "2req/day"}, {"env": "K_OTHER"}]
    async with router({"name": "p", "endpoint": up.url("ok"), "keys": keys}) as r:
        traces = [chain((await r.achat(HELLO)).trace) for _ in range(3)]
    assert traces[:2] == [["p/K_GOOD:ok"], ["p/K_GOOD:ok"]]
    assert traces[2] == ["p/K_GOOD:skip(quota_exhausted)", "p/K_OTHER:ok"]


async def test_keys_share_a_weighted_providers_traffic_by_their_weights(up: Upstream) -> None:
    keys = [{"env": "K_GOOD", "weight": 3}, {"env": "K_OTHER", "weight": 1}]
    n = 1000
    async with router(
        {"name": "p", "endpoint": up.url("ok"), "keys": keys}, balance="weighted"
    ) as r:
        got = Counter([(await r.achat(HELLO)).trace[-1].key for _ in range(n)])
    assert abs(got["K_GOOD"] / n - 0.75) <= 0.05, got


async def test_in_order_the_first_key_takes_everything(up: Upstream) -> None:
    keys = [{"env": "K_GOOD", "weight": 1}, {"env": "K_OTHER", "weight": 9}]
    async with router({"name": "p", "endpoint": up.url("ok"), "keys": keys}) as r:
        got = Counter([(await r.achat(HELLO)).trace[-1].key for _ in range(50)])
    assert got == {"K_GOOD": 50}


async def test_keys_of_one_group_park_together_and_other_groups_do_not(up: Upstream) -> None:
    """A limit (429, `Retry-After: 7`) on a key parks every key of its `group` (one account's
    quota) until the reset, and no key of another group."""
    keys = [
        {"env": "K_BAD", "group": "acct-a"},
        {"env": "K_GOOD", "group": "acct-a"},
        {"env": "K_OTHER", "group": "acct-b"},
    ]
    backup = {"name": "b", "endpoint": up.url("ok")}
    async with router({"name": "p", "endpoint": up.url("ratelimit"), "keys": keys}, backup) as r:
        first = await r.achat(HELLO)
        status = {row["provider"]: row for row in await r.status()}
    assert chain(first.trace) == [
        "p/K_BAD:rate_limited",
        "p/K_GOOD:skip(circuit_open)",  # its group's limit: not asked
        "p/K_OTHER:rate_limited",  # another group: asked
        "b:ok",
    ]
    states = {k["env"]: k["circuit"]["state"] for k in status["p"]["keys"]}
    assert states == {"K_BAD": "open", "K_GOOD": "open", "K_OTHER": "open"}
    sent = [r.headers["Authorization"] for r in up.received if r.scenario == "ratelimit"]
    assert sent == [f"Bearer {ENV['K_BAD']}", f"Bearer {ENV['K_OTHER']}"]


async def test_without_a_group_a_limit_parks_only_its_key(up: Upstream) -> None:
    keys = [{"env": "K_BAD"}, {"env": "K_GOOD"}]
    backup = {"name": "b", "endpoint": up.url("ok")}
    async with router({"name": "p", "endpoint": up.url("ratelimit"), "keys": keys}, backup) as r:
        first = await r.achat(HELLO)
    assert chain(first.trace) == ["p/K_BAD:rate_limited", "p/K_GOOD:rate_limited", "b:ok"]


def test_config_validate_says_whether_a_pool_has_a_key_left(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    path = tmp_path / "c.yaml"
    pools = [
        {
            "name": "half",
            "endpoint": "http://h/v1/chat/completions",
            "api_key_env": ["K_SET", "K_OFF"],
        },
        {
            "name": "none",
            "endpoint": "http://h/v1/chat/completions",
            "api_key_env": ["K_NO", "K_NOT"],
        },
    ]
    path.write_text(yaml.safe_dump({"version": "0.3.2", "providers": pools}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("K_", "AGENT_REACH"))}
    done = subprocess.run(
        [str(Path(sys.executable).parent / "agent-reach"), "config", "validate", str(path)],
        env={**env, "K_SET": "sk-set"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert "note: half: K_OFF not set (its other keys are used)" in done.stdout
    assert "note: none: none of K_NO, K_NOT is set (it will be skipped)" in done.stdout
