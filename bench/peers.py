"""agent-reach against its peers, side by side in one run on one upstream: direct to the
upstream, nginx as a plain reverse proxy (the floor for one hop), `agent-reach serve`, the
LiteLLM proxy and Portkey's open-source gateway.

    .venv/bin/python bench/peers.py [--quick] [--peers nginx[,LiteLLM,Portkey]] [--before REV]

- `--quick`: a short run to try the script out. `--peers`: only these peers beside agent-reach
  (always measured), e.g. `--peers nginx` for the fast loop of issue 13 item 6 (agent-reach's
  hop against nginx's): nothing else is installed or started, and the results go to
  bench/results/peers-nginx.{json,md} so that latest.* stays the full run's. `--before REV`:
  agent-reach at commit REV too, as one more peer beside this tree's (bench/common.py's
  `build_at`), and this tree's figures over its.

- Upstream: nginx answering a fixed chat.completion on loopback (so the upstream is never the
  bottleneck; its own ceiling is the "direct" column) and bench/mock_upstream.py's paced SSE
  stream (20 chunks 5 ms apart) for streaming.
- Peers are installed by this script into bench/.peers/ (git-ignored): LiteLLM in its own
  venv, Portkey with npm, matplotlib in a venv of its own for the chart. One that cannot be
  installed or started is left out, and the output says why. Their configs: bench/peers/.
- nginx as a peer: a second nginx, one worker (`nginx_proxy_conf`), routing by path prefix;
  like agent-reach it has a raw-failover twin, so failover is measured both ways: every
  request paying for the dead upstream, and the dead upstream once remembered (nginx's
  max_fails/fail_timeout, agent-reach's circuit). The ratios of issue 13 item 6 (agent-reach's
  figures over nginx's) are printed with the targets.
- Pinning: every proxy under test on CPU 0; the upstream nginx, the SSE upstream, wrk and this
  script's own client on CPU 1.
- Scenarios: added latency at 1 in flight (interleaved rounds, keep-alive); throughput and p99
  at 32 and 128 in flight (wrk); primary refusing connections → backup and primary answering
  500 → backup (added latency vs the backup alone, through the same peer); streaming added
  TTFB and per-chunk gap (vs direct to the SSE upstream); RSS of the peer's process tree idle
  and after 100k requests; cold start from spawn to the first 200.
Results: bench/results/latest.json, latest.md (the table printed at the end), latest.png.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import itertools
import json
import math
import os
import re
import shutil
import statistics
import string
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from common import (
    HERE,
    PATH,
    RESULTS,
    THIS_TREE,
    Build,
    Load,
    Processes,
    Target,
    add_before,
    agent_reach_serve,
    builds,
    ensure_apt,
    free_port,
    interleaved,
    machine,
    pin_self,
    publish,
    rss_mb,
    spread,
    start_mock,
    timed,
    wait_until_ok,
)
from mock_upstream import BODY as COMPLETION
from mock_upstream import SSE_CHUNKS, SSE_GAP_S

INSTALLS = HERE / ".peers"  # git-ignored
CONFIGS = HERE / "peers"
LITELLM_SPEC = "litellm[proxy]==1.108.7"
PLOT_SPEC = "matplotlib"
PROXY_KEY = "sk-bench-proxy"  # what clients present to a proxy
UPSTREAM_KEY = "sk-bench-upstream"  # what a proxy presents to the upstream
BIFROST = (
    "its npm package (@maximhq/bifrost) only downloads a Go binary at first run, and this "
    "machine reaches no host but the package registries"
)
PROXY_CPU, LOAD_CPU = 0, 1


@dataclass(frozen=True)
class Settings:
    """How much of everything: the full run, or `--quick` to try the script out."""

    latency_requests: int = 2000
    load_seconds: float = 5.0
    failover_requests: int = 500
    streams: int = 40
    cold_runs: int = 3
    rss_requests: int = 100_000
    rss_max_s: float = 75.0
    phase_max_s: float = 90.0

    @classmethod
    def quick(cls) -> Settings:
        return cls(200, 1.0, 50, 5, 1, 5_000, 5.0, 20.0)


# -- installs ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Install:
    ok: bool
    detail: str  # the version installed, or why it could not be
    seconds: float = 0.0
    path: str = ""  # the program, where there is one


def _run(cmd: list[str], log: Path, timeout: float, cwd: Path | None = None) -> bool:
    with log.open("ab") as out:
        try:
            return (
                subprocess.run(
                    cmd, stdout=out, stderr=out, cwd=cwd, timeout=timeout, check=False
                ).returncode
                == 0
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            out.write(f"\n{cmd[0]}: {exc}\n".encode())
            return False


def _tail(log: Path, lines: int = 3) -> str:
    with contextlib.suppress(OSError):
        text = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
        return " | ".join(text[-lines:])[-300:]
    return ""


def install_venv(name: str, spec: str, dist: str, logs: Path) -> Install:
    """A venv under bench/.peers/NAME with `spec` installed (kept across runs)."""
    start = time.monotonic()
    venv, log = INSTALLS / name, logs / f"install-{name}.log"
    stamp = venv / ".bench-installed"
    python = venv / "bin" / "python"
    if not (stamp.exists() and stamp.read_text() == spec and python.exists()):
        shutil.rmtree(venv, ignore_errors=True)
        ok = _run([sys.executable, "-m", "venv", str(venv)], log, 120) and _run(
            [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", spec],
            log,
            300,
        )
        if not ok:
            return Install(False, f"pip install {spec!r} failed: {_tail(log)}")
        stamp.write_text(spec)
    version = subprocess.run(
        [str(python), "-c", f"import importlib.metadata as m; print(m.version({dist!r}))"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    return Install(bool(version), version or f"{dist} not importable", time.monotonic() - start)


def install_portkey(logs: Path) -> Install:
    """@portkey-ai/gateway with npm under bench/.peers/portkey (kept across runs)."""
    start = time.monotonic()
    folder, log = INSTALLS / "portkey", logs / "install-portkey.log"
    if not (shutil.which("node") and shutil.which("npm")):
        return Install(False, "node and npm are needed and not found")
    package = (CONFIGS / "portkey-package.json").read_text()
    server = folder / "node_modules" / "@portkey-ai" / "gateway" / "build" / "start-server.js"
    if not (server.exists() and (folder / "package.json").read_text() == package):
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        (folder / "package.json").write_text(package)
        if not _run(["npm", "install", "--no-audit", "--no-fund"], log, 180, cwd=folder):
            return Install(False, f"npm install failed: {_tail(log)}")
    modules = folder / "node_modules"
    gateway = json.loads((modules / "@portkey-ai/gateway/package.json").read_text())["version"]
    hono = json.loads((modules / "@hono/node-server/package.json").read_text())["version"]
    return Install(True, f"{gateway} (@hono/node-server {hono})", time.monotonic() - start)


def need_nginx(logs: Path) -> Install:
    """nginx (`install_nginx`), or the run stops saying why there is none."""
    nginx = install_nginx(logs)
    if not nginx.ok:
        raise SystemExit(f"no nginx: {nginx.detail}")
    return nginx


def install_nginx(logs: Path) -> Install:
    start = time.monotonic()
    with (logs / "install-nginx.log").open("w") as log:
        nginx = ensure_apt("nginx", "nginx", log)
    if not nginx:
        return Install(False, "nginx is not installed and apt-get could not install it")
    out = subprocess.run([nginx, "-v"], capture_output=True, text=True, check=False)
    return Install(True, (out.stderr or out.stdout).strip(), time.monotonic() - start, nginx)


PEERS = ("nginx", "LiteLLM", "Portkey")  # beside agent-reach, which is always measured


def install_all(logs: Path, peers: tuple[str, ...] = PEERS) -> dict[str, Install]:
    """Everything the run needs that is not in agent-reach's venv, side by side: nginx (the
    upstream) always, the other `peers`, and matplotlib for the full run's chart."""
    jobs: dict[str, Callable[[], Install]] = {"nginx": lambda: install_nginx(logs)}
    if "LiteLLM" in peers:
        jobs["LiteLLM"] = lambda: install_venv("litellm", LITELLM_SPEC, "litellm", logs)
    if "Portkey" in peers:
        jobs["Portkey"] = lambda: install_portkey(logs)
    if peers == PEERS:
        jobs["matplotlib"] = lambda: install_venv("plot", PLOT_SPEC, "matplotlib", logs)
    with ThreadPoolExecutor(len(jobs)) as pool:
        futures = {name: pool.submit(job) for name, job in jobs.items()}
    done: dict[str, Install] = {}
    for name, future in futures.items():
        try:
            done[name] = future.result()
        except Exception as exc:
            done[name] = Install(False, f"{type(exc).__name__}: {exc}")
    return done


