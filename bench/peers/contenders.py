"""The proxies under test (`Peer`): agent-reach (this tree's or an older commit's), nginx,
LiteLLM and Portkey, each with its command, its URL and the request it is sent."""

from __future__ import annotations

import json
import os
import shutil
import string
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from agent_reach.net.ports import free_port
from common import PATH, THIS_TREE, Build, Target, agent_reach_serve

from .base import CONFIGS, INSTALLS, PROXY_KEY, UPSTREAM_KEY
from .nginx import nginx_command, nginx_proxy_conf


def bench_env(upstream: int, failing: int, sse: int) -> dict[str, str]:
    """The environment of every peer: where the upstreams are (BENCH_*, which the peers'
    configs name) and the keys, without the caller's own AGENT_REACH_* settings."""
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("AGENT_REACH")},
        "BENCH_UPSTREAM": f"http://127.0.0.1:{upstream}",
        "BENCH_FAILING": f"http://127.0.0.1:{failing}",
        "BENCH_SSE": f"http://127.0.0.1:{sse}",
        "BENCH_REFUSED": f"http://127.0.0.1:{free_port()}",  # nothing listens there
        "BENCH_UPSTREAM_KEY": UPSTREAM_KEY,
        "BENCH_PROXY_KEY": PROXY_KEY,
        "BENCH_PROXY_KEYS": PROXY_KEY,
    }


# -- peers --------------------------------------------------------------------------------------


def request_body(model: str = "bench", stream: bool = False) -> str:
    body: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": "ping"}]}
    if stream:
        body["stream"] = True
    return json.dumps(body)


@dataclass
class Peer:
    """One proxy process under test, and the request that means each scenario to it."""

    name: str
    command: Callable[[int], list[str]]  # its command line, given its port
    scenarios: dict[str, Target]  # scenario -> its request (port 0: the peer's own)
    env: dict[str, str]
    cwd: Path | None = None
    start_timeout_s: float = 30.0
    # The same proxy set to pay for every failure, where this one (its defaults) remembers a
    # dead upstream: its process runs the failover chains, this one the "once remembered" ones.
    raw: Peer | None = None
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    served: int = 0  # requests sent to it so far
    cold_s: list[float] = field(default_factory=list)
    rss: dict[str, float] = field(default_factory=dict)

    def target(self, scenario: str = "plain") -> Target:
        return replace(self.scenarios[scenario], port=self.port)


SCENARIOS = ("plain", "stream", "refused", "error500")
AUTH = {"Authorization": f"Bearer {PROXY_KEY}"}


def agent_reach(env: dict[str, str], remember: bool = True, build: Build = THIS_TREE) -> Peer:
    """`agent-reach serve` (this tree's, or `build`'s) routing by header: as a user runs it
    (bench/peers/agent-reach.yaml) with its raw-failover twin, or that twin
    (agent-reach-failover.yaml)."""
    scenarios = {"plain": Target(0, AUTH)}
    for route in SCENARIOS[1:]:
        headers = {**AUTH, "X-Agent-Reach-Route": route}
        scenarios[route] = Target(0, headers, request_body(stream=route == "stream"))
    path = CONFIGS / ("agent-reach.yaml" if remember else "agent-reach-failover.yaml")
    return Peer(
        build.label if remember else f"{build.label} (raw failover)",
        lambda port: agent_reach_serve(path, port, build.executable),
        scenarios,
        env,
        raw=agent_reach(env, False, build) if remember else None,
    )


def nginx_proxy(nginx: str, env: dict[str, str], workdir: Path, remember: bool = True) -> Peer:
    """nginx as a plain reverse proxy (`nginx_proxy_conf`) routing by path prefix: with its
    defaults and its raw-failover twin, or that twin."""
    folder = workdir / ("nginx-proxy" if remember else "nginx-proxy-raw")

    def command(port: int) -> list[str]:
        folder.mkdir(exist_ok=True)
        conf = folder / "nginx.conf"
        conf.write_text(nginx_proxy_conf(port, folder, env, remember))
        return nginx_command(nginx, conf, folder)

    scenarios = {
        s: Target(
            0, AUTH, request_body(stream=s == "stream"), PATH if s == "plain" else f"/{s}{PATH}"
        )
        for s in SCENARIOS
    }
    return Peer(
        "nginx" if remember else "nginx (raw failover)",
        command,
        scenarios,
        env,
        raw=nginx_proxy(nginx, env, workdir, remember=False) if remember else None,
    )


def litellm(env: dict[str, str], workdir: Path, source: str = "litellm.yaml") -> Peer:
    config = workdir / source
    config.write_text(string.Template((CONFIGS / source).read_text()).substitute(env))
    binary = str(INSTALLS / "litellm" / "bin" / "litellm")
    models = {
        "plain": "bench",
        "stream": "bench-stream",
        "refused": "refused",
        "error500": "error500",
    }
    scenarios = {
        s: Target(0, AUTH, request_body(m, stream=s == "stream")) for s, m in models.items()
    }
    own = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "ERROR"}
    return Peer(
        "LiteLLM",
        lambda port: [
            binary,
            *("--config", str(config), "--host", "127.0.0.1"),
            *("--port", str(port), "--num_workers", "1"),
        ],
        scenarios,
        {**env, **own},
        start_timeout_s=120.0,
    )


def portkey(env: dict[str, str]) -> Peer:
    raw = string.Template((CONFIGS / "portkey.json").read_text()).substitute(env)
    configs = {k: v for k, v in json.loads(raw).items() if not k.startswith("_")}
    scenarios = {
        s: Target(0, {"x-portkey-config": json.dumps(cfg)}, request_body(stream=s == "stream"))
        for s, cfg in configs.items()
    }
    folder = INSTALLS / "portkey"
    server = folder / "node_modules/@portkey-ai/gateway/build/start-server.js"
    node = shutil.which("node") or "node"
    return Peer(
        "Portkey",
        lambda port: [node, str(server), f"--port={port}", "--headless"],
        scenarios,
        env,
        cwd=folder,
        start_timeout_s=60.0,
    )


def remembered(name: str) -> str:
    """The failover chains of peer `name` as its defaults run them: a dead upstream remembered."""
    return f"{name} (once remembered)"
