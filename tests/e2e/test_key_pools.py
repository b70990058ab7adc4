"""A provider with a pool of three keys (`keys:`, protocol §2.3) through `agent-reach serve`:
one key revoked (401), one at its usage limit (429, reset 3 s ahead), one good. Every request is
answered, by the good key while the others are out; the revoked key gets no second request in
its auth cooldown; the limited one gets exactly one probe after its reset (slow, so that the
others would be seen beside it), then traffic; `status --json` shows each key; no key's value
appears in any answer, header, log line or status."""

from __future__ import annotations

import asyncio
import json
import math
import re
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from ..fakes.serving import Threaded
from ..fakes.shapes import completion
from ..fakes.upstream import Upstream
from ..services import dumped_dom
from .test_cli import run
from .test_proxy import MSG, Proxy, start, stop

pytestmark = pytest.mark.browser

KEYS = {  # variable → value
    "POOL_REVOKED": "sk-pool-revoked-0a1b2c3d4e",
    "POOL_LIMITED": "sk-pool-limited-5f6a7b8c9d",
    "POOL_GOOD": "sk-pool-good-0e1f2a3b4c",
}
RESET_S = 3.0
CLIENTS = 4


class Pool:
    """One endpoint answering by key: revoked → 401 (quoting the key, as providers do);
    limited → 429 with `Retry-After` until `reopens_at`, its first answer after that slow
    (the probe); good → 200. Every request's key and arrival time are kept."""

    def __init__(self, plan: bool = False) -> None:
        self.plan = plan  # the limited key's refusal: a coding plan's usage limit (Zhipu's 1308)
        self.seen: list[tuple[str, float]] = []
        self.reopens_at = 0.0
        self.probing = False
        self.beside_probe = 0
        self.threads = Threaded()
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.chat)
        self.port = self.threads.serve(app)

    async def chat(self, request: web.Request) -> web.Response:
        key = request.headers.get("Authorization", "").removeprefix("Bearer ")
        now = time.time()
        self.seen.append((key, now))
        if key == KEYS["POOL_REVOKED"]:
            error = {"message": f"Incorrect API key provided: {key}", "code": "invalid_api_key"}
            return web.json_response({"error": error}, status=401)
        if key == KEYS["POOL_LIMITED"]:
            if now < self.reopens_at and self.plan:
                beijing = datetime.fromtimestamp(self.reopens_at, timezone(timedelta(hours=8)))
                message = (
                    f"已达到 5 小时的使用上限。您的限额将在 {beijing:%Y-%m-%d %H:%M:%S} 重置。"
                )
                return web.json_response(
                    {"error": {"code": "1308", "message": message}}, status=429
                )
            if now < self.reopens_at:
                wait = f"{self.reopens_at - now:.0f}"
                error = {"message": "Rate limit reached", "code": "rate_limit_exceeded"}
                return web.json_response(
                    {"error": error}, status=429, headers={"Retry-After": wait}
                )
            if self.probing:
                self.beside_probe += 1
            elif not any(k == key and t >= self.reopens_at for k, t in self.seen[:-1]):
                self.probing = True
                await asyncio.sleep(0.8)
                self.probing = False
        return web.json_response(completion(f"from {key[:12]}", "m"))

    def requests(self, variable: str) -> list[float]:
        return [t for k, t in self.seen if k == KEYS[variable]]


def send(proxy: Proxy | list[Proxy], until: float) -> tuple[Counter[int], list[str]]:
    """`CLIENTS` clients back to back until `until` (spread over the instances of a fleet):
    statuses, and every trace header."""
    fleet = proxy if isinstance(proxy, list) else [proxy]
    clients = [fleet[i % len(fleet)].client() for i in range(CLIENTS)]

    def one(i: int) -> tuple[Counter[int], list[str]]:
        statuses: Counter[int] = Counter()
        traces = []
        while time.time() < until:
            raw = clients[i].chat.completions.with_raw_response.create(model="m", messages=MSG)
            statuses[raw.http_response.status_code] += 1
            traces.append(raw.headers["X-Agent-Reach-Trace"])
        return statuses, traces

    with ThreadPoolExecutor(CLIENTS) as pool:
        results = list(pool.map(one, range(CLIENTS)))
    return sum((s for s, _ in results), Counter()), [t for _, ts in results for t in ts]


