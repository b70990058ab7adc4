"""Hostile clients against a running `agent-reach serve` (protocol §14): what they cost the proxy
and whether it sheds them.

    .venv/bin/python bench/abuse.py [--idle 500] [--slowloris 50] [--unread 200] [--timeout 30]

Three measurements, each of the proxy's open file descriptors, its RSS and the p50 of normal
requests (sequential, keep-alive, `--requests` of them, sent while the attack is on, in rounds
interleaved with as many straight to the upstream, whose p50 is shown as the machine's own):
  1. baseline;
  2. under attack: `--idle` connections that send nothing, `--slowloris` connections sending
     a request head one byte per second, and `--unread` streaming requests to an upstream
     that streams as fast as it may (tests/fakes/bench.py `/flood/`) whose clients read
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
connection and, five times a second, one on a new connection (a new client: `Legit`). Targets:
every request answered, on the open connection and on new ones (at the cap a new connection
closes the one idle the longest); the proxy's log grows by a few lines (one per episode), not
one per socket.

Then three attacks of issue 40, each against a proxy of its own while `Legit` clients (a new
connection each, ten a second) send normal requests, each reporting the legitimate requests
answered, the proxy's RSS growth and its log lines:
  - the refused-body trickle (item 2): `--trickle` connections, as many as `max_connections`,
    each sending a request with a wrong client key that announces a 4 MB body, `--trickle-mb`
    MB of it at once and then a byte a second for 10 s, legitimate requests from 1.5 s on (once
    the refused ones' linger is over). Targets: every legitimate request answered; every
    trickling connection closed; RSS growth at most 256 KB per connection (what one read of
    the event loop takes may arrive before the answer is decided; none of the body is kept);
  - the big unfinished heads (item 4): `--heads` connections, each sending 127 headers of
    8,190 bytes and no blank line. Targets: every one answered 431; RSS growth at most 64 KB
    per connection (`max_head_bytes` is 32 KB);
  - the pool-hogging key (item 6): one client key opening `--hog` streams that stay open (the
    mock's `/idle/`) while another key's requests go to the same provider and to one on another
    origin. Targets: every legitimate request answered; the hog has at most
    `max_requests_per_key` (256) under way, the rest refused 429.

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
import contextlib
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
    raise_nofile,
    rss_mb,
    side_by_side,
    start_mock,
    wait_until_ok,
)

LINGER_S = 1.5  # longer than the proxy's linger after an answer to a request it did not read
STREAM = json.dumps(
    {"model": "bench", "messages": [{"role": "user", "content": "go"}], "stream": True}
)


KEY = "bench-legit-key"  # the client key of legitimate requests, where keys are on


def start_proxy(
    procs: Processes,
    upstream: int,
    workdir: Path,
    timeout_s: float,
    prefix: tuple[str, ...] = (),
    name: str = "proxy",
    build: Build = THIS_TREE,
    *,
    keys: str | None = None,
    server: dict[str, Any] | None = None,
    elsewhere: int | None = None,
) -> tuple[int, int]:
    """A proxy on the mock at port `upstream` (routes `normal`, `flood`, `idle`, and with
    `elsewhere`, a second mock's port, `elsewhere`: another origin), client `keys` (comma
    separated) or none; its port and pid."""
    base = f"http://127.0.0.1:{upstream}"
    config: dict[str, Any] = {
        "health": {"mode": "off"},
        "state": "memory://",
        "server": {
            "keepalive_timeout_s": timeout_s,
            "request_timeout_s": timeout_s,
            "client_write_timeout_s": timeout_s,
            **(server or {}),
        },
        "providers": [
            {"name": "mock", "endpoint": f"{base}{PATH}"},
            {"name": "flood", "endpoint": f"{base}/flood{PATH}", "timeout": {"read": 600000}},
            {"name": "idle", "endpoint": f"{base}/idle{PATH}", "timeout": {"read": 600000}},
        ],
        "routes": {"normal": ["mock"]},
    }
    if elsewhere is not None:
        endpoint = f"http://127.0.0.1:{elsewhere}{PATH}"
        config["providers"].append({"name": "elsewhere", "endpoint": endpoint})
    path = workdir / f"bench-abuse-{name}.json"
    path.write_text(json.dumps(config))
    env = {k: v for k, v in os.environ.items() if k != "AGENT_REACH_API_KEYS"}
    if keys is not None:
        env["AGENT_REACH_API_KEYS"] = keys
    port = free_port()
    cmd = [*prefix, *agent_reach_serve(path, port, build.executable), "--no-access-log"]
    proc = procs.start(cmd, cpu=0, env=env, log=workdir / f"{name}.log")
    auth = {"Authorization": f"Bearer {keys.split(',')[-1]}"} if keys else {}
    if wait_until_ok(Target(port, auth), timeout_s=30) is None:
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


class Legit:
    """Normal requests while an attack is on, each on a new connection (a new client), one
    every `gap_s` from a thread, round the `targets`: how many were sent and answered 200."""

    def __init__(self, targets: list[Target], gap_s: float) -> None:
        self.targets = targets
        self.gap_s = gap_s
        self.sent = 0
        self.answered: list[float] = []  # ms of each answered one
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.gap_s):
            client = Client(self.targets[self.sent % len(self.targets)], timeout=15)
            self.sent += 1
            try:
                ms = client.post()
            except OSError:
                ms = None
            finally:
                client.close()
            if ms is not None:
                self.answered.append(ms)

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        self._thread.join(30)
        kept = self.answered
        return {
            "legit_sent": self.sent,
            "legit_answered": len(kept),
            "legit_p50_ms": round(pct(kept, 0.5), 3) if kept else None,
            "legit_max_ms": round(max(kept), 1) if kept else None,
        }


def log_lines(log: Path) -> int:
    return len(log.read_text().splitlines())


class Watch:
    """A proxy's RSS and log lines over an attack, from the moment it is made."""

    def __init__(self, pid: int, log: Path) -> None:
        self.pid, self.log = pid, log
        self.lines = log_lines(log)
        self.before = self.peak = rss_mb(pid)

    def sample(self) -> None:
        self.peak = max(self.peak, rss_mb(self.pid))

    def figures(self, connections: int) -> dict[str, Any]:
        """RSS before, at its peak and its growth per attacking connection; log lines since."""
        self.sample()
        return {
            "rss_mb_before": round(self.before, 1),
            "rss_mb_peak": round(self.peak, 1),
            "rss_kb_growth_per_connection": round(
                (self.peak - self.before) * 1024 / connections, 1
            ),
            "log_lines_during": log_lines(self.log) - self.lines,
        }