# -- upstreams ---------------------------------------------------------------------------------

MODELS = json.dumps({"object": "list", "data": [{"id": "bench", "object": "model"}]})
ERROR_500 = json.dumps({"error": {"message": "bench: upstream failure", "type": "server_error"}})


def _nginx_frame(workdir: Path, log_level: str, servers: str) -> str:
    """An nginx config with one worker, its files under `workdir`, keep-alive clients and no
    access log, around `servers` (the upstream and server blocks)."""
    return f"""
daemon off;
worker_processes 1;
pid {workdir}/nginx.pid;
error_log {workdir}/nginx-error.log {log_level};
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {workdir}/nginx-body;
    proxy_temp_path {workdir}/nginx-proxy;
    fastcgi_temp_path {workdir}/nginx-fastcgi;
    uwsgi_temp_path {workdir}/nginx-uwsgi;
    scgi_temp_path {workdir}/nginx-scgi;
    keepalive_requests 100000000;
    keepalive_timeout 300s;
    default_type application/json;
{servers}
}}
"""


def nginx_conf(port: int, failing: int, workdir: Path) -> str:
    """One worker answering fixed bodies from memory: the fastest upstream there is. On `port`
    the chat answer, and a 500 under /err500/; on `failing` a 500 on every path (for a proxy
    that sends every server of a group the same path: nginx)."""
    chat = COMPLETION.decode()
    return _nginx_frame(
        workdir,
        "warn",
        f"""
    server {{
        listen 127.0.0.1:{port} backlog=4096;
        location = /v1/chat/completions {{ return 200 '{chat}'; }}
        location = /v1/models {{ return 200 '{MODELS}'; }}
        location = /err500/v1/chat/completions {{ return 500 '{ERROR_500}'; }}
        location = /err500/v1/models {{ return 200 '{MODELS}'; }}
        location / {{ return 404 '{{"error": {{"message": "not found"}}}}'; }}
    }}
    server {{
        listen 127.0.0.1:{failing} backlog=4096;
        location / {{ return 500 '{ERROR_500}'; }}
    }}""",
    )


def nginx_proxy_conf(port: int, workdir: Path, env: dict[str, str], remember: bool) -> str:
    """nginx as a plain reverse proxy on `port`, one path prefix per scenario, keep-alive to the
    upstreams (as every proxy measured here keeps its upstream connections). Failover is an
    upstream group: the failing server first, the real one as `backup`. `remember`: nginx's
    defaults (max_fails=1 fail_timeout=10s: a failed server is left alone for 10 s, as
    agent-reach's circuit leaves a dead provider); else max_fails=0, every request pays. Errors
    are logged at `crit` only: agent-reach writes nothing per failed attempt either."""
    host = {
        k: env[f"BENCH_{k.upper()}"].removeprefix("http://")
        for k in ("upstream", "failing", "sse", "refused")
    }
    fails = "max_fails=1 fail_timeout=10s" if remember else "max_fails=0"
    # The SSE upstream's streams, unbuffered: paced (/stream); long at once, long one event at
    # a time, idle (bench/stream.py)
    sse = "\n".join(
        f"        location = /{prefix}{PATH} {{ proxy_pass http://sse/{path}{PATH}; "
        "proxy_buffering off; }"
        for prefix, path in (
            ("stream", "sse"),
            ("long", "long"),
            ("drip", "drip"),
            ("idle", "idle"),
        )
    )
    keep = "keepalive 16;"
    return _nginx_frame(
        workdir,
        "crit",
        f"""
    upstream backup {{ server {host["upstream"]}; {keep} }}
    upstream sse {{ server {host["sse"]}; {keep} }}
    upstream refused {{ server {host["refused"]} {fails}; server {host["upstream"]} backup; {keep} }}
    upstream error500 {{ server {host["failing"]} {fails}; server {host["upstream"]} backup; {keep} }}
    server {{
        listen 127.0.0.1:{port} backlog=4096;
        proxy_http_version 1.1;
        proxy_set_header Connection "";
        proxy_set_header Authorization "Bearer {UPSTREAM_KEY}";
        location = {PATH} {{ proxy_pass http://backup; }}
        location = /refused{PATH} {{ proxy_pass http://refused{PATH}; }}
        location = /error500{PATH} {{
            proxy_pass http://error500{PATH};
            proxy_next_upstream error timeout http_500 non_idempotent;
        }}
{sse}
    }}""",
    )


