"""A provider whose plan, balance or usage window is used up (`quota_exhausted_upstream`,
protocol §5) gets no request until the reset it stated (or `quota_cooldown_s`), whatever the
load, from every process sharing the state, and across a fleet on Redis; then one probe, then
its traffic again. `status --json` shows the window."""

from __future__ import annotations

import json
import math
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from itertools import count
from pathlib import Path
from typing import Any

import openai
import pytest
import yaml

from ..fakes.upstream import Upstream
from .test_cli import run
from .test_proxy import MSG, Proxy, start, stop

CLIENTS = 20
WINDOW_S = 3
CLI_WINDOW_S = 6  # room for two CLI runs (each a fresh process) inside the window


def limits_config(
    up: Upstream, scenario: str, state: str, window_s: int = WINDOW_S
) -> dict[str, Any]:
    return {
        "version": "0.3.2",
        "health": {"mode": "off"},
        "state": state,
        # DeepSeek's 402 states no reset: the cooldown, shortened for the test, is the window
        "circuit": {"quota_cooldown_s": window_s},
        "providers": [
            {"name": "capped", "endpoint": up.url(scenario)},
            {"name": "backup", "endpoint": up.url("backup")},
        ],
    }


def hammer(proxies: list[Proxy], until: float) -> Counter[str]:
    """`CLIENTS` clients sending requests back to back, round-robin over the instances, until
    `until` (unix s): who answered, how often."""
    clients = [p.client() for p in proxies]
    turns = count()

    def client(_: int) -> Counter[str]:
        seen: Counter[str] = Counter()
        while time.time() < until:
            raw = clients[next(turns) % len(clients)].chat.completions.with_raw_response.create(
                model="m", messages=MSG
            )
            seen[raw.headers["X-Agent-Reach-Provider"]] += 1
        return seen

    with ThreadPoolExecutor(CLIENTS) as pool:
        return sum(pool.map(client, range(CLIENTS)), Counter())


def answerer(proxy: Proxy) -> str:
    raw = proxy.client().chat.completions.with_raw_response.create(model="m", messages=MSG)
    return raw.headers["X-Agent-Reach-Provider"]


def cli_runs(config: Path, reopens: float) -> None:
    """A CLI run sharing the proxy's SQLite state skips the provider; `status --json`."""
    status = run("status", "--json", config=config)
    assert time.time() < reopens, "the machine is too slow for this test's window"
    rows = {r["provider"]: r for r in json.loads(status.stdout)}
    circuit = rows["capped"]["circuit"]
    assert circuit["cause"] == "quota_exhausted_upstream"
    assert circuit["out_until"] == pytest.approx(reopens, abs=1.0)
    assert circuit["note"].startswith("out until ")
    assert circuit["note"].endswith(" (usage limit)")
    chat = run("chat", "--prompt", "hi", "--model", "m", "--verbose", config=config)
    assert time.time() < reopens, "the machine is too slow for this test's window"
    assert chat.returncode == 0, chat.stderr
    assert chat.stdout == "hello from backup\n"
    assert "Skipping capped: quota_exhausted_upstream" in chat.stderr