def send_each(socks: list[socket.socket], data: bytes) -> None:
    """Send `data` on each socket, as far as the proxy takes it (5 s at most each)."""
    for sock in socks:
        sock.settimeout(5)
        with contextlib.suppress(OSError):  # closed by the proxy under it
            sock.sendall(data)
        sock.setblocking(False)


def statuses(socks: list[socket.socket], wait_s: float) -> list[int | None]:
    """The status each socket's answer began with (None: none came within `wait_s` in all),
    reading and dropping what else comes."""
    heads = [b""] * len(socks)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and any(b"\r\n" not in h for h in heads):
        for i, sock in enumerate(socks):
            if b"\r\n" in heads[i]:
                continue
            try:
                heads[i] += sock.recv(4096)
            except BlockingIOError:
                continue
            except OSError:
                heads[i] += b"\r\n"  # reset: no status
        time.sleep(0.05)
    found = []
    for head in heads:
        parts = head.split(b" ", 2)
        ok = len(parts) > 1 and head.startswith(b"HTTP/") and parts[1].isdigit()
        found.append(int(parts[1]) if ok else None)
    return found


def refused_trickle(
    procs: Processes, upstream: int, workdir: Path, count: int, mb: float, build: Build
) -> dict[str, Any]:
    """Issue 40, 2: `count` connections (all that `max_connections` allows) that send a request
    with a wrong key announcing a 4 MB body, `mb` MB of it at once, then a byte a second."""
    server = {"max_connections": count}
    port, pid = start_proxy(
        procs, upstream, workdir, 30.0, name="trickle-proxy", build=build, keys=KEY, server=server
    )
    log = workdir / "trickle-proxy.log"
    legit_target = Target(port, {"X-Agent-Reach-Route": "normal", "Authorization": f"Bearer {KEY}"})
    Client(legit_target).post()  # warm
    watch = Watch(pid, log)
    head = (
        f"POST {PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer wrong\r\n"
        "Content-Type: application/json\r\nContent-Length: 4000000\r\n\r\n{"
    ).encode()
    socks = [connect(port) for _ in range(count)]
    send_each(socks, head + b" " * int(mb * 2**20))
    time.sleep(LINGER_S)  # every refused one has had its linger: its slot is free, or held
    legit = Legit([legit_target], 0.1)
    for _ in range(10):  # then a byte a second, for 10 s
        watch.sample()
        for sock in socks:
            with contextlib.suppress(OSError):
                sock.send(b" ")
        time.sleep(1.0)
    still_open = sum(not closed_by_server(s) for s in socks)
    for sock in socks:
        sock.close()
    return {
        "connections": count,
        "mb_sent_at_once_each": mb,
        "still_open_after_10_s": still_open,
        **watch.figures(count),
        **legit.stop(),
    }


