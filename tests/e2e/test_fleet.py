"""A fleet of `agent-reach serve` processes on one real redis-server behaves as one router
(protocol §12.1): a dying provider gets about `circuit.failures` requests from the whole fleet,
exactly one half-open trial goes out after the cooldown, and a Redis outage fails nothing."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ..fakes.upstream import Upstream
from ..services import RedisServer
from .test_proxy import MSG, Proxy, start, stop

INSTANCES = 4
FAILURES = 5
IN_FLIGHT = 4  # concurrent clients
COOLDOWN_S = 2.0


def fleet_config(upstream: Upstream, state: str) -> dict[str, Any]:
    return {
        "version": "0.3.2",
        "health": {"mode": "off"},
        "state": state,
        "circuit": {"failures": FAILURES, "cooldown_s": COOLDOWN_S},
        "defaults": {"retries": 0},  # the failures counted are the requests'
        "providers": [
            {"name": "dying", "endpoint": upstream.url("switch")},
            {"name": "backup", "endpoint": upstream.url("backup")},
        ],
    }


def drive(proxies: list[Proxy], count: int, workers: int = IN_FLIGHT) -> list[str]:
    """`count` requests, round-robin over the instances, `workers` at a time; who answered."""
    clients = [p.client() for p in proxies]

    def one(i: int) -> str:
        raw = clients[i % len(clients)].chat.completions.with_raw_response.create(
            model="m", messages=MSG
        )
        return raw.headers["X-Agent-Reach-Provider"]

    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(one, range(count)))


def test_a_fleet_on_redis_acts_as_one_router(
    up: Upstream, redis_server: RedisServer, redis_url: str, tmp_path: Path
) -> None:
    proxies = []
    for i in range(INSTANCES):
        (tmp_path / str(i)).mkdir()
        proxies.append(start(fleet_config(up, redis_url), tmp_path / str(i), up))
    try:
        assert set(drive(proxies, 8)) == {"dying"}  # warm: every instance subscribed
        time.sleep(0.3)

        # the provider dies: the fleet as a whole stops after `failures` (+ those in flight)
        up.switch = "server"
        before = len(up.bodies("switch"))
        answers = drive(proxies, 80)
        assert answers[-40:] == ["backup"] * 40
        reached = len(up.bodies("switch")) - before
        assert FAILURES <= reached <= FAILURES + IN_FLIGHT, reached

        # after the cooldown: exactly one half-open trial across the fleet
        time.sleep(COOLDOWN_S + 0.2)
        before = len(up.bodies("switch"))
        assert set(drive(proxies, 40, workers=2)) == {"backup"}
        assert len(up.bodies("switch")) - before == 1

        # Redis dies: nothing fails; it comes back: each instance says so once
        up.switch = "ok"
        redis_server.kill()
        answers = drive(proxies, 60)
        assert len(answers) == 60
        redis_server.start()
        deadline = time.time() + 15
        while time.time() < deadline:
            assert len(drive(proxies, 8)) == 8
            logs = [(tmp_path / str(i) / "proxy.log").read_text() for i in range(INSTANCES)]
            if all("is back" in log for log in logs):
                break
            time.sleep(0.5)
        for log in logs:
            assert log.count("is down") == 1, log
            assert log.count("is back") == 1, log
            assert "Traceback" not in log
    finally:
        for p in proxies:
            stop(p)
        if redis_server.proc is None:
            redis_server.start()