def nginx_command(nginx: str, conf: Path, workdir: Path) -> list[str]:
    return [nginx, "-c", str(conf), "-p", str(workdir), "-e", str(workdir / "nginx-error.log")]


def start_nginx(procs: Processes, nginx: str, workdir: Path, logs: Path) -> tuple[int, int]:
    """The upstream nginx on CPU 1: its chat port and its always-500 port."""
    port, failing = free_port(), free_port()
    conf = workdir / "nginx.conf"
    conf.write_text(nginx_conf(port, failing, workdir))
    log = logs / "upstream-nginx.log"
    procs.start(nginx_command(nginx, conf, workdir), cpu=LOAD_CPU, log=log)
    if wait_until_ok(Target(port), timeout_s=20) is None:
        raise SystemExit(f"nginx did not answer within 20 s: {_tail(log)}")
    return port, failing


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


def cold_start(procs: Processes, peer: Peer, runs: int, logs: Path) -> str | None:
    """Spawn → first 200, `runs` times; the last process stays up. None, or why it failed."""
    for run in range(runs):
        peer.port = free_port()
        log = logs / f"{'-'.join(re.findall(r'[a-z0-9]+', peer.name.lower()))}.log"
        start = time.perf_counter()
        peer.proc = procs.start(
            peer.command(peer.port), cpu=PROXY_CPU, env=peer.env, cwd=peer.cwd, log=log
        )
        up = wait_until_ok(peer.target(), timeout_s=peer.start_timeout_s)
        elapsed = time.perf_counter() - start
        if up is None:
            procs.stop(peer.proc)
            peer.proc = None
            return f"no 200 within {peer.start_timeout_s:.0f} s of starting: {_tail(log)}"
        peer.cold_s.append(elapsed)
        peer.served += 1
        if run < runs - 1:
            procs.stop(peer.proc)
    time.sleep(1.0)
    assert peer.proc is not None
    peer.rss["idle"] = rss_mb(peer.proc.pid)
    return None


# -- streaming ----------------------------------------------------------------------------------


def has_content(path: str, event: dict[str, Any]) -> bool:
    """Whether one stream event of the API at `path` carries part of the answer's text: a chat
    chunk's `delta.content`, a Responses `response.output_text.delta`, a Messages text delta, a
    Gemini response's text part."""
    if ":streamGenerateContent" in path:
        parts = ((event.get("candidates") or [{}])[0].get("content") or {}).get("parts") or []
        return any(p.get("text") and not p.get("thought") for p in parts)
    if path.endswith("/responses"):
        return event.get("type") == "response.output_text.delta" and bool(event.get("delta"))
    if path.endswith("/messages"):
        delta = event.get("delta") or {}
        return event.get("type") == "content_block_delta" and bool(delta.get("text"))
    choices = event.get("choices") or [{}]
    return bool((choices[0].get("delta") or {}).get("content"))


def stream_once(conn: http.client.HTTPConnection, target: Target) -> tuple[float, list[float]]:
    """One streamed request: ms to the first content event, and each content event's arrival
    (ms after the request was sent), in whichever API the target's path speaks."""
    for attempt in (1, 2):  # a keep-alive connection the server closed while idle: reopen once
        start = time.perf_counter()
        try:
            conn.request("POST", target.path, target.body.encode(), target.all_headers())
            resp = conn.getresponse()
            break
        except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
            conn.close()
            if attempt == 2:
                raise
    if resp.status != 200:
        resp.read()
        raise RuntimeError(f"HTTP {resp.status}")
    arrivals: list[float] = []
    buf = b""
    while data := resp.read1(65536):
        now = (time.perf_counter() - start) * 1000
        buf = (buf + data).replace(b"\r\n", b"\n")
        while b"\n\n" in buf:
            event, buf = buf.split(b"\n\n", 1)
            for line in event.split(b"\n"):
                payload = line[5:].strip() if line.startswith(b"data:") else b""
                if not payload or payload == b"[DONE]":
                    continue
                if has_content(target.path, json.loads(payload)):
                    arrivals.append(now)
    if resp.will_close:
        conn.close()
    if not arrivals:
        raise RuntimeError("no content chunk")
    return arrivals[0], arrivals