def big_heads(
    procs: Processes, upstream: int, workdir: Path, count: int, build: Build
) -> dict[str, Any]:
    """Issue 40, 4: `count` connections each sending 127 headers of 8,190 bytes and no blank
    line (a megabyte each held until `request_timeout_s` before the head had a cap)."""
    port, pid = start_proxy(procs, upstream, workdir, 30.0, name="heads-proxy", build=build)
    log = workdir / "heads-proxy.log"
    legit_target = Target(port, {"X-Agent-Reach-Route": "normal"})
    Client(legit_target).post()
    watch = Watch(pid, log)
    legit = Legit([legit_target], 0.1)
    start = b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    pad = b"p" * (8190 - len("X-Pad-000: "))
    lines_sent = start + b"".join(b"X-Pad-%03d: %s\r\n" % (i, pad) for i in range(127))
    socks = [connect(port) for _ in range(count)]
    began = time.monotonic()
    send_each(socks, lines_sent)
    sent_s = time.monotonic() - began
    watch.sample()
    found = statuses(socks, 5.0)
    time.sleep(max(0.0, 3.0 - (time.monotonic() - began)))  # legitimate requests for 3 s at least
    for sock in socks:
        sock.close()
    return {
        "connections": count,
        "bytes_sent_each": len(lines_sent),
        "sent_in_s": round(sent_s, 1),
        "answered_431": found.count(431),
        "unanswered": found.count(None),
        **watch.figures(count),
        **legit.stop(),
    }


