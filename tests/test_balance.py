"""`balance` (protocol §3): `weighted`, each request's order drawn by `fallback_weight`, by
tables of draws from a seeded generator; `latency`, the fastest of late first; a client's own
order is never redrawn."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from agent_reach.config import config_from_data
from agent_reach.core.balance import Signals, weighted
from agent_reach.core.errors import ConfigError
from agent_reach.core.routing import RouteTable, attempt_order

N = 4000


def firsts(order: tuple[str, ...], weights: dict[str, float], seed: int) -> Counter[str]:
    draw = random.Random(seed).random
    return Counter(weighted(order, weights, draw)[0] for _ in range(N))


@pytest.mark.parametrize("seed", range(5))
def test_weights_3_and_1_share_75_25(seed: int) -> None:
    got = firsts(("a", "b"), {"a": 3, "b": 1}, seed)
    assert abs(got["a"] / N - 0.75) <= 0.03


def test_three_providers_share_by_weight_and_weight_0_stays_behind() -> None:
    got = firsts(("a", "b", "c", "z"), {"a": 3, "b": 2, "c": 1, "z": 0}, 11)
    for name, share in (("a", 3 / 6), ("b", 2 / 6), ("c", 1 / 6)):
        assert abs(got[name] / N - share) <= 0.03
    draw = random.Random(3).random
    assert all(
        weighted(("z", "a", "b"), {"z": 0, "a": 1, "b": 1}, draw)[-1] == "z" for _ in range(200)
    )


def test_only_balanced_orders_are_drawn() -> None:
    table = RouteTable.build(
        [("a", 1.0), ("b", 3.0)],
        routes={"pair": ["a", "b"], "fixed": ["a", "b"]},
        balanced={"pair": "weighted"},
    )
    signals = Signals(random.Random(5).random, {}, {})
    fixed = {
        attempt_order(table, "ab", provider_route="fixed", signals=signals) for _ in range(100)
    }
    assert fixed == {("a", "b")}
    assert {attempt_order(table, "ab", signals=signals) for _ in range(100)} == {
        ("b", "a")
    }  # default
    pair = Counter(
        attempt_order(table, "ab", provider_route="pair", signals=signals) for _ in range(N)
    )
    assert abs(pair[("b", "a")] / N - 0.75) <= 0.03
    own = {
        attempt_order(table, "ab", fallback_order=["a", "b"], signals=signals) for _ in range(100)
    }
    assert own == {("a", "b")}  # the client's own order


def test_the_config_sets_balance_for_the_default_order_and_each_route() -> None:
    providers = [{"name": "a", "endpoint": "http://h/v1/chat/completions"}]
    config = config_from_data(
        {
            "balance": "weighted",
            "routes": {"r": {"providers": ["a"], "balance": "weighted"}, "s": ["a"]},
            "providers": providers,
        }
    )
    assert config.route_table().balanced == {"default": "weighted", "r": "weighted"}
    with pytest.raises(ConfigError, match="balance"):
        config_from_data({"balance": "round_robin", "providers": providers})


def test_latency_puts_the_fastest_first_and_an_unmeasured_one_before_all() -> None:
    table = RouteTable.build([("a", 3.0), ("b", 2.0), ("c", 1.0)], balanced={"default": "latency"})
    latency = {"a": 600.0, "b": 2.0}
    signals = Signals(random.Random(1).random, latency, {})
    assert attempt_order(table, "abc", signals=signals) == ("c", "b", "a")  # c: not measured yet
    latency["c"] = 50.0
    assert attempt_order(table, "abc", signals=signals) == ("b", "c", "a")
    assert attempt_order(table, "abc") == ("a", "b", "c")  # no signals: as written