def config(pool: Pool, state: str, keys: tuple[str, ...] = tuple(KEYS)) -> dict[str, Any]:
    return {
        "version": "0.3.2",
        "health": {"mode": "off"},
        "state": state,
        "circuit": {"auth_cooldown_s": 600},
        "providers": [
            {
                "name": "deepseek",
                "endpoint": f"http://127.0.0.1:{pool.port}/v1/chat/completions",
                "keys": [{"env": name} for name in keys],
            }
        ],
    }


# The limited key: a rate limit (429, `Retry-After`), or a coding plan's usage limit with its
# reset in the message (Zhipu's 1308: `quota_exhausted_upstream`, whole seconds).
@pytest.mark.parametrize("plan", [False, True], ids=["rate_limited", "usage_limit"])
def test_three_keys_one_revoked_one_limited(up: Upstream, tmp_path: Path, plan: bool) -> None:
    pool = Pool(plan)
    cfg = config(pool, f"sqlite:///{tmp_path}/state.db")
    cli_config = tmp_path / "cli.yaml"
    cli_config.write_text(yaml.safe_dump(cfg))
    proxy = start(cfg, tmp_path, up, env=KEYS)
    limit = "quota_exhausted_upstream" if plan else "rate_limited"
    try:
        pool.reopens_at = (math.ceil(time.time()) if plan else time.time()) + RESET_S
        first = proxy.client().chat.completions.with_raw_response.create(model="m", messages=MSG)
        assert first.headers["X-Agent-Reach-Provider"] == "deepseek"
        assert (
            first.headers["X-Agent-Reach-Trace"]
            .split(",")[0]
            .startswith("deepseek/POOL_REVOKED:auth_failed:")
        )
        assert (
            first.headers["X-Agent-Reach-Trace"]
            .split(",")[1]
            .startswith(f"deepseek/POOL_LIMITED:{limit}:")
        )
        assert first.parse().choices[0].message.content == "from sk-pool-good"

        _, during = proxy.get("/agent-reach/v1/status")  # inside the window: an HTTP call
        keys = {k["env"]: k for k in during["providers"][0]["keys"]}
        assert keys["POOL_REVOKED"]["circuit"]["state"] == "open"
        assert keys["POOL_REVOKED"]["circuit"]["cause"] == "auth_failed"
        assert keys["POOL_LIMITED"]["circuit"]["state"] == "open"
        assert keys["POOL_LIMITED"]["circuit"]["cause"] == limit
        assert keys["POOL_GOOD"]["circuit"]["state"] == "closed"
        assert all(k["set"] for k in keys.values())

        statuses, traces = send(proxy, pool.reopens_at + 3.0)
        _, view = proxy.get("/agent-reach/v1/status")
        _, metrics = proxy.get("/metrics")
        dom = dumped_dom(tmp_path, proxy.base + "/agent-reach/")
    finally:
        assert stop(proxy) == 0
        pool.threads.stop()
    # `status --json` (a fresh process, on the proxy's state file) after the window: the revoked
    # key still out for its cooldown, the parked one back
    shown = run("status", "--json", config=cli_config, env=KEYS)
    assert shown.returncode == 0, shown.stderr
    after_keys = {k["env"]: k["circuit"]["state"] for k in json.loads(shown.stdout)[0]["keys"]}
    assert after_keys == {"POOL_REVOKED": "open", "POOL_LIMITED": "closed", "POOL_GOOD": "closed"}
    report = run("report", "--json", "--provider", "deepseek", config=cli_config, env=KEYS)
    assert report.returncode == 0, report.stderr
    seats = {row["name"]: row for row in json.loads(report.stdout)["providers"]}
    assert set(seats) == {f"deepseek/{k}" for k in KEYS}
    assert seats["deepseek/POOL_REVOKED"]["requests"] == 1
    assert seats["deepseek/POOL_GOOD"]["requests"] >= 5

    assert set(statuses) == {200}, statuses  # not one failed client request
    assert len(pool.requests("POOL_REVOKED")) == 1  # none in its cooldown
    limited = pool.requests("POOL_LIMITED")
    before = [t for t in limited if t < pool.reopens_at]
    after = [t for t in limited if t >= pool.reopens_at]
    assert len(before) == 1  # the 429 itself: parked until its reset
    assert after
    assert pool.beside_probe == 0  # one probe, nothing beside it
    assert len(after) >= 2, "the key had traffic again after its probe"
    good_while_out = [t for t in pool.requests("POOL_GOOD") if t < pool.reopens_at]
    assert len(good_while_out) >= 5  # the third key served everything meanwhile
    assert any("deepseek/POOL_LIMITED:ok:" in t for t in traces)

    rows = {k["env"]: k for k in view["providers"][0]["keys"]}
    assert rows["POOL_LIMITED"]["circuit"]["state"] == "closed"
    assert rows["POOL_REVOKED"]["circuit"]["state"] == "open"
    assert 'agent_reach_key_attempts_total{key="POOL_REVOKED",provider="deepseek"' in metrics
    assert 'agent_reach_key_circuit_open{key="POOL_REVOKED",provider="deepseek"} 1.0' in metrics
    page = dict(re.findall(r'data-key="([^"]+)" data-key-circuit="([^"]+)"', dom))
    assert page == {"POOL_REVOKED": "open", "POOL_LIMITED": "closed", "POOL_GOOD": "closed"}

    outputs = [
        report.stdout,
        report.stderr,
        shown.stdout,
        shown.stderr,
        json.dumps(view),
        metrics,
        dom,
        "\n".join(traces),
        (tmp_path / "proxy.log").read_text(),
        str(first.headers),
        first.text,
    ]
    for value in KEYS.values():
        assert not any(value in out for out in outputs), value


