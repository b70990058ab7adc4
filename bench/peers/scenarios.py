"""The run (`Bench`): added latency, throughput and p99, failover, streaming TTFB and gaps,
RSS and cold start, each peer in turn under the same load."""

from __future__ import annotations

import http.client
import itertools
import json
import math
import re
import statistics
import time
from pathlib import Path
from typing import Any

from agent_reach.net.ports import free_port
from common import (
    PATH,
    THIS_TREE,
    Build,
    Load,
    Processes,
    Target,
    interleaved,
    machine,
    pin_self,
    rss_mb,
    spread,
    start_mock,
    timed,
    wait_until_ok,
)
from tests.fakes.bench import SSE_CHUNKS, SSE_GAP_S

from .base import LOAD_CPU, PROXY_CPU, Settings, tail
from .contenders import (
    Peer,
    agent_reach,
    bench_env,
    litellm,
    nginx_proxy,
    portkey,
    remembered,
    request_body,
)
from .install import BIFROST, PEERS, Install, install_all, versions
from .nginx import start_nginx
from .report import targets_met, vs_before, vs_nginx


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
            return f"no 200 within {peer.start_timeout_s:.0f} s of starting: {tail(log)}"
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