def pool_hog(
    procs: Processes, upstream: int, workdir: Path, hog: int, seconds: float, build: Build
) -> dict[str, Any]:
    """Issue 40, 6: one key opens `hog` streams that stay open, to one provider, while another
    key's requests go to the same provider and to one on another origin."""
    elsewhere = start_mock(procs)
    port, pid = start_proxy(
        procs,
        upstream,
        workdir,
        600.0,
        name="hog-proxy",
        build=build,
        keys=f"bench-hog-key,{KEY}",
        elsewhere=elsewhere,
    )
    log = workdir / "hog-proxy.log"
    auth = {"Authorization": f"Bearer {KEY}"}
    same = Target(port, {"X-Agent-Reach-Route": "normal", **auth})
    other = Target(port, {"X-Agent-Reach-Route": "elsewhere", **auth})
    Client(same).post()
    watch = Watch(pid, log)
    hog_request = Target(
        port, {"X-Agent-Reach-Route": "idle", "Authorization": "Bearer bench-hog-key"}, STREAM
    ).wire()
    socks = [connect(port) for _ in range(hog)]
    send_each(socks, hog_request)
    found = statuses(socks, 10.0)  # the streams' heads, or their 429s
    legit = Legit([same, other], 0.1)
    time.sleep(seconds)
    result = {
        "hog_streams": hog,
        "hog_under_way": found.count(200),
        "hog_refused_429": found.count(429),
        "hog_unanswered": found.count(None),
        **watch.figures(hog),
        **legit.stop(),
    }
    for sock in socks:
        sock.close()
    return result


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
    rss_before = rss_mb(pid)
    holder = Holder(port, idle)
    time.sleep(1.0)  # every silent connection opened, the cap full of them
    fresh = Legit([target], 0.2)
    kept: list[float] = []
    failed = 0
    stop = time.monotonic() + seconds
    while time.monotonic() < stop:
        try:
            ms = client.post()
        except OSError:
            ms = None
        if ms is None:
            failed += 1
        else:
            kept.append(ms)
        time.sleep(0.01)
    held_fds, rss_held = fds(pid), rss_mb(pid)
    new = fresh.stop()
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
        "new_connections": new["legit_sent"],
        "new_connections_answered": new["legit_answered"],
        "new_connections_p50_ms": new["legit_p50_ms"],
        "rss_mb_before": round(rss_before, 1),
        "rss_mb_held": round(rss_held, 1),
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
    parser.add_argument("--trickle", type=int, default=200, help="refused bodies trickling")
    parser.add_argument("--trickle-mb", type=float, default=3.0, help="sent at once, each")
    parser.add_argument("--heads", type=int, default=1000, help="unfinished 1 MB heads")
    parser.add_argument("--hog", type=int, default=1100, help="one key's open streams")
    parser.add_argument("--hog-seconds", type=float, default=10.0)
    add_before(parser)
    args = parser.parse_args()
    pin_self(1)
    raise_nofile()
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
        trickle = refused_trickle(procs, upstream, Path(tmp), args.trickle, args.trickle_mb, build)
        print(json.dumps({"refused-body trickle": trickle}), flush=True)
        heads = big_heads(procs, upstream, Path(tmp), args.heads, build)
        print(json.dumps({"big unfinished heads": heads}), flush=True)
        hogged = pool_hog(procs, upstream, Path(tmp), args.hog, args.hog_seconds, build)
        print(json.dumps({"pool-hogging key": hogged}), flush=True)

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
        "ulimit 1024: every new connection answered": fd["new_connections_answered"]
        == fd["new_connections"],
        "ulimit 1024: log lines per episode, not per socket": fd["log_lines_during"] <= 4,
        "concurrent budget: at most the limit reach the provider": budget["reached_provider"]
        <= budget["limit"],
        "refused-body trickle: every legitimate request answered": all_answered(trickle),
        "refused-body trickle: every trickling connection closed": trickle["still_open_after_10_s"]
        == 0,
        "refused-body trickle: RSS growth <= 256 KB per connection": trickle[
            "rss_kb_growth_per_connection"
        ]
        <= 256,
        "big heads: every one answered 431": heads["answered_431"] == args.heads,
        "big heads: every legitimate request answered": all_answered(heads),
        "big heads: RSS growth <= 64 KB per connection": heads["rss_kb_growth_per_connection"]
        <= 64,
        "pool hog: every legitimate request answered": all_answered(hogged),
        "pool hog: at most 256 of its streams under way": hogged["hog_under_way"] <= 256,
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
        "refused_trickle": trickle,
        "big_heads": heads,
        "pool_hog": hogged,
        "targets": targets,
    }


def all_answered(row: dict[str, Any]) -> bool:
    return bool(row["legit_sent"]) and row["legit_answered"] == row["legit_sent"]


if __name__ == "__main__":
    main()
