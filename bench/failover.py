"""What a dead primary costs: requests through agent-reach whose first provider refuses
connections, against requests straight to the provider that answers, measured in one run.

    .venv/bin/python bench/failover.py [--rounds 10] [--per-round 100]

Scenarios, interleaved round by round so that machine noise hits all of them alike:
- direct:        a route with only the answering provider (the baseline)
- refused-first: first provider refuses connections every time (health off, circuit never
                 opens), so each request pays a real refused connect before failing over
- refused-known: the same with the defaults (cached health, circuit): the dead provider is
                 remembered and skipped
Then a chain of three hanging providers with a 500 ms deadline, to show the deadline holds.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import time
from typing import Any

from agent_reach import AllProvidersFailed, Router
from agent_reach.net.ports import free_port
from common import MOCK, ROOT, pct

REQUEST = {"model": "bench", "messages": [{"role": "user", "content": "ping"}]}


def config(up: str, dead: str | None, defaults: bool) -> dict[str, Any]:
    providers = []
    if dead:
        providers.append(
            {"name": "dead", "endpoint": dead, "timeout": {"connect": 1000, "read": 30000}}
        )
    providers.append({"name": "live", "endpoint": up})
    top: dict[str, Any] = {"providers": providers, "state": "memory://"}
    if not defaults:
        top["health"] = {"mode": "off"}
        top["circuit"] = {"failures": 10**9}
    return top


async def timed(router: Router, n: int, out: list[float]) -> None:
    for _ in range(n):
        start = time.perf_counter()
        result = await router.achat(REQUEST)
        out.append((time.perf_counter() - start) * 1000)
        assert result.provider == "live"


async def run(rounds: int, per_round: int, port: int) -> dict[str, list[float]]:
    up = f"http://127.0.0.1:{port}/v1/chat/completions"
    dead = f"http://127.0.0.1:{free_port()}/v1/chat/completions"
    routers = {
        "direct": Router(config(up, None, False)),
        "refused-first": Router(config(up, dead, False)),
        "refused-known": Router(config(up, dead, True)),
    }
    samples: dict[str, list[float]] = {name: [] for name in routers}
    for router in routers.values():  # warm up pools and caches
        await timed(router, 20, [])
    for _ in range(rounds):
        for name, router in routers.items():
            await timed(router, per_round, samples[name])
    for router in routers.values():
        await router.aclose()
    return samples


async def deadline_chain(port: int) -> tuple[float, list[str]]:
    hang = f"http://127.0.0.1:{port}/hang/v1/chat/completions"
    cfg = {
        "health": {"mode": "off"},
        "state": "memory://",
        "deadline_ms": 500,
        "providers": [
            {"name": f"hang{i}", "endpoint": hang, "timeout": {"read": 10000}} for i in range(3)
        ],
    }
    async with Router(cfg) as router:
        start = time.perf_counter()
        try:
            await router.achat(REQUEST)
        except AllProvidersFailed as exc:
            elapsed = (time.perf_counter() - start) * 1000
            return elapsed, [f"{a.provider}:{a.reason}({a.detail})" for a in exc.attempts]
    raise SystemExit("a hanging chain answered?")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--per-round", type=int, default=100)
    args = parser.parse_args()
    proc = subprocess.Popen(MOCK, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        samples = asyncio.run(run(args.rounds, args.per_round, port))
        chain_ms, chain = asyncio.run(deadline_chain(port))
    finally:
        proc.terminate()
        proc.wait(10)
    base50 = statistics.median(samples["direct"])
    base99 = pct(samples["direct"], 0.99)
    n = args.rounds * args.per_round
    print(f"failover cost, {n} requests per scenario, in-process library, loopback mock upstream")
    print(f"{'scenario':<15} {'p50 ms':>8} {'p99 ms':>8} {'+p50 ms':>9} {'p50 ratio':>10}")
    for name, values in samples.items():
        p50, p99 = statistics.median(values), pct(values, 0.99)
        print(f"{name:<15} {p50:8.3f} {p99:8.3f} {p50 - base50:+9.3f} {p50 / base50:10.2f}x")
    print(f"(baseline direct p50 {base50:.3f} ms, p99 {base99:.3f} ms)")
    print(f"\nthree hanging providers, deadline 500 ms: failed after {chain_ms:.0f} ms")
    print("  " + ", ".join(chain))


if __name__ == "__main__":
    main()