def streaming(targets: dict[str, Target], n: int, max_s: float) -> dict[str, dict[str, Any]]:
    """`n` streams per target in interleaved rounds of 1 + 5 (the first of a round is not kept,
    as in `common.interleaved`): TTFB and the gaps between content chunks."""
    conns = {
        k: http.client.HTTPConnection("127.0.0.1", t.port, timeout=30) for k, t in targets.items()
    }
    ttfb: dict[str, list[float]] = {k: [] for k in targets}
    gaps: dict[str, list[float]] = {k: [] for k in targets}
    chunks: dict[str, list[int]] = {k: [] for k in targets}
    burst: dict[str, list[int]] = {k: [] for k in targets}  # chunks arriving with the first
    errors: dict[str, str] = {}
    stop = time.monotonic() + max_s
    try:
        while min(len(v) for v in ttfb.values()) < n and time.monotonic() < stop:
            for name, target in targets.items():
                for i in range(6):
                    try:
                        first, arrivals = stream_once(conns[name], target)
                    except (OSError, RuntimeError, http.client.HTTPException, ValueError) as exc:
                        errors[name] = f"{type(exc).__name__}: {exc}"
                        conns[name].close()
                        ttfb[name].append(float("nan"))
                        continue
                    if i == 0:
                        continue
                    ttfb[name].append(first)
                    gaps[name] += [b - a for a, b in itertools.pairwise(arrivals)]
                    chunks[name].append(len(arrivals))
                    burst[name].append(sum(1 for a in arrivals if a - first < 1.0))
    finally:
        for conn in conns.values():
            conn.close()
    out: dict[str, dict[str, Any]] = {}
    for name in targets:
        good = [t for t in ttfb[name] if not math.isnan(t)]
        if not good:
            out[name] = {"error": errors.get(name, "no stream")}
            continue
        out[name] = {
            "ttfb_ms": spread(good),
            "gap_ms": spread(gaps[name]) if gaps[name] else None,
            "chunks_min": min(chunks[name]),
            "first_burst_median": statistics.median(burst[name]),
            "failed": len(ttfb[name]) - len(good),
        }
    return out


# -- the run ------------------------------------------------------------------------------------


