"""The proxy's cost: requests straight to a fast local mock against the same requests through
`agent-reach serve`, measured in one run.

    .venv/bin/python bench/proxy.py [--seconds 5] [--latency-requests 2000]

- Added latency at 1 in flight: p50 and p99 of sequential keep-alive requests, direct and
  through the proxy interleaved in rounds of 100, from one Python client.
- Throughput at 32 and 128 in flight: wrk (installed with apt-get when missing and possible;
  otherwise an aiohttp load generator in its own process, said in the output).
- Pinning (2-core machine): the proxy on CPU 0; the mock upstream and the load generator on
  CPU 1. The mock alone serves far more than the proxy, so the proxy is what is measured.
Results go to bench/results/proxy.json. `bench/peers` does the same against nginx and next
to LiteLLM and Portkey.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from agent_reach.net.ports import free_port
from common import (
    PATH,
    RESULTS,
    Load,
    Processes,
    Target,
    agent_reach_serve,
    interleaved,
    spread,
    start_mock,
    wait_until_ok,
)


def start_proxy(procs: Processes, upstream_port: int, workdir: Path) -> int:
    config = {
        "health": {"mode": "off"},
        "state": "memory://",
        "providers": [{"name": "mock", "endpoint": f"http://127.0.0.1:{upstream_port}{PATH}"}],
    }
    path = workdir / "bench-proxy.json"
    path.write_text(json.dumps(config))
    env = {k: v for k, v in os.environ.items() if k != "AGENT_REACH_API_KEYS"}
    port = free_port()
    procs.start(agent_reach_serve(path, port), cpu=0, env=env)
    if wait_until_ok(Target(port), timeout_s=30) is None:
        raise SystemExit("agent-reach serve did not answer within 30 s")
    return port


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--latency-requests", type=int, default=2000)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="agent-reach-bench-"))
    results: dict[str, Any] = {
        "machine": f"{os.cpu_count()} CPUs",
        "when": time.strftime("%Y-%m-%d %H:%M"),
    }
    with Processes() as procs:
        mock_port = start_mock(procs)
        proxy_port = start_proxy(procs, mock_port, workdir)
        targets = {"direct": Target(mock_port), "proxy": Target(proxy_port)}
        lat, _ = interleaved(targets, args.latency_requests, warmup=200)
        direct, proxy = spread(lat["direct"]), spread(lat["proxy"])
        results["latency_1_in_flight_ms"] = {
            "direct": {"p50": direct["p50"], "p99": direct["p99"]},
            "proxy": {"p50": proxy["p50"], "p99": proxy["p99"]},
            "added": {"p50": proxy["p50"] - direct["p50"], "p99": proxy["p99"] - direct["p99"]},
        }
        load = Load(workdir)
        results["load_generator"] = load.name
        for conns in (32, 128):
            row: dict[str, Any] = {}
            for name, target in targets.items():
                run = load.run(target, conns, args.seconds)
                row[name] = {k: run[k] for k in ("rps", "p99_ms", "non_2xx")}
            row["ratio"] = row["proxy"]["rps"] / row["direct"]["rps"]
            results[f"throughput_{conns}_in_flight"] = row
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "proxy.json").write_text(json.dumps(results, indent=2))
    print(
        f"proxy overhead ({results['machine']}, proxy pinned to CPU 0, mock and load on CPU 1, load: {results['load_generator']})"
    )
    added = results["latency_1_in_flight_ms"]["added"]
    print(
        f"1 in flight, {args.latency_requests} requests each: direct p50 {direct['p50']:.3f} ms p99 {direct['p99']:.3f} ms; "
        f"proxy p50 {proxy['p50']:.3f} ms p99 {proxy['p99']:.3f} ms; added p50 {added['p50']:+.3f} ms, p99 {added['p99']:+.3f} ms"
    )
    for conns in (32, 128):
        row = results[f"throughput_{conns}_in_flight"]
        print(
            f"{conns:>3} in flight: direct {row['direct']['rps']:8.0f} req/s (p99 {row['direct']['p99_ms']:.2f} ms); "
            f"proxy {row['proxy']['rps']:8.0f} req/s (p99 {row['proxy']['p99_ms']:.2f} ms, non-2xx {row['proxy']['non_2xx']:.0f}); "
            f"ratio {row['ratio']:.2f}"
        )


if __name__ == "__main__":
    main()
