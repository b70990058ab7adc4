"""What tracing costs the proxy: throughput at 32 in flight of the proxy before this version
(a git ref, `main` by default), of this tree with tracing unconfigured, and of this tree
exporting every request's spans over OTLP/HTTP to a local sink, measured in one run.

    .venv/bin/python bench/tracing.py [--ref main] [--seconds 5] [--rounds 3]

The three proxies are measured in turn, `rounds` times (the median counts), pinned to CPU 0
with the mock upstream and the load generator on CPU 1. The ref's source is taken with
`git archive` and run by this venv's Python. Results go to bench/results/tracing.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from agent_reach.net.ports import free_port
from common import (
    HERE,
    PATH,
    RESULTS,
    Load,
    Processes,
    Target,
    start_mock,
    wait_until_ok,
)

SINK = """
import sys
from aiohttp import web
async def traces(request):
    await request.read()
    return web.Response(content_type="application/x-protobuf")
app = web.Application()
app.router.add_post("/v1/traces", traces)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)
"""


def source_of(ref: str, workdir: Path) -> Path:
    """The `src` tree of a git ref, unpacked under `workdir`."""
    archive = workdir / "ref.tar"
    subprocess.run(
        ["git", "-C", str(HERE.parent), "archive", "-o", str(archive), ref, "src"], check=True
    )
    with tarfile.open(archive) as tar:
        tar.extractall(workdir / "ref", filter="data")
    return workdir / "ref" / "src"


def start_proxy(
    procs: Processes, config: Path, env: dict[str, str], pythonpath: Path | None
) -> int:
    port = free_port()
    if pythonpath is not None:
        env = {**env, "PYTHONPATH": str(pythonpath)}
    cmd = [sys.executable, "-m", "agent_reach", "--config", str(config), "serve"]
    procs.start([*cmd, "--port", str(port)], cpu=0, env=env)
    if wait_until_ok(Target(port), timeout_s=30) is None:
        raise SystemExit("agent-reach serve did not answer within 30 s")
    return port


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--ref", default="main")
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="agent-reach-bench-"))
    base_env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENT_REACH", "OTEL_"))}
    with Processes() as procs:
        mock = start_mock(procs)
        config = workdir / "proxy.json"
        config.write_text(
            json.dumps(
                {
                    "health": {"mode": "off"},
                    "state": "memory://",
                    "providers": [{"name": "mock", "endpoint": f"http://127.0.0.1:{mock}{PATH}"}],
                }
            )
        )
        sink = free_port()
        procs.start([sys.executable, "-c", SINK, str(sink)], cpu=1)
        traced = {**base_env, "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{sink}"}
        proxies = {
            f"{args.ref} (before)": start_proxy(
                procs, config, base_env, source_of(args.ref, workdir)
            ),
            "tracing off": start_proxy(procs, config, base_env, None),
            "tracing on": start_proxy(procs, config, traced, None),
        }
        load = Load(workdir)
        runs: dict[str, list[float]] = {name: [] for name in proxies}
        for _ in range(args.rounds):
            for name, port in proxies.items():
                runs[name].append(load.run(Target(port), 32, args.seconds)["rps"])
    base = statistics.median(runs[f"{args.ref} (before)"])
    results: dict[str, Any] = {"load_generator": load.name, "rounds": runs, "median_rps": {}}
    print(f"throughput at 32 in flight, median of {args.rounds} rounds ({load.name})")
    for name, values in runs.items():
        median = statistics.median(values)
        results["median_rps"][name] = median
        print(f"  {name:<16} {median:8.0f} req/s  ({median / base:.3f}x)  rounds: {values}")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "tracing.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