class Bench:
    """One run: the upstreams, the peers, and a method per scenario filling `results`."""

    def __init__(
        self,
        procs: Processes,
        settings: Settings,
        logs: Path,
        workdir: Path,
        wanted: tuple[str, ...] = PEERS,
        agents: tuple[Build, ...] = (THIS_TREE,),
    ) -> None:
        self.procs, self.settings, self.logs, self.workdir = procs, settings, logs, workdir
        self.wanted = wanted  # the peers measured beside agent-reach
        self.agents = agents  # this tree's agent-reach, and an older commit's (`--before`)
        self.results: dict[str, Any] = {
            "when": time.strftime("%Y-%m-%d %H:%M:%S %z"),
            "machine": machine(),
            "settings": vars(settings),
        }
        self.peers: list[Peer] = []  # the ones that are up; agent-reach first
        self.unavailable: dict[str, str] = {}

    def run(self) -> None:
        with timed("installs"):
            installs = self.install()
        with timed("cold starts"):
            self.start(installs)
        with timed("latency at 1 in flight"):
            self.latency()
        with timed("throughput at 32 and 128 in flight"):
            self.throughput()
        with timed("failover"):
            self.failover()
        with timed("streaming"):
            self.streaming()
        with timed(f"memory up to {self.settings.rss_requests} requests"):
            self.memory()
        self.results["cold_start_s"] = {
            p.name: {"median": statistics.median(p.cold_s), "runs": p.cold_s} for p in self.peers
        }
        self.results["targets"] = targets_met(self.results)
        self.results["vs_nginx"] = vs_nginx(self.results)
        self.results["vs_before"] = vs_before(self.results, [b.label for b in self.agents[1:]])

    def install(self) -> dict[str, Install]:
        installs = install_all(self.logs, self.wanted)
        self.load = Load(self.workdir)
        self.results["installs"] = {k: vars(v) for k, v in installs.items()}
        for name, inst in installs.items():
            state = f"{inst.detail} ({inst.seconds:.0f} s)" if inst.ok else "NOT AVAILABLE: "
            print(f"  {name}: {state}{'' if inst.ok else inst.detail}", flush=True)
        if not installs["nginx"].ok:
            raise SystemExit(f"no upstream: {installs['nginx'].detail}")
        self.results["left_out"] = {"Bifrost": BIFROST}
        print(f"  Bifrost: NOT MEASURED: {BIFROST}")
        self.results["pinning"] = (
            f"proxies on CPU {PROXY_CPU}; the upstream nginx, the SSE upstream, wrk and the "
            f"Python client on CPU {LOAD_CPU} (taskset)"
            if pin_self(LOAD_CPU)
            else "none (one CPU or no taskset): every process shares the CPUs"
        )
        self.results["load_generator"] = self.load.name
        self.results["versions"] = versions(installs)
        print(f"  pinning: {self.results['pinning']}; load: {self.load.name}", flush=True)
        return installs

    def start(self, installs: dict[str, Install]) -> None:
        """The upstreams, then each peer alone (so that its cold start is its own)."""
        nginx = installs["nginx"].path
        upstream, failing = start_nginx(self.procs, nginx, self.workdir, self.logs)
        sse = start_mock(self.procs, cpu=LOAD_CPU)
        self.direct = Target(upstream)
        self.direct_sse = Target(sse, body=request_body(stream=True), path="/sse" + PATH)
        env = bench_env(upstream, failing, sse)
        candidates = [nginx_proxy(nginx, env, self.workdir)] if "nginx" in self.wanted else []
        candidates += [agent_reach(env, build=build) for build in self.agents]
        for name, make in (
            ("LiteLLM", lambda: litellm(env, self.workdir)),
            ("Portkey", lambda: portkey(env)),
        ):
            if name not in self.wanted:
                continue
            if installs[name].ok:
                candidates.append(make())
            else:
                self.unavailable[name] = installs[name].detail
        for peer in candidates:
            if self.cold_start(peer, self.settings.cold_runs):
                self.peers.append(peer)
                if peer.raw:
                    self.cold_start(peer.raw, 1)
        self.results["unavailable"] = self.unavailable
        self.results["peers"] = [p.name for p in self.peers]

    def cold_start(self, peer: Peer, runs: int) -> bool:
        """Whether `peer` came up (agent-reach must)."""
        why = cold_start(self.procs, peer, runs, self.logs)
        if why is None:
            cold = ", ".join(f"{s:.2f}" for s in peer.cold_s)
            print(f"  {peer.name}: up, cold start {cold} s, RSS idle {peer.rss['idle']:.1f} MB")
            return True
        if peer.name.startswith("agent-reach"):
            raise SystemExit(f"{peer.name} did not start: {why}")
        self.unavailable[peer.name] = why
        print(f"  {peer.name}: NOT AVAILABLE: {why}", flush=True)
        return False

    def latency(self) -> None:
        targets = {"direct": self.direct, **{p.name: p.target() for p in self.peers}}
        samples, failed = interleaved(
            targets, self.settings.latency_requests, warmup=100, max_s=self.settings.phase_max_s
        )
        for p in self.peers:
            p.served += len(samples[p.name]) + failed[p.name] + 100
        base = spread(samples["direct"])
        self.results["latency_ms"] = {
            name: {
                **s,
                "failed": failed[name],
                "added_p50": s["p50"] - base["p50"],
                "added_p99": s["p99"] - base["p99"],
            }
            for name, s in ((n, spread(v)) for n, v in samples.items() if v)
        }

    def throughput(self) -> None:
        self.results["throughput"] = {}
        for conns in (32, 128):
            row = {"direct": self.load.run(self.direct, conns, self.settings.load_seconds)}
            for p in self.peers:
                row[p.name] = self.load.run(p.target(), conns, self.settings.load_seconds)
                p.served += int(row[p.name]["requests"])
            self.results["throughput"][str(conns)] = row
            rates = ", ".join(f"{k} {v['rps']:.0f} req/s" for k, v in row.items())
            print(f"  {conns} in flight: {rates}", flush=True)
        for p in self.peers:
            assert p.proc is not None
            p.rss["warm"] = rss_mb(p.proc.pid)
            p.rss["warm_requests"] = p.served

    def failover(self) -> None:
        """Each peer's failover chains against the same peer sending to the backup alone: where
        a peer's defaults remember a dead upstream, its raw twin's (every request pays) under
        its name and its own under "NAME (once remembered)"."""
        chains: dict[str, Peer] = {}
        for p in self.peers:
            if p.raw is None or p.raw.proc is not None:
                chains[p.name] = p.raw or p
            if p.raw is not None:
                chains[remembered(p.name)] = p
        scenarios = ("plain", "refused", "error500")
        targets = {f"{label}|{s}": p.target(s) for label, p in chains.items() for s in scenarios}
        samples, failed = interleaved(
            targets,
            self.settings.failover_requests,
            per_round=50,
            warmup=20,
            max_s=self.settings.phase_max_s,
        )
        out: dict[str, Any] = {}
        for label, p in chains.items():
            base = samples[f"{label}|plain"]
            row: dict[str, Any] = {"backup_alone_ms": spread(base) if base else None}
            for scenario in scenarios:
                key = f"{label}|{scenario}"
                p.served += len(samples[key]) + failed[key] + 20
                if scenario == "plain":
                    continue
                if not samples[key] or not base:
                    row[scenario] = {"error": f"{failed[key]} requests failed, none answered"}
                    continue
                s = spread(samples[key])
                row[scenario] = {
                    **s,
                    "failed": failed[key],
                    "added_p50": s["p50"] - row["backup_alone_ms"]["p50"],
                    "added_p99": s["p99"] - row["backup_alone_ms"]["p99"],
                }
            out[label] = row
        self.results["failover"] = out

    def streaming(self) -> None:
        targets = {"direct": self.direct_sse, **{p.name: p.target("stream") for p in self.peers}}
        rows = streaming(targets, self.settings.streams, self.settings.phase_max_s)
        base = rows["direct"]
        for row in rows.values():
            if "ttfb_ms" in row and "ttfb_ms" in base:
                row["added_ttfb_p50"] = row["ttfb_ms"]["p50"] - base["ttfb_ms"]["p50"]
            if row.get("gap_ms") and base.get("gap_ms"):
                row["added_gap_p50"] = row["gap_ms"]["p50"] - base["gap_ms"]["p50"]
                row["added_gap_p99"] = row["gap_ms"]["p99"] - base["gap_ms"]["p99"]
        for p in self.peers:
            p.served += self.settings.streams
        upstream = f"{SSE_CHUNKS} chunks {SSE_GAP_S * 1000:.0f} ms apart"
        self.results["streaming"] = {"upstream": upstream, **rows}

    def memory(self) -> None:
        """Load at 32 in flight until each peer has served `rss_requests` (or `rss_max_s`
        passed), then its RSS again."""
        for p in self.peers:
            rps = max(self.results["throughput"]["32"][p.name]["rps"], 1.0)
            left = self.settings.rss_requests - p.served
            if left > 0:
                seconds = min(self.settings.rss_max_s, left / rps * 1.1 + 1)
                p.served += int(self.load.run(p.target(), 32, seconds)["requests"])
            time.sleep(1.0)
            assert p.proc is not None
            p.rss["after"] = rss_mb(p.proc.pid)
            p.rss["requests"] = p.served
            print(
                f"  {p.name}: RSS {p.rss['idle']:.1f} MB idle, {p.rss['warm']:.1f} MB after "
                f"{p.rss['warm_requests']} requests, {p.rss['after']:.1f} MB after {p.served}",
                flush=True,
            )
        self.results["rss_mb"] = {p.name: p.rss for p in self.peers}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short run to try the script")
    parser.add_argument(
        "--peers",
        type=_peer_names,
        default=PEERS,
        help=f"only these peers beside agent-reach, comma-separated (of {', '.join(PEERS)})",
    )
    add_before(parser)
    args = parser.parse_args()
    wanted: tuple[str, ...] = args.peers
    began = time.monotonic()
    logs = INSTALLS / "logs"
    shutil.rmtree(logs, ignore_errors=True)
    logs.mkdir(parents=True)
    workdir = Path(tempfile.mkdtemp(prefix="agent-reach-peers-"))
    print("agent-reach and its peers, one run, one upstream (bench/peers.py)", flush=True)
    print(f"  installs in bench/.peers/, logs in {logs}", flush=True)
    try:
        with Processes() as procs:
            settings = Settings.quick() if args.quick else Settings()
            bench = Bench(procs, settings, logs, workdir, wanted, tuple(builds(args.before)))
            bench.run()
    except KeyboardInterrupt:
        sys.exit("interrupted; every process it started has been stopped")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    results = bench.results
    results["duration_s"] = round(time.monotonic() - began, 1)
    name = "latest" if wanted == PEERS else "peers-" + "-".join(wanted).lower()
    publish(name, results, markdown(results))
    if wanted == PEERS:
        chart(results)


