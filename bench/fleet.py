"""A fleet of proxies when a provider dies: requests wasted on it, and how fast the opening of
its circuit reaches every instance. One Redis for the fleet (failures counted fleet-wide,
openings published) against the same fleet with per-instance state (a SQLite file each), in
one run.

    .venv/bin/python bench/fleet.py [--instances 4] [--failures 10] [--clients 8] [--rate 400]
                                    [--trials 20]

Each trial: `clients` concurrent clients send requests round-robin to the `instances`
proxies at `rate` requests a second in all (100 a second per instance by default), routed `dead-K, backup`; provider `dead-K` (a fresh name per trial, so every trial
starts closed) then starts answering 500, and the load goes on until every instance has
skipped it. Measured per trial:
- wasted: requests that reached `dead-K` after it died (counted by the upstream);
- propagation: from the circuit's first opening (the time of the `failures`-th failure, of
  the fleet on Redis, of the quickest instance otherwise) to the last instance's first skip,
  both read from the attempt log the proxies write (their own clocks, one machine); it
  includes the wait for each instance's next request after the opening reached it;
- the Redis part alone: from one store writing an opening to another applying it.
Results go to bench/results/fleet.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from agent_reach.config import CircuitConfig
from agent_reach.core.breaker import CircuitState
from agent_reach.net.ports import free_port
from agent_reach.state import LoggedAttempt, open_store
from agent_reach.state.redis import RedisStore
from common import RESULTS, Processes, agent_reach_serve, machine, pct
from tests.fakes.serving import port_of, start

COMPLETION = {
    "id": "chatcmpl-bench",
    "object": "chat.completion",
    "created": 1_700_000_000,
    "model": "m",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
    ],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}


class Upstream:
    """`/dead-K` answers until `dead` holds K, then 500; `/backup` always answers. The
    requests that reach each dead `dead-K` are counted."""

    def __init__(self) -> None:
        self.dead: set[int] = set()
        self.arrivals: dict[int, list[float]] = {}

    async def handle(self, request: web.Request) -> web.Response:
        await request.read()
        name = request.match_info["name"]
        if name.startswith("dead-"):
            k = int(name[5:])
            if k in self.dead:
                self.arrivals.setdefault(k, []).append(time.time())
                return web.json_response({"error": {"message": "down"}}, status=500)
        return web.json_response(COMPLETION)


def config(upstream_port: int, state: str, trials: int, failures: int) -> dict[str, Any]:
    base = f"http://127.0.0.1:{upstream_port}"
    providers = [
        {"name": f"dead-{k}", "endpoint": f"{base}/dead-{k}/v1/chat/completions"}
        for k in range(trials)
    ]
    providers.append({"name": "backup", "endpoint": f"{base}/backup/v1/chat/completions"})
    return {
        "version": "0.3.2",
        "health": {"mode": "off"},
        "state": state,
        "circuit": {"failures": failures, "cooldown_s": 600},
        "providers": providers,
    }


async def wait_ready(session: aiohttp.ClientSession, port: int) -> None:
    for _ in range(300):
        try:
            async with session.get(f"http://127.0.0.1:{port}/healthz") as resp:
                if resp.status == 200:
                    return
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(0.05)
    raise SystemExit(f"proxy on {port} did not start")


async def trial(
    session: aiohttp.ClientSession,
    ports: list[int],
    upstream: Upstream,
    k: int,
    clients: int,
    rate: float,
) -> tuple[float, float]:
    """One provider's death under load; (the time it died, the time every instance had
    skipped it), on the wall clock the proxies log with."""
    order = {"X-Agent-Reach-Fallback-Order": f"dead-{k},backup"}
    seq = 0
    skipping: set[int] = set()
    stop = asyncio.Event()

    async def client() -> None:
        nonlocal seq
        gap = clients / rate  # each client's share of the fleet-wide rate
        while not stop.is_set():
            began = time.perf_counter()
            seq += 1
            instance = seq % len(ports)
            body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
            url = f"http://127.0.0.1:{ports[instance]}/v1/chat/completions"
            async with session.post(url, json=body, headers=order) as resp:
                await resp.read()
                trace = resp.headers.get("X-Agent-Reach-Trace", "")
                assert resp.status == 200, (resp.status, trace)
            if k in upstream.dead and trace.startswith(f"dead-{k}:circuit_open"):
                skipping.add(instance)
                if len(skipping) == len(ports):
                    stop.set()
            await asyncio.sleep(max(0.0, gap - (time.perf_counter() - began)))

    workers = [asyncio.create_task(client()) for _ in range(clients)]
    await asyncio.sleep(0.3)  # warm: every instance has answered through dead-K
    died = time.time()
    upstream.dead.add(k)
    try:
        await asyncio.wait_for(stop.wait(), 20)
    finally:
        stop.set()
        await asyncio.gather(*workers)
    return died, time.time()


def measure(
    log: list[LoggedAttempt], k: int, died: float, until: float, failures: int, fleet: bool
) -> float:
    """From the attempt log (the proxies' own clocks): ms from the first opening of dead-K's
    circuit (the `failures`-th failure, of the fleet or of one instance) to the last
    instance's first skip of it. An instance is known by its request ids' prefix."""
    mine = [
        a for a in log if died <= a.ts <= until + 1 and a.provider.partition("@")[0] == f"dead-{k}"
    ]
    failed: dict[str, list[float]] = {}
    skipped: dict[str, float] = {}
    for a in sorted(mine, key=lambda a: a.ts):
        instance = "fleet" if fleet else a.request.rsplit("-", 1)[0]
        if a.reason == "server_error":
            failed.setdefault(instance, []).append(a.ts)
        elif a.reason == "circuit_open":
            skipped.setdefault(a.request.rsplit("-", 1)[0], a.ts)
    opened = min(ts[failures - 1] for ts in failed.values() if len(ts) >= failures)
    return (max(skipped.values()) - opened) * 1000


async def run_mode(
    label: str, states: list[str], args: argparse.Namespace, workdir: Path, procs: Processes
) -> dict[str, Any]:
    upstream = Upstream()
    app = web.Application()
    app.router.add_post("/{name}/v1/chat/completions", upstream.handle)
    runner = await start(app)
    upstream_port = port_of(runner)
    ports = [free_port() for _ in states]
    started = []
    for i, (state, port) in enumerate(zip(states, ports, strict=True)):
        path = workdir / f"{label}-{i}.json"
        path.write_text(json.dumps(config(upstream_port, state, args.trials, args.failures)))
        cmd = agent_reach_serve(path, port)
        started.append(procs.start(cmd, log=workdir / f"{label}-{i}.log"))
    windows = []
    try:
        connector = aiohttp.TCPConnector(limit=args.clients * 2)
        async with aiohttp.ClientSession(connector=connector) as session:
            for port in ports:
                await wait_ready(session, port)
            for k in range(args.trials):
                windows.append(await trial(session, ports, upstream, k, args.clients, args.rate))
    finally:
        for proc in started:
            procs.stop(proc)  # SIGTERM: each writes what its log still holds
        await runner.cleanup()
    log: list[LoggedAttempt] = []
    for state in dict.fromkeys(states):
        store = open_store(state)
        log += await store.attempts(windows[0][0] - 1)
        await store.aclose()
    fleet = len(set(states)) == 1
    wasted = [len(upstream.arrivals.get(k, [])) for k in range(args.trials)]
    delays = [
        measure(log, k, died, until, args.failures, fleet)
        for k, (died, until) in enumerate(windows)
    ]
    return {
        "state": label,
        "wasted": {
            "mean": round(statistics.mean(wasted), 1),
            "min": min(wasted),
            "max": max(wasted),
        },
        "propagation_ms": {
            "p50": round(pct(delays, 0.50), 1),
            "p99": round(pct(delays, 0.99), 1),
        },
        "trials": [
            {"wasted": w, "propagation_ms": round(d, 2)}
            for w, d in zip(wasted, delays, strict=True)
        ],
    }


async def publish_to_apply(redis_url: str, count: int = 200) -> dict[str, float]:
    """The part of the propagation that is Redis's: ms from one store writing an opening to a
    second store (its own connections) applying it, `count` times."""
    a, b = RedisStore(redis_url), RedisStore(redis_url)
    applied: dict[str, float] = {}
    b.follow(CircuitConfig(), lambda key, _b, _a: applied.setdefault(key, time.perf_counter()))
    a.follow(CircuitConfig(), lambda *_: None)
    await a.circuit("warm@0"), await b.circuit("warm@0")  # subscribe
    await asyncio.sleep(0.3)
    delays = []
    for i in range(count):
        key = f"bench-{i}@0"
        start = time.perf_counter()
        await a.set_circuit(key, CircuitState(10, time.time() + 60, False, "server_error"))
        while key not in applied and time.perf_counter() - start < 1:
            await asyncio.sleep(0)
        delays.append((applied.get(key, time.perf_counter()) - start) * 1000)
    await a.aclose()
    await b.aclose()
    return {"p50": round(pct(delays, 0.5), 2), "p99": round(pct(delays, 0.99), 2)}


def start_redis(procs: Processes, workdir: Path) -> str:
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server is not installed (scripts/ensure-services.sh installs it)")
    port = free_port()
    procs.start(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(workdir),
        ]
    )
    time.sleep(0.3)
    return f"redis://127.0.0.1:{port}/0"


async def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--instances", type=int, default=4)
    parser.add_argument("--failures", type=int, default=10)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--rate", type=float, default=400, help="fleet-wide requests/s")
    args = parser.parse_args()
    with Processes() as procs, tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        redis_url = start_redis(procs, workdir)
        per_instance = [f"sqlite:///{workdir}/own-{i}.db" for i in range(args.instances)]
        modes = [
            await run_mode("redis", [redis_url] * args.instances, args, workdir, procs),
            await run_mode("per-instance", per_instance, args, workdir, procs),
        ]
        pubsub = await publish_to_apply(redis_url)
    print(
        f"{args.instances} instances, circuit.failures {args.failures}, {args.clients} clients "
        f"round-robin at {args.rate:g} req/s in all, {args.trials} trials each"
    )
    print(f"{'state':<14}{'wasted mean (min-max)':<26}propagation p50 / p99")
    for m in modes:
        w, p = m["wasted"], m["propagation_ms"]
        wasted = f"{w['mean']} ({w['min']}-{w['max']})"
        print(f"{m['state']:<14}{wasted:<26}{p['p50']} / {p['p99']} ms")
    print(
        f"an opening, written by one store to applied by another: p50 {pubsub['p50']} / p99 {pubsub['p99']} ms"
    )
    RESULTS.mkdir(exist_ok=True)
    out = {"machine": machine(), "args": vars(args), "modes": modes, "publish_to_apply_ms": pubsub}
    (RESULTS / "fleet.json").write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    asyncio.run(main())
