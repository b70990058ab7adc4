"""Hedging against a heavy-tailed primary: p50/p99 with and without `hedge_after_ms`.

    .venv/bin/python bench/hedging.py [--requests 300] [--concurrency 20] [--hedge-ms 100]

The primary answers in ~2 ms, except 10% of its answers, which take 2 s; the backup always
answers in ~2 ms. Both runs send the same requests through the library, in the same process
run; the upstream (tests/fakes/bench.py `/tail/`) runs in its own process.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import time

from agent_reach import Router
from common import MOCK, ROOT, pct

REQUEST = {"model": "m", "messages": [{"role": "user", "content": "ping"}]}


def config(port: int, hedge_ms: float | None) -> dict[str, object]:
    primary: dict[str, object] = {
        "name": "primary",
        "endpoint": f"http://127.0.0.1:{port}/tail/v1/chat/completions",
        "timeout": {"read": 5000},
    }
    if hedge_ms:
        primary["hedge_after_ms"] = hedge_ms
    backup = {"name": "backup", "endpoint": f"http://127.0.0.1:{port}/v1/chat/completions"}
    return {"health": {"mode": "off"}, "state": "memory://", "providers": [primary, backup]}


async def measure(port: int, hedge_ms: float | None, total: int, concurrency: int) -> list[float]:
    latencies: list[float] = []
    gate = asyncio.Semaphore(concurrency)
    async with Router(config(port, hedge_ms)) as router:

        async def one() -> None:
            async with gate:
                start = time.perf_counter()
                await router.achat(REQUEST)
                latencies.append((time.perf_counter() - start) * 1000)

        await asyncio.gather(*(one() for _ in range(total)))
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--hedge-ms", type=float, default=100)
    args = parser.parse_args()
    upstream = subprocess.Popen(MOCK, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert upstream.stdout is not None
        port = int(upstream.stdout.readline())
        runs = {
            "no hedging": asyncio.run(measure(port, None, args.requests, args.concurrency)),
            f"hedge_after_ms: {args.hedge_ms:g}": asyncio.run(
                measure(port, args.hedge_ms, args.requests, args.concurrency)
            ),
        }
    finally:
        upstream.terminate()
        upstream.wait(10)
    print(
        f"heavy-tailed primary (10% of answers take 2 s), {args.requests} requests, "
        f"{args.concurrency} in flight"
    )
    for name, values in runs.items():
        print(
            f"{name:<22} p50 {statistics.median(values):7.1f} ms   p99 {pct(values, 0.99):7.1f} ms"
            f"   max {max(values):7.1f} ms"
        )


if __name__ == "__main__":
    main()
