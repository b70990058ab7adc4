"""Budgets under concurrency (protocol §12): a request budget is taken before a try is sent, in
the store itself (SQLite for the processes of one machine, Redis for a fleet), so however many
requests run at once at most `limit` reach the provider; a try that sent nothing gives it back."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import openai
import pytest

from ..fakes.upstream import Upstream, refused_url
from .test_proxy import MSG, Proxy, start, stop

LIMIT = 2


def config(upstream: Upstream, state: str) -> dict[str, Any]:
    return {
        "health": {"mode": "off"},
        "state": state,
        "circuit": {"failures": 1000, "cooldown_s": 0},
        "providers": [
            {
                "name": "slow",
                "endpoint": upstream.url("slow"),
                "metadata": {"rate_limit": f"{LIMIT}req/day"},
            },
            {
                "name": "dead",
                "endpoint": refused_url(),
                "metadata": {"rate_limit": f"{LIMIT}req/day"},
            },
        ],
    }


async def burst(proxies: list[Proxy], n: int, provider: str) -> list[int]:
    """`n` requests at once, spread over `proxies`: the status of each."""
    clients = [p.aclient() for p in proxies]
    headers = {"X-Agent-Reach-Fallback-Order": provider}

    async def one(i: int) -> int:
        try:
            client = clients[i % len(clients)].with_options(max_retries=0)
            await client.chat.completions.create(model="m", messages=MSG, extra_headers=headers)
        except openai.APIStatusError as exc:
            return exc.status_code
        return 200

    try:
        return list(await asyncio.gather(*(one(i) for i in range(n))))
    finally:
        for client in clients:
            await client.close()


@pytest.mark.parametrize("backend", ["sqlite", "redis"])
def test_concurrent_requests_never_overshoot_a_request_budget(
    upstream: Upstream, tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    if backend == "redis":
        state = request.getfixturevalue("redis_url")
    else:
        state = f"sqlite:///{tmp_path / 'state.db'}"
    # Two proxies on one store: two workers of one machine, or two machines of a fleet.
    for name in "ab":
        (tmp_path / name).mkdir()
    proxies = [start(config(upstream, state), tmp_path / name, upstream) for name in "ab"]
    try:
        upstream.clear()
        statuses = asyncio.run(burst(proxies, 60, "slow"))
        assert len(upstream.bodies("slow")) == LIMIT
        assert statuses.count(200) == LIMIT
        assert set(statuses) == {200, 429}
        # A try that sent nothing (connection refused) gives its request back: one after
        # another, more than the limit are tried.
        for _ in range(LIMIT + 2):
            assert asyncio.run(burst(proxies[:1], 1, "dead")) == [502]
        status = proxies[0].get("/agent-reach/v1/status")[1]
        dead = next(p for p in status["providers"] if p["provider"] == "dead")
        assert dead["quota"][0]["used"] == 0, dead
    finally:
        for p in proxies:
            stop(p)
