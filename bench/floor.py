"""How much of agent-reach's hop is aiohttp's own: direct to the upstream, nginx as a plain
reverse proxy, the aiohttp floor (bench/peers/aiohttp_floor.py: a pass-through proxy with no
keys, no checks, no failover, no log) and `agent-reach serve` as a user runs it, in one run.

    .venv/bin/python bench/floor.py [--quick] [--before REV]

Per proxy: the added p50 at 1 in flight (interleaved rounds of keep-alive requests, as
bench/peers), req/s at 32 in flight (wrk, the median of 5 runs of 3 s, taken in rounds
across the proxies) and the CPU time its process spent per request in that run (utime + stime
÷ requests: steadier than req/s on a shared machine), then agent-reach over the floor and
over nginx. The upstream, wrk and this script's client run on CPU 1, the
proxies on CPU 0 (as bench/peers). `--before REV`: agent-reach at commit REV too, beside
this tree's (bench/common.py's `build_at`). Results: bench/results/floor.{json,md}.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import (
    THIS_TREE,
    Load,
    Processes,
    Target,
    add_before,
    builds,
    cpu_s,
    interleaved,
    machine,
    pin_self,
    publish,
    spread,
)
from peers.base import CONFIGS, LOAD_CPU, PROXY_CPU
from peers.contenders import AUTH, Peer, agent_reach, bench_env, nginx_proxy
from peers.install import need_nginx
from peers.nginx import start_nginx
from peers.scenarios import cold_start

FLOOR = Path(__file__).parent / "peers" / "aiohttp_floor.py"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short run to try the script")
    add_before(parser)
    args = parser.parse_args()
    quick = args.quick
    agents = builds(args.before)
    requests, seconds, runs = (300, 2.0, 1) if quick else (3000, 3.0, 5)
    workdir = Path(tempfile.mkdtemp(prefix="agent-reach-floor-"))
    nginx = need_nginx(workdir)
    pinned = pin_self(LOAD_CPU)
    with Processes() as procs:
        upstream, failing = start_nginx(procs, nginx.path, workdir, workdir)
        env = bench_env(upstream, failing, upstream)
        floor = Peer(
            "aiohttp floor",
            lambda port: [sys.executable, str(FLOOR), str(port), env["BENCH_UPSTREAM"]],
            {"plain": Target(0, AUTH)},
            env,
        )
        peers = [nginx_proxy(nginx.path, env, workdir), floor]
        peers += [agent_reach(env, build=build) for build in agents]
        for peer in peers:
            peer.raw = None
            why = cold_start(procs, peer, 1, workdir)
            if why is not None:
                sys.exit(f"{peer.name} did not start: {why}")
        targets = {"direct": Target(upstream), **{p.name: p.target() for p in peers}}
        samples, _ = interleaved(targets, requests, max_s=120)
        base = spread(samples["direct"])["p50"]
        load = Load(workdir)
        kept: dict[str, list[tuple[float, float]]] = {p.name: [] for p in peers}
        for i in range(runs):  # in rounds, so that the machine's slow spells hit all alike,
            for p in peers if i % 2 == 0 else peers[::-1]:  # and no peer always comes first
                assert p.proc is not None
                before = cpu_s(p.proc.pid)
                out = load.run(p.target(), 32, seconds)
                per_request = (cpu_s(p.proc.pid) - before) / max(out["requests"], 1)
                kept[p.name].append((out["rps"], per_request))
        rows: dict[str, dict[str, Any]] = {}
        for p in peers:
            rps, per_request = sorted(kept[p.name])[runs // 2]  # the median run by req/s
            p50 = spread(samples[p.name])["p50"]
            rows[p.name] = {"added_p50_ms": p50 - base, "rps": rps, "cpu_us": per_request * 1e6}
    results = {
        "when": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "machine": machine(),
        "pinning": f"proxies on CPU {PROXY_CPU}, the rest on CPU {LOAD_CPU}" if pinned else "none",
        "config": str(CONFIGS / "agent-reach.yaml"),
        "direct_p50_ms": base,
        "rows": rows,
    }
    publish("floor", results, markdown(results))


def markdown(r: dict[str, Any]) -> str:
    rows = r["rows"]
    ar = rows[THIS_TREE.label]
    others = [n for n in rows if n != THIS_TREE.label]
    lines = [
        "# agent-reach's hop against nginx's and aiohttp's floor",
        "",
        f"{r['when']}, bench/floor.py; {r['machine']['cpu']}, pinning: {r['pinning']}.",
        f"Direct to the upstream: p50 {r['direct_p50_ms']:.3f} ms at 1 in flight.",
        "",
        "| | added p50, 1 in flight | req/s, 32 in flight | CPU per request |",
        "|---|---|---|---|",
    ]
    for name, row in rows.items():
        lines.append(
            f"| {name} | +{row['added_p50_ms']:.3f} ms | {row['rps']:,.0f} "
            f"| {row['cpu_us']:.0f} µs |"
        )
    lines += [
        "",
        "| agent-reach over | added p50 | req/s | CPU per request |",
        "|---|---|---|---|",
    ]
    for name in others:
        other = rows[name]
        lines.append(
            f"| {name} | {ar['added_p50_ms'] / other['added_p50_ms']:.2f}× "
            f"| {_share(ar['rps'], other['rps'])} | {ar['cpu_us'] / other['cpu_us']:.2f}× |"
        )
    return "\n".join(lines) + "\n"


def _share(mine: float, theirs: float) -> str:
    """`mine` over `theirs`: "1/N" below 1, "N×" from 1."""
    return f"{mine / theirs:.2f}×" if mine >= theirs else f"1/{theirs / mine:.1f}"


if __name__ == "__main__":
    main()