def _peer_names(text: str) -> tuple[str, ...]:
    """`--peers`: names from PEERS (any case), kept in PEERS's order."""
    given = {n.strip().lower() for n in text.split(",") if n.strip()}
    unknown = given - {p.lower() for p in PEERS}
    if unknown or not given:
        raise argparse.ArgumentTypeError(f"peers are {', '.join(PEERS)}; not {text!r}")
    return tuple(p for p in PEERS if p.lower() in given)


def versions(installs: dict[str, Install]) -> dict[str, str]:
    from agent_reach import __version__

    def output(cmd: list[str], cwd: Path | None = None) -> str:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run(
                cmd, capture_output=True, text=True, check=False, timeout=30, cwd=cwd
            )
            return (out.stdout or out.stderr).strip()
        return ""

    # read-only git: which agent-reach was measured, and whether src/ had uncommitted changes
    commit = output(["git", "rev-parse", "--short", "HEAD"], HERE.parent)
    dirty = output(["git", "diff", "--stat", "HEAD", "--", "src"], HERE.parent)
    source = (
        f" (commit {commit}{', src/ with uncommitted changes' if dirty else ''})" if commit else ""
    )
    wrk = re.search(r"wrk (\S+)", output(["wrk", "-v"]))
    return {
        "agent-reach": __version__ + source,
        **{
            label: installs[name].detail if installs[name].ok else "unavailable"
            for name, label in (("LiteLLM", "LiteLLM"), ("Portkey", "Portkey gateway"))
            if name in installs
        },
        "nginx": installs["nginx"].detail.removeprefix("nginx version: nginx/"),
        "wrk": wrk.group(1) if wrk else "unavailable",
        "node": output(["node", "--version"]) or "unavailable",
    }


# -- targets and report --------------------------------------------------------------------------


# The targets of issue 6 for agent-reach: (what, where in the results, limit, unit, at least?).
TARGETS = [
    ("added latency p50, 1 in flight", ("latency_ms", "added_p50"), 0.5, "ms", False),
    ("added latency p99, 1 in flight", ("latency_ms", "added_p99"), 2.0, "ms", False),
    ("throughput vs LiteLLM, 32 in flight", ("times", "LiteLLM", "32"), 50.0, "×", True),
    ("throughput vs LiteLLM, 128 in flight", ("times", "LiteLLM", "128"), 50.0, "×", True),
    ("throughput vs Portkey, 32 in flight", ("times", "Portkey", "32"), 3.0, "×", True),
    ("throughput vs Portkey, 128 in flight", ("times", "Portkey", "128"), 3.0, "×", True),
    ("refused primary → backup, added p50", ("failover", "refused", "added_p50"), 1.0, "ms", False),
    ("streaming added TTFB p50", ("streaming", "added_ttfb_p50"), 1.0, "ms", False),
    ("RSS idle", ("rss_mb", "idle"), 60.0, "MB", False),
    ("RSS flat: growth over the last N requests", ("rss_mb", "growth_pct"), 5.0, "%", False),
    ("cold start, spawn → first 200 (median)", ("cold_start_s", "median"), 0.5, "s", False),
]


# Issue 13, item 6: agent-reach's hop against nginx's, as ratios: (what, agent-reach's figure,
# nginx's figure, the ratio's limit, at least?). Failover figures are added p50 over the backup
# alone, through the same proxy.
AR, NGINX = "agent-reach", "nginx"
VS_NGINX: list[tuple[str, tuple[str, ...], tuple[str, ...], float, bool]] = [
    (
        "added latency p50, 1 in flight",
        ("latency_ms", AR, "added_p50"),
        ("latency_ms", NGINX, "added_p50"),
        3.0,
        False,
    ),
    (
        "primary refuses → backup, extra p50, every request pays",
        ("failover", AR, "refused", "added_p50"),
        ("failover", NGINX, "refused", "added_p50"),
        2.0,
        False,
    ),
    (
        "primary refuses → backup, extra p50, once remembered",
        ("failover", remembered(AR), "refused", "added_p50"),
        ("failover", remembered(NGINX), "refused", "added_p50"),
        2.0,
        False,
    ),
    (
        "primary refuses → backup, extra p50, every request pays, ÷ nginx's hop (the issue's wording)",
        ("failover", AR, "refused", "added_p50"),
        ("latency_ms", NGINX, "added_p50"),
        2.0,
        False,
    ),
    (
        "req/s, 32 in flight",
        ("throughput", "32", AR, "rps"),
        ("throughput", "32", NGINX, "rps"),
        1 / 20,
        True,
    ),
]
# How the two peers that remember a dead upstream are run raw and as their defaults run them.
REMEMBERING = {
    AR: (
        "bench/peers/agent-reach-failover.yaml: no health checks, a circuit that never opens",
        "agent-reach.yaml: health checks and circuit breakers",
    ),
    NGINX: (
        "max_fails=0: every request tries the failing server first",
        "max_fails=1 fail_timeout=10s: a failed server is left alone for 10 s",
    ),
}


# A difference of p50s this small is no cost: two columns doing the same work (a dead upstream
# once remembered, against the backup alone) differ by up to 0.008 ms here, either way.
NOISE_MS = 0.010


def _times(ratio: float) -> str:
    return f"{ratio:.2f}×" if ratio >= 1 or ratio <= 0 else f"{ratio:.3f}× (1/{1 / ratio:.0f})"


