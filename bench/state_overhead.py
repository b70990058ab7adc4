"""What shared state costs the proxy: throughput and p99 at 32 in flight with `state:` memory://,
sqlite:///… and redis://… (when redis-server is installed), measured in one run, interleaved.

    .venv/bin/python bench/state_overhead.py [--seconds 5] [--rounds 2]

Each store keeps circuits and the attempt log (one log line per request, written in batches);
one provider also has a budget (`metadata.rate_limit`), so every request counts into it too.
Proxy on CPU 0; the mock upstream, wrk and redis-server on CPU 1.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
from pathlib import Path

from agent_reach.net.ports import free_port
from common import (
    PATH,
    Processes,
    Target,
    agent_reach_serve,
    ensure_wrk,
    start_mock,
    wait_until_ok,
    wrk_run,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--budget", action="store_true", help="count every request into a budget")
    args = parser.parse_args()
    wrk = ensure_wrk()
    if wrk is None:
        raise SystemExit("wrk is needed (apt-get install wrk)")
    work = Path(tempfile.mkdtemp(prefix="agent-reach-state-"))
    with Processes() as procs:
        upstream = start_mock(procs)
        stores = {"memory": "memory://", "sqlite": f"sqlite:///{work}/state.db"}
        if shutil.which("redis-server"):
            redis_port = free_port()
            procs.start(
                ["redis-server", "--port", str(redis_port), "--save", "", "--appendonly", "no"],
                cpu=1,
            )
            stores["redis"] = f"redis://127.0.0.1:{redis_port}/0"
        ports = {}
        for name, url in stores.items():
            config = {
                "health": {"mode": "off"},
                "state": url,
                "providers": [
                    {
                        "name": "mock",
                        "endpoint": f"http://127.0.0.1:{upstream}{PATH}",
                        "metadata": {"rate_limit": "100000000req/day"} if args.budget else {},
                    }
                ],
            }
            path = work / f"{name}.json"
            path.write_text(json.dumps(config))
            ports[name] = free_port()
            procs.start(agent_reach_serve(path, ports[name]), cpu=0)
            if wait_until_ok(Target(ports[name]), timeout_s=30) is None:
                raise SystemExit(f"the {name} proxy did not start")
        rps: dict[str, list[float]] = {name: [] for name in stores}
        p99: dict[str, list[float]] = {name: [] for name in stores}
        for _ in range(args.rounds):
            for name, port in ports.items():
                got = wrk_run(wrk, Target(port), 32, args.seconds, work / "post.lua")
                rps[name].append(got["rps"])
                p99[name].append(got["p99_ms"])
    base = statistics.median(rps["memory"])
    print(f"proxy throughput by state store, 32 in flight, {args.rounds} x {args.seconds:g} s each")
    for name in stores:
        r = statistics.median(rps[name])
        print(
            f"{name:<7} {r:8.0f} req/s  p99 {statistics.median(p99[name]):6.2f} ms  "
            f"{r / base:5.2f}x memory://"
        )


if __name__ == "__main__":
    main()
