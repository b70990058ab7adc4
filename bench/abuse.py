"""Hostile clients against a running `agent-reach serve` (protocol §14): what they cost the proxy
and whether it sheds them.

    .venv/bin/python bench/abuse.py [--idle 500] [--slowloris 50] [--unread 200] [--timeout 30]

Three measurements, each of the proxy's open file descriptors, its RSS and the p50 of normal
requests (sequential, keep-alive, `--requests` of them, sent while the attack is on, in rounds
interleaved with as many straight to the upstream, whose p50 is shown as the machine's own):
  1. baseline;
  2. under attack: `--idle` connections that send nothing, `--slowloris` connections sending
     a request head one byte per second, and `--unread` streaming requests to an upstream
     that streams as fast as it may (bench/mock_upstream.py `/flood/`) whose clients read
     nothing, measured once the upstreams have stopped writing (every buffer is full);
  3. after the timeouts: idle connections closed by `keepalive_timeout_s`, slowloris by
     `request_timeout_s` (408), unread streams dropped by `client_write_timeout_s` and their
     upstreams cancelled.
All three timeouts are `--timeout` seconds (defaults in a config: 75, 30 and 60 s), long enough
for every stream to fill its buffers before any timer runs out; a run takes about a minute.
Targets: every unread stream reached the upstream (else "under attack" is not: a warning says
so); fds back to baseline after the timeouts; RSS growth at most 256 KB per unread stream;
normal p50 under attack within 2x of the baseline.

Then the descriptor attack, against a second proxy started under `ulimit -n 1024`
(`prlimit --nofile=1024:1024`): `--fd-idle` connections that send nothing, reopened as the
proxy closes them, for `--fd-seconds`, while a client sends normal requests on its keep-alive
connection and, once a second, one on a new connection. Targets: every request on the open
connection answered; the proxy's log grows by a few lines (one per episode), not one per socket.

Last, the concurrent budget: `--budget-burst` requests at once to a provider with
`rate_limit: 2req/day`, through `serve --workers 2` on one SQLite file. Target: at most 2 reach
the provider.
Pinning (2-core machine): the proxy on CPU 0, the upstream and this client on CPU 1.
With `--before REV` the whole run is made again with agent-reach at commit REV (bench/common.py's
`build_at`) and the summaries and targets of both are printed side by side.
Results go to bench/results/abuse.json (this tree's; REV's under "before").
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from agent_reach.net.ports import free_port
from common import (
    PATH,
    RESULTS,
    THIS_TREE,
    Build,
    Client,
    Processes,
    Target,
    add_before,
    agent_reach_serve,
    builds,
    cpu_s,
    interleaved,
    machine,
    pct,
    pin_self,
    rss_mb,
    side_by_side,
    start_mock,
    wait_until_ok,
)

STREAM = json.dumps(
    {"model": "bench", "messages": [{"role": "user", "content": "go"}], "stream": True}
)


def start_proxy(
    procs: Processes,
    upstream: int,
    workdir: Path,
    timeout_s: float,
    prefix: tuple[str, ...] = (),
    name: str = "proxy",
    build: Build = THIS_TREE,
) -> tuple[int, int]:
    base = f"http://127.0.0.1:{upstream}"
    config = {
        "health": {"mode": "off"},
        "state": "memory://",
        "server": {
            "keepalive_timeout_s": timeout_s,
            "request_timeout_s": timeout_s,
            "client_write_timeout_s": timeout_s,
        },
        "providers": [
            {"name": "mock", "endpoint": f"{base}{PATH}"},
            {"name": "flood", "endpoint": f"{base}/flood{PATH}", "timeout": {"read": 600000}},
        ],
        "routes": {"normal": ["mock"]},
    }
    path = workdir / f"bench-abuse-{name}.json"
    path.write_text(json.dumps(config))
    env = {k: v for k, v in os.environ.items() if k != "AGENT_REACH_API_KEYS"}
    port = free_port()
    cmd = [*prefix, *agent_reach_serve(path, port, build.executable), "--no-access-log"]
    proc = procs.start(cmd, cpu=0, env=env, log=workdir / f"{name}.log")
    if wait_until_ok(Target(port), timeout_s=30) is None:
        raise SystemExit("agent-reach serve did not answer within 30 s")
    return port, proc.pid


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def latency(port: int, upstream: int, n: int) -> dict[str, Any]:
    """p50 of `n` normal requests through the proxy and `n` straight to the upstream,
    sequential and keep-alive, interleaved in rounds so that machine noise hits both alike."""
    targets = {
        "proxy": Target(port, headers={"X-Agent-Reach-Route": "normal"}),
        "direct": Target(upstream),
    }
    samples, failed = interleaved(targets, n, max_s=60)
    return {
        "p50_ms": round(pct(samples["proxy"], 0.5), 3),
        "direct_p50_ms": round(pct(samples["direct"], 0.5), 3),
        "failed": failed["proxy"],
    }


def flood_stats(upstream: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{upstream}/flood/stats", timeout=60) as r:
        return dict(json.loads(r.read()))


def connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.setblocking(False)
    return sock


def closed_by_server(sock: socket.socket) -> bool:
    """Whether the proxy has closed `sock` (whatever it sent before is dropped)."""
    try:
        while data := sock.recv(1 << 20):
            del data
        return True
    except BlockingIOError:
        return False
    except OSError:
        return True


class Slowloris:
    """Connections that send a request head one byte per second, from a thread."""

    HEAD = f"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Padding: {'p' * 200}\r\n\r\n".encode()

    def __init__(self, port: int, count: int) -> None:
        self.socks = [connect(port) for _ in range(count)]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        for i in range(len(self.HEAD)):
            for sock in self.socks:
                try:
                    sock.send(self.HEAD[i : i + 1])
                except OSError:
                    continue
            if self._stop.wait(1.0):
                return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


def unread_stream(port: int) -> socket.socket:
    sock = connect(port)
    sock.setblocking(True)
    sock.sendall(Target(port, {"X-Agent-Reach-Route": "flood"}, STREAM).wire())
    sock.setblocking(False)
    return sock


def wait_for_backpressure(upstream: int, streams: int, max_s: float = 60.0) -> dict[str, Any]:
    """Wait until every flood stream has started and none writes any more."""
    deadline = time.monotonic() + max_s
    last: list[int] = []
    while time.monotonic() < deadline:
        stats = flood_stats(upstream)
        written = stats["written"]
        if len(written) >= streams and written == last:
            return stats
        last = written
        time.sleep(1.0)
    return flood_stats(upstream)


class Holder:
    """`count` connections that send nothing, each reopened once the proxy has closed it."""

    def __init__(self, port: int, count: int) -> None:
        self.port = port
        self.socks = [connect(port) for _ in range(count)]
        self.reopened = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            for i, sock in enumerate(self.socks):
                if closed_by_server(sock):
                    sock.close()
                    self.socks[i] = connect(self.port)
                    self.reopened += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        for sock in self.socks:
            sock.close()


def descriptor_attack(
    procs: Processes, upstream: int, workdir: Path, idle: int, seconds: float, build: Build
) -> dict[str, Any]:
    """Normal requests while `idle` silent connections are held against a proxy that may open
    1024 files."""
    prefix = ("prlimit", "--nofile=1024:1024", "--")
    port, pid = start_proxy(procs, upstream, workdir, 75.0, prefix, "fd-proxy", build)
    log = workdir / "fd-proxy.log"
    target = Target(port, headers={"X-Agent-Reach-Route": "normal"})
    client = Client(target, timeout=15)
    for _ in range(50):
        client.post()
    lines_before, cpu_before = len(log.read_text().splitlines()), cpu_s(pid)
    holder = Holder(port, idle)
    kept: list[float] = []
    failed = fresh_ok = fresh_refused = 0
    stop = next_fresh = time.monotonic()
    stop += seconds
    while (now := time.monotonic()) < stop:
        try:
            ms = client.post()
        except OSError:
            ms = None
        if ms is None:
            failed += 1
        else:
            kept.append(ms)
        if now >= next_fresh:
            next_fresh = now + 1.0
            fresh = Client(target, timeout=15)
            try:
                ok = fresh.post() is not None
            except OSError:
                ok = False
            fresh_ok, fresh_refused = fresh_ok + ok, fresh_refused + (not ok)
            fresh.close()
        time.sleep(0.01)
    held_fds = fds(pid)
    holder.stop()
    client.close()
    text = log.read_text()
    return {
        "idle_connections": idle,
        "seconds": seconds,
        "reopened_by_attacker": holder.reopened,
        "proxy_fds_at_end": held_fds,
        "requests_on_open_connection": len(kept) + failed,
        "failed_on_open_connection": failed,
        "p50_ms": round(pct(kept, 0.5), 3) if kept else None,
        "max_ms": round(max(kept), 1) if kept else None,
        "new_connections_answered": fresh_ok,
        "new_connections_refused": fresh_refused,
        "log_lines_during": len(text.splitlines()) - lines_before,
        "accept_error_lines": text.count("cannot accept"),
        "proxy_cpu_s": round(cpu_s(pid) - cpu_before, 2),
        "clamp_line": next((x for x in text.splitlines() if "lowered to" in x), None),
    }


def concurrent_budget(
    procs: Processes, upstream: int, workdir: Path, burst: int, build: Build
) -> dict[str, Any]:
    """`burst` requests at once against a budget of 2 requests a day, on two workers."""
    config = {
        "health": {"mode": "off"},
        "state": f"sqlite:///{workdir / 'budget.db'}",
        "providers": [
            {
                "name": "budgeted",
                "endpoint": f"http://127.0.0.1:{upstream}/budget{PATH}",
                "metadata": {"rate_limit": "2req/day"},
            }
        ],
    }
    path = workdir / "bench-budget.json"
    path.write_text(json.dumps(config))
    port = free_port()
    cmd = [*agent_reach_serve(path, port, build.executable), "--workers", "2", "--no-access-log"]
    procs.start(cmd, cpu=0, log=workdir / "budget-proxy.log")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # up, without spending the budget
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    statuses: list[int] = []
    start = threading.Barrier(burst)

    def one() -> None:
        client = Client(Target(port), timeout=30)
        start.wait()
        try:
            statuses.append(200 if client.post() is not None else 0)
        finally:
            client.close()

    threads = [threading.Thread(target=one) for _ in range(burst)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    with urllib.request.urlopen(f"http://127.0.0.1:{upstream}/budget/stats", timeout=10) as r:
        reached = json.loads(r.read())["requests"]
    return {
        "limit": 2,
        "concurrent": burst,
        "reached_provider": reached,
        "answered": statuses.count(200),
        "refused": len(statuses) - statuses.count(200),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--idle", type=int, default=500)
    parser.add_argument("--slowloris", type=int, default=50)
    parser.add_argument("--unread", type=int, default=200)
    parser.add_argument("--timeout", type=float, default=30.0, help="all three timeouts, s")
    parser.add_argument("--requests", type=int, default=300, help="normal requests per p50")
    parser.add_argument("--fd-idle", type=int, default=1100, help="silent connections, ulimit 1024")
    parser.add_argument("--fd-seconds", type=float, default=15.0)
    parser.add_argument("--budget-burst", type=int, default=60, help="requests at once")
    add_before(parser)
    args = parser.parse_args()
    pin_self(1)
    runs = {build.label: run(args, build) for build in builds(args.before)}
    result = runs.pop(THIS_TREE.label)
    if runs:
        result["before"] = runs
        print(side_by_side({THIS_TREE.label: result, **runs}, ("summary", "targets")))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "abuse.json").write_text(json.dumps(result, indent=2) + "\n")


def run(args: argparse.Namespace, build: Build) -> dict[str, Any]:
    """The whole run against `build`'s agent-reach: its phases, summary and targets."""
    print(f"== {build.label}", flush=True)
    phases: list[dict[str, Any]] = []
    with Processes() as procs, tempfile.TemporaryDirectory() as tmp:
        upstream = start_mock(procs)
        port, pid = start_proxy(procs, upstream, Path(tmp), args.timeout, build=build)
        latency(port, upstream, 200)  # warm up

        def measure(name: str, **extra: Any) -> dict[str, Any]:
            held, rss = fds(pid), round(rss_mb(pid), 1)  # before the normal requests run
            row = {
                "phase": name,
                "fds": held,
                "rss_mb": rss,
                **latency(port, upstream, args.requests),
                **extra,
            }
            phases.append(row)
            print(json.dumps(row), flush=True)
            return row

        base = measure("baseline")
        idle = [connect(port) for _ in range(args.idle)]
        loris = Slowloris(port, args.slowloris)
        time.sleep(1.0)
        before_streams = rss_mb(pid)
        began = time.monotonic()
        unread = [unread_stream(port) for _ in range(args.unread)]
        stats = wait_for_backpressure(upstream, args.unread)
        filled_s = time.monotonic() - began
        if len(stats["written"]) < args.unread:  # then the phase below is not under attack
            print(
                f"warning: {len(stats['written'])} of {args.unread} unread streams reached "
                "the upstream within 60 s",
                flush=True,
            )
        written = stats["written"][-args.unread :]
        during = measure(
            "under attack",
            rss_mb_before_streams=round(before_streams, 1),
            streams_filled_s=round(filled_s, 1),
            upstream_mb_per_stream=round(sum(written) / len(written) / 2**20, 2),
            streams_started=len(stats["written"]),
            upstreams_cut=stats["cut"],
        )
        per_stream_kb = (during["rss_mb"] - before_streams) * 1024 / args.unread
        time.sleep(args.timeout + 2)  # every timer has run out by now
        loris.stop()
        closed = {
            "idle": sum(closed_by_server(s) for s in idle),
            "slowloris": sum(closed_by_server(s) for s in loris.socks),
            "unread": sum(closed_by_server(s) for s in unread),
        }
        after = measure(
            "after the timeouts", closed=closed, upstreams_cut=flood_stats(upstream)["cut"]
        )
        for sock in [*idle, *loris.socks, *unread]:
            sock.close()
        log = (Path(tmp) / "proxy.log").read_text()
        fd = descriptor_attack(procs, upstream, Path(tmp), args.fd_idle, args.fd_seconds, build)
        print(json.dumps({"descriptor attack": fd}), flush=True)
        budget = concurrent_budget(procs, upstream, Path(tmp), args.budget_burst, build)
        print(json.dumps({"concurrent budget": budget}), flush=True)

    summary = {
        "rss_kb_per_unread_stream": round(per_stream_kb, 1),
        "fds_after_minus_baseline": after["fds"] - base["fds"],
        "p50_during_over_baseline": round(during["p50_ms"] / base["p50_ms"], 2),
        "p50_after_over_baseline": round(after["p50_ms"] / base["p50_ms"], 2),
        "log_lines": len(log.splitlines()),
        "tracebacks_in_log": log.count("Traceback"),
    }
    targets = {
        "every unread stream reached the upstream (so measured under attack)": during[
            "streams_started"
        ]
        >= args.unread,
        "fds back to baseline": summary["fds_after_minus_baseline"] <= 2,
        "RSS growth <= 256 KB per unread stream": per_stream_kb <= 256,
        "normal p50 within 2x during the attack": summary["p50_during_over_baseline"] <= 2,
        "all attack connections closed": closed
        == {"idle": args.idle, "slowloris": args.slowloris, "unread": args.unread},
        "ulimit 1024: every request on an open connection answered": fd["failed_on_open_connection"]
        == 0,
        "ulimit 1024: log lines per episode, not per socket": fd["log_lines_during"] <= 4,
        "concurrent budget: at most the limit reach the provider": budget["reached_provider"]
        <= budget["limit"],
    }
    print(json.dumps(summary))
    for name, met in targets.items():
        print(f"{'met' if met else 'NOT MET'}: {name}")
    return {
        "machine": machine(),
        "settings": vars(args),
        "phases": phases,
        "summary": summary,
        "descriptor_attack": fd,
        "concurrent_budget": budget,
        "targets": targets,
    }


if __name__ == "__main__":
    main()