def vs_nginx(r: dict[str, Any]) -> list[dict[str, Any]]:
    """Item 6's ratios of agent-reach's figures to nginx's, each met or missed."""
    rows = []
    for what, mine_at, theirs_at, limit, at_least in VS_NGINX:
        mine, theirs = _get(r, *mine_at), _get(r, *theirs_at)
        unit = "req/s" if mine_at[0] == "throughput" else "ms"
        goal = f"{limit:g}×" if limit >= 1 else f"1/{1 / limit:.0f}"
        target = f"{'≥' if at_least else '≤'} {goal}"
        row: dict[str, Any] = {"what": what, "agent-reach": mine, "nginx": theirs}
        row |= {"unit": unit, "target": target, "ratio": None, "met": None, "note": ""}
        if mine is None or theirs is None:
            row["note"] = "not measured"
        elif mine <= 0 and not at_least:
            row |= {"met": True, "note": "agent-reach's figure is ≤ 0: nothing measurable added"}
        elif theirs <= (NOISE_MS if unit == "ms" else 0):
            row["note"] = f"nginx's figure is {theirs:.3f} {unit}: within noise, no ratio"
        else:
            row["ratio"] = mine / theirs
            row["met"] = row["ratio"] >= limit if at_least else row["ratio"] <= limit
        direct = _get(r, "throughput", "32", "direct", "rps")
        if unit == "req/s" and theirs and direct and theirs >= 0.9 * direct:
            row["note"] = (
                "nginx is within 10 % of direct: CPU 1 (upstream and wrk) bounds it, so its "
                "figure is a floor and the ratio flatters agent-reach"
            )
        rows.append(row)
    return rows


def vs_before(r: dict[str, Any], before: list[str]) -> list[dict[str, Any]]:
    """agent-reach's figures over an older commit's measured beside it (`--before`): req/s at
    32 and 128 in flight, and the added p50 at 1 in flight."""
    rows = []
    for label in before:
        for what, at in (
            ("req/s, 32 in flight", ("throughput", "32", "{}", "rps")),
            ("req/s, 128 in flight", ("throughput", "128", "{}", "rps")),
            ("added latency p50, 1 in flight (ms)", ("latency_ms", "{}", "added_p50")),
        ):
            mine, theirs = (_get(r, *(k.format(name) for k in at)) for name in (AR, label))
            ratio = mine / theirs if mine is not None and theirs else None
            row = {"what": what, "before": label, "agent-reach": mine, "then": theirs}
            rows.append({**row, "ratio": ratio})
    return rows