def heard(proxy: Proxy, within_s: float = 10.0) -> bool:
    """Whether `proxy`'s status shows the limited seat parked for its usage limit, within
    `within_s` (another instance of a fleet hears of it through the store)."""
    deadline = time.monotonic() + within_s
    while True:
        _, view = proxy.get("/agent-reach/v1/status")
        seats = {k["env"]: k for k in view["providers"][0]["keys"]}
        if (seats["POOL_LIMITED"]["circuit"].get("note") or "").endswith(" (usage limit)"):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


@pytest.mark.parametrize("instances", [1, 2])
def test_two_plans_in_order_the_first_is_back_after_its_reset(
    up: Upstream, tmp_path: Path, redis_url: str, instances: int
) -> None:
    """Two keys in order, two coding plans: the first answers its usage limit (Zhipu's 1308,
    its reset 5 s ahead); traffic moves to the second, from every instance of a fleet on Redis
    (the first asked once), and comes back to the first after the reset, with one probe."""
    pool = Pool(plan=True)
    cfg = config(pool, redis_url, ("POOL_LIMITED", "POOL_GOOD"))
    fleet = []
    try:
        for n in range(instances):
            (tmp_path / str(n)).mkdir()
            fleet.append(start(cfg, tmp_path / str(n), up, env=KEYS))
        for proxy in fleet:  # warm: each instance subscribed to the fleet's circuits
            proxy.client().chat.completions.create(model="m", messages=MSG)
        pool.seen.clear()
        pool.reopens_at = math.ceil(time.time()) + 5.0  # the message states whole seconds
        first = fleet[0].client().chat.completions.with_raw_response.create(model="m", messages=MSG)
        trace = first.headers["X-Agent-Reach-Trace"]
        assert re.fullmatch(
            r"deepseek/POOL_LIMITED:quota_exhausted_upstream:\d+,deepseek/POOL_GOOD:ok:\d+", trace
        )
        for proxy in fleet:  # each instance has heard of the parked seat (a fleet: through Redis)
            assert heard(proxy), "an instance never heard of the parked seat"
        statuses, traces = send(fleet, pool.reopens_at + 3.0)
    finally:
        for proxy in fleet:
            assert stop(proxy) == 0
        pool.threads.stop()
    assert set(statuses) == {200}, statuses
    limited = pool.requests("POOL_LIMITED")
    assert len([t for t in limited if t < pool.reopens_at]) == 1  # parked, fleet-wide
    after = [t for t in limited if t >= pool.reopens_at]
    assert pool.beside_probe == 0  # one probe, nothing beside it
    assert len(after) >= 2, "the first plan had its traffic back"
    late = [t for t in pool.requests("POOL_GOOD") if t > after[1]]
    assert len(late) <= CLIENTS  # at most what was under way: the first plan is first again
    assert any(t.startswith("deepseek/POOL_LIMITED:ok:") for t in traces)