def out_of_its_window(
    up: Upstream,
    scenario: str,
    proxies: list[Proxy],
    config: Path | None = None,
    window_s: int = WINDOW_S,
) -> None:
    """The whole story, against `proxies`; `config`: a CLI run sharing their SQLite state
    during the window, and `status --json`."""
    # Zhipu states its reset to the second; DeepSeek states none (the cooldown begins with it)
    start = time.time()
    up.reopens_at = math.ceil(start) + window_s if scenario == "plan" else start + window_s
    assert answerer(proxies[0]) == "backup"
    reopens = up.reopens_at if scenario == "plan" else time.time() + window_s
    assert len(up.bodies(scenario)) == 1
    time.sleep(0.3)  # a fleet: the other instance hears of the circuit
    for proxy in proxies:
        _, view = proxy.get("/agent-reach/v1/status")
        rows = {r["provider"]: r for r in view["providers"]}
        assert rows["capped"]["circuit"]["note"].endswith(" (usage limit)")
    with ThreadPoolExecutor(1) as side:
        cli = side.submit(cli_runs, config, reopens) if config is not None else None
        seen = hammer(proxies, reopens - 0.6)
        if cli is not None:
            cli.result()
    assert set(seen) == {"backup"}, seen
    # alone in its walk, it is no last resort: the client hears when to come back
    with pytest.raises(openai.RateLimitError) as refused:
        proxies[-1].client().chat.completions.create(
            model="m", messages=MSG, extra_headers={"X-Agent-Reach-Fallback-Order": "capped"}
        )
    assert 0 < int(refused.value.response.headers["Retry-After"]) <= window_s
    assert len(up.bodies(scenario)) == 1  # nothing else reached it

    # after the reset: one probe (slow, so that the others see it in flight), then traffic
    up.probe_s = 1.0
    seen = hammer(proxies, reopens + 2.5)
    assert up.beside_probe == 0
    assert seen["capped"] >= 2, seen  # the probe, and traffic after it
    assert answerer(proxies[-1]) == "capped"


# Zhipu's 5-hour window (a 429 with its reset), DeepSeek's balance (a 402), Kimi's weekly
# window (a 403 `access_terminated_error`, issue 50: a spent plan, not a bad key).
@pytest.mark.parametrize("scenario", ["plan", "balance", "kimiweek"])
def test_a_used_up_plan_is_out_until_its_reset(up: Upstream, tmp_path: Path, scenario: str) -> None:
    config = limits_config(up, scenario, f"sqlite:///{tmp_path}/state.db", CLI_WINDOW_S)
    cli_config = tmp_path / "cli.yaml"
    cli_config.write_text(yaml.safe_dump(config))
    proxy = start(config, tmp_path, up)
    try:
        out_of_its_window(up, scenario, [proxy], cli_config, CLI_WINDOW_S)
    finally:
        stop(proxy)


@pytest.mark.parametrize("scenario", ["plan", "balance"])
def test_twenty_clients_get_no_request_through(up: Upstream, tmp_path: Path, scenario: str) -> None:
    proxy = start(limits_config(up, scenario, "memory://"), tmp_path, up)
    try:
        out_of_its_window(up, scenario, [proxy])
    finally:
        stop(proxy)


@pytest.mark.parametrize("scenario", ["plan", "balance"])
def test_a_fleet_keeps_a_used_up_plan_out(
    up: Upstream, redis_url: str, tmp_path: Path, scenario: str
) -> None:
    proxies = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        proxies.append(start(limits_config(up, scenario, redis_url), tmp_path / name, up))
    try:
        assert {answerer(p) for p in proxies} == {"capped"}  # warm: both subscribed
        up.clear()
        out_of_its_window(up, scenario, proxies)
    finally:
        for p in proxies:
            stop(p)


def test_a_restart_remembers_the_window(up: Upstream, tmp_path: Path) -> None:
    """DeepSeek's 402 with a cooldown longer than a restart: the new process keeps it out."""
    config = limits_config(up, "balance", f"sqlite:///{tmp_path}/state.db", window_s=60)
    up.reopens_at = time.time() + 60
    proxy = start(config, tmp_path, up)
    try:
        assert answerer(proxy) == "backup"
    finally:
        stop(proxy)
    proxy = start(config, tmp_path, up)
    try:
        assert answerer(proxy) == "backup"
        _, view = proxy.get("/agent-reach/v1/status")
        rows = {r["provider"]: r for r in view["providers"]}
        assert rows["capped"]["circuit"]["cause"] == "quota_exhausted_upstream"
        assert 50 < rows["capped"]["circuit"]["open_for_s"] <= 60
    finally:
        stop(proxy)
    assert len(up.bodies("balance")) == 1