def _get(data: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(data, dict) or key not in data:
            return None
        data = data[key]
    return data


def targets_met(r: dict[str, Any]) -> list[dict[str, Any]]:
    """Each target next to agent-reach's measured figure: met or missed, and by how much."""
    ar = "agent-reach"
    times = {
        peer: {
            c: _get(r, "throughput", c, ar, "rps") / theirs
            for c in ("32", "128")
            if (theirs := _get(r, "throughput", c, peer, "rps"))
        }
        for peer in ("LiteLLM", "Portkey")
    }
    rss = _get(r, "rss_mb", ar) or {}
    if rss.get("warm") and rss.get("after"):
        rss["growth_pct"] = (rss["after"] - rss["warm"]) / rss["warm"] * 100
    mine = {k: v.get(ar) if isinstance(v, dict) else None for k, v in r.items()}
    mine["times"] = times
    rows = []
    for what, path, limit, unit, at_least in TARGETS:
        measured = _get(mine, *path)
        goal = f"{'≥' if at_least else '≤'} {limit:g}{'' if unit == '×' else ' '}{unit}"
        row: dict[str, Any] = {"what": what, "target": goal, "measured": measured, "unit": unit}
        if what.startswith("RSS flat"):
            row["what"] = (
                f"RSS flat: growth from {rss.get('warm_requests')} to {rss.get('requests')} requests"
            )
        if measured is None:
            rows.append({**row, "met": None, "by": "not measured"})
            continue
        met = measured >= limit if at_least else measured <= limit
        if at_least:
            by = f"{measured / limit:.2f}× the target"
        else:
            by = f"{abs(limit - measured):.3g} {unit} {'under' if met else 'over'}"
        rows.append({**row, "met": met, "by": by})
    return rows


def _cell(value: float | None, added: float | None = None, digits: int = 2) -> str:
    if value is None:
        return "—"
    text = f"{value:.{digits}f}"
    return f"{text} ({added:+.{digits}f})" if added is not None else text


def markdown(r: dict[str, Any]) -> str:
    m, s = r["machine"], r.get("settings", {})
    peers = r.get("peers", [])
    cols = ["direct", *peers]
    lines = [
        "# agent-reach and its peers",
        "",
        f"{r['when']}, `make bench` (bench/peers.py), {r.get('duration_s', 0):.0f} s including installs.",
        f"Machine: {m['cpu']}, {m['cpus']} CPUs, {m['memory_gib']} GiB, Linux {m['kernel']}, Python {m['python']}.",
        f"Pinning: {r.get('pinning', '?')}. Load: {r.get('load_generator', '?')}.",
        "Versions: " + ", ".join(f"{k} {v}" for k, v in r.get("versions", {}).items()) + ".",
        "Upstream: nginx (one worker, fixed chat.completion) on loopback; for streaming "
        f"bench/mock_upstream.py ({_get(r, 'streaming', 'upstream')}).",
        "The nginx column: a second nginx, one worker, as a plain reverse proxy in front of the "
        "same upstreams (keep-alive to them, a path prefix per scenario; failover by an upstream "
        "group, the failing server first and the real one `backup`, `proxy_next_upstream error` "
        "or `http_500 non_idempotent`; for 500 → backup its failing server is a second port of "
        "the upstream nginx answering 500 on every path).",
        f"Method: 1 in flight: {s.get('latency_requests')} requests kept per column from one "
        "Python client, keep-alive, interleaved rounds of 100 (the first 10 of a round not kept); "
        f"throughput: wrk, 1 thread, {s.get('load_seconds'):g} s per run; failover: "
        f"{s.get('failover_requests')} requests per chain, against the same peer sending to the "
        f"backup alone; streaming: {s.get('streams')} streams per column; RSS: VmRSS of the "
        f"process tree; cold start: median of {s.get('cold_runs')} spawns.",
        "",
    ]
    for name, why in {**r.get("unavailable", {}), **r.get("left_out", {})}.items():
        lines.append(f"- Not measured: {name}: {why}.")
    lines += ["", "| | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]

    def row(label: str, cell: Callable[[str], str]) -> None:
        lines.append(f"| {label} | " + " | ".join(cell(c) for c in cols) + " |")

    lat = r.get("latency_ms", {})
    row(
        "1 in flight p50 ms (added)",
        lambda c: _cell(
            _get(lat, c, "p50"), None if c == "direct" else _get(lat, c, "added_p50"), 3
        ),
    )
    row(
        "1 in flight p99 ms (added)",
        lambda c: _cell(
            _get(lat, c, "p99"), None if c == "direct" else _get(lat, c, "added_p99"), 3
        ),
    )
    for conns in ("32", "128"):
        tp = _get(r, "throughput", conns) or {}
        row(f"{conns} in flight req/s", lambda c, tp=tp: _cell(_get(tp, c, "rps"), digits=0))
        row(f"{conns} in flight p99 ms", lambda c, tp=tp: _cell(_get(tp, c, "p99_ms")))
        row(
            f"{conns} in flight non-2xx / socket errors",
            lambda c, tp=tp: (
                "—" if c not in tp else f"{tp[c]['non_2xx']:.0f} / {tp[c]['socket_errors']:.0f}"
            ),
        )
    fo = r.get("failover", {})
    for scenario, label in (("refused", "primary refuses"), ("error500", "primary answers 500")):
        for q in ("p50", "p99"):
            row(
                f"{label} → backup, {q} ms (added vs backup alone)",
                lambda c, s=scenario, q=q: _cell(
                    _get(fo, c, s, q), _get(fo, c, s, f"added_{q}"), 3
                ),
            )
    st = r.get("streaming", {})
    row(
        "streaming TTFB p50 ms (added)",
        lambda c: _cell(
            _get(st, c, "ttfb_ms", "p50"), None if c == "direct" else _get(st, c, "added_ttfb_p50")
        ),
    )
    row(
        "streaming chunk gap p50 ms (added)",
        lambda c: _cell(
            _get(st, c, "gap_ms", "p50"), None if c == "direct" else _get(st, c, "added_gap_p50")
        ),
    )
    row(
        "streaming chunk gap p99 ms (added)",
        lambda c: _cell(
            _get(st, c, "gap_ms", "p99"), None if c == "direct" else _get(st, c, "added_gap_p99")
        ),
    )
    row("streaming content chunks seen (min)", lambda c: str(_get(st, c, "chunks_min") or "—"))
    row(
        "streaming chunks arriving with the first (median)",
        lambda c: _cell(_get(st, c, "first_burst_median"), digits=0),
    )
    rss = r.get("rss_mb", {})
    row("RSS idle MB", lambda c: _cell(_get(rss, c, "idle"), digits=1))
    for when, count in (("warm", "warm_requests"), ("after", "requests")):
        row(
            f"RSS MB after N requests ({'throughput runs' if when == 'warm' else 'all'})",
            lambda c, w=when, n=count: "—" if c not in rss else f"{rss[c][w]:.1f} (N={rss[c][n]})",
        )
    cold = r.get("cold_start_s", {})
    row(
        "cold start s, spawn → first 200 (median)",
        lambda c: _cell(_get(cold, c, "median"), digits=3),
    )
    for peer, (raw, defaults) in REMEMBERING.items():
        if once := _get(fo, remembered(peer)):
            lines += [
                "",
                f"{peer}'s failover rows are raw ({raw}). With its defaults ({defaults}) the "
                "failing upstream is **once remembered**: refused → backup p50 "
                f"{_cell(_get(once, 'refused', 'p50'), _get(once, 'refused', 'added_p50'), 3)} ms, "
                "500 → backup p50 "
                f"{_cell(_get(once, 'error500', 'p50'), _get(once, 'error500', 'added_p50'), 3)} ms.",
            ]
    lines += [
        "",
        "| agent-reach ÷ nginx (issue 13, item 6) | agent-reach | nginx | ratio | goal | |",
        "|---|---|---|---|---|---|",
    ]
    for v in r.get("vs_nginx", []):
        digits = 0 if v["unit"] == "req/s" else 3
        figures = [_cell(v[k], digits=digits) + f" {v['unit']}" for k in ("agent-reach", "nginx")]
        ratio = "—" if v["ratio"] is None else _times(v["ratio"])
        verdict = "n/a" if v["met"] is None else ("met" if v["met"] else "MISSED")
        note = f": {v['note']}" if v["note"] else ""
        lines.append(
            f"| {v['what']} | {' | '.join(figures)} | {ratio} | {v['target']} | {verdict}{note} |"
        )
    if r.get("vs_before"):
        lines += ["", "| agent-reach ÷ an older commit, beside it | now | then | ratio |"]
        lines.append("|---|---|---|---|")
        for v in r["vs_before"]:
            digits = 0 if v["what"].startswith("req/s") else 3
            figures = " | ".join(_cell(v[k], digits=digits) for k in ("agent-reach", "then"))
            ratio = "—" if v["ratio"] is None else _times(v["ratio"])
            lines.append(f"| {v['what']}, vs {v['before']} | {figures} | {ratio} |")
    lines += ["", "| agent-reach target | goal | measured | |", "|---|---|---|---|"]
    for t in r.get("targets", []):
        unit = "" if t.get("unit") == "×" else " "
        measured = "—" if t["measured"] is None else f"{t['measured']:.3g}{unit}{t['unit']}"
        verdict = "not measured" if t["met"] is None else ("met" if t["met"] else "MISSED")
        lines.append(f"| {t['what']} | {t['target']} | {measured} | {verdict}, {t['by']} |")
    return "\n".join(lines) + "\n"


def chart(results: dict[str, Any]) -> None:
    python = INSTALLS / "plot" / "bin" / "python"
    if not _get(results, "installs", "matplotlib", "ok") or not python.exists():
        print("chart: matplotlib unavailable, no latest.png")
        return
    out = subprocess.run(
        [
            str(python),
            str(HERE / "chart.py"),
            str(RESULTS / "latest.json"),
            str(RESULTS / "latest.png"),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    print(
        f"chart: {RESULTS / 'latest.png'}"
        if out.returncode == 0
        else f"chart failed: {out.stderr[-500:]}"
    )


if __name__ == "__main__":
    main()
