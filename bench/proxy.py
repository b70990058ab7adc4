"""The proxy's cost: requests straight to a fast local mock against the same requests through
`agent-reach serve`, measured in one run.

    .venv/bin/python bench/proxy.py [--seconds 5] [--latency-requests 2000]

- Added latency at 1 in flight: p50 and p99 of sequential keep-alive requests, direct and
  through the proxy interleaved in rounds of 100, from one Python client.
- Throughput at 32 and 128 in flight: wrk (installed with apt-get when missing and possible;
  otherwise an aiohttp load generator in its own process, said in the output).
- Pinning (2-core machine): the proxy on CPU 0; the mock upstream and the load generator on
  CPU 1. The mock alone serves far more than the proxy, so the proxy is what is measured.
Results go to bench/results/proxy.json.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
BIN = str(Path(sys.executable).parent / "agent-reach")
BODY = json.dumps({"model": "bench", "messages": [{"role": "user", "content": "ping"}]})
PATH = "/v1/chat/completions"


def pinned(cpu: int, cmd: list[str]) -> list[str]:
    return (
        ["taskset", "-c", str(cpu), *cmd]
        if shutil.which("taskset") and os.cpu_count() and os.cpu_count() > 1
        else cmd
    )  # type: ignore[operator]


def start_mock() -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(
        pinned(1, [sys.executable, str(HERE / "mock_upstream.py")]),
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    return proc, int(proc.stdout.readline())


def start_proxy(upstream_port: int, workdir: Path) -> tuple[subprocess.Popen[str], int]:
    config = {
        "health": {"mode": "off"},
        "state": "memory://",
        "providers": [{"name": "mock", "endpoint": f"http://127.0.0.1:{upstream_port}{PATH}"}],
    }
    path = workdir / "bench-proxy.json"
    path.write_text(json.dumps(config))
    env = {k: v for k, v in os.environ.items() if k != "AGENT_REACH_API_KEYS"}
    proc = subprocess.Popen(
        pinned(0, [BIN, "--config", str(path), "serve", "--port", "0"]),
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    return proc, int(line.split("http://", 1)[1].split()[0].rsplit(":", 1)[1])


def latencies(ports: dict[str, int], total: int) -> dict[str, list[float]]:
    conns = {name: http.client.HTTPConnection("127.0.0.1", port) for name, port in ports.items()}
    out: dict[str, list[float]] = {name: [] for name in ports}
    headers = {"Content-Type": "application/json"}

    def one(conn: http.client.HTTPConnection) -> float:
        start = time.perf_counter()
        conn.request("POST", PATH, BODY, headers)
        resp = conn.getresponse()
        resp.read()
        assert resp.status == 200, resp.status
        return (time.perf_counter() - start) * 1000

    for conn in conns.values():  # warm up
        for _ in range(200):
            one(conn)
    for _ in range(total // 100):
        for name, conn in conns.items():
            out[name] += [one(conn) for _ in range(100)]
    return out


def ensure_wrk() -> str | None:
    if shutil.which("wrk"):
        return shutil.which("wrk")
    if os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run(["apt-get", "install", "-y", "-q", "wrk"], capture_output=True, check=False)
        if not shutil.which("wrk"):
            subprocess.run(["apt-get", "update", "-q"], capture_output=True, check=False)
            subprocess.run(
                ["apt-get", "install", "-y", "-q", "wrk"], capture_output=True, check=False
            )
    return shutil.which("wrk")


LUA = f"""
wrk.method = "POST"
wrk.body = '{BODY}'
wrk.headers["Content-Type"] = "application/json"
"""


def wrk_run(wrk: str, port: int, conns: int, seconds: int, script: Path) -> dict[str, float]:
    cmd = pinned(
        1,
        [
            wrk,
            "-t1",
            f"-c{conns}",
            f"-d{seconds}s",
            "--latency",
            "-s",
            str(script),
            f"http://127.0.0.1:{port}{PATH}",
        ],
    )
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    p99 = _ms(re.search(r"99%\s+([\d.]+\w+)", out).group(1))  # type: ignore[union-attr]
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return {"rps": rps, "p99_ms": p99, "non_2xx": float(errors.group(1)) if errors else 0.0}


def _ms(text: str) -> float:
    value, unit = float(re.match(r"[\d.]+", text).group(0)), re.sub(r"[\d.]+", "", text)  # type: ignore[union-attr]
    return value * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]


def python_load(port: int, conns: int, seconds: int) -> dict[str, float]:
    code = f"""
import asyncio, time, aiohttp
async def main():
    done = 0; lat = []
    stop = time.perf_counter() + {seconds}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit={conns})) as s:
        async def worker():
            nonlocal done
            while time.perf_counter() < stop:
                t = time.perf_counter()
                async with s.post("http://127.0.0.1:{port}{PATH}", data={BODY!r}, headers={{"Content-Type": "application/json"}}) as r:
                    await r.read()
                lat.append((time.perf_counter() - t) * 1000); done += 1
        await asyncio.gather(*(worker() for _ in range({conns})))
    lat.sort(); print(done / {seconds}, lat[int(0.99 * len(lat))])
asyncio.run(main())
"""
    out = subprocess.run(
        pinned(1, [sys.executable, "-c", code]), capture_output=True, text=True, check=True
    ).stdout
    rps, p99 = map(float, out.split())
    return {"rps": rps, "p99_ms": p99, "non_2xx": 0.0}


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--latency-requests", type=int, default=2000)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="agent-reach-bench-"))
    mock, mock_port = start_mock()
    proxy, proxy_port = start_proxy(mock_port, workdir)
    results: dict[str, Any] = {
        "machine": f"{os.cpu_count()} CPUs",
        "when": time.strftime("%Y-%m-%d %H:%M"),
    }
    try:
        lat = latencies({"direct": mock_port, "proxy": proxy_port}, args.latency_requests)
        d50, d99 = statistics.median(lat["direct"]), pct(lat["direct"], 0.99)
        p50, p99 = statistics.median(lat["proxy"]), pct(lat["proxy"], 0.99)
        results["latency_1_in_flight_ms"] = {
            "direct": {"p50": d50, "p99": d99},
            "proxy": {"p50": p50, "p99": p99},
            "added": {"p50": p50 - d50, "p99": p99 - d99},
        }
        wrk = ensure_wrk()
        results["load_generator"] = "wrk" if wrk else "python-aiohttp (wrk unavailable)"
        script = workdir / "post.lua"
        script.write_text(LUA)
        for conns in (32, 128):
            row = {}
            for name, port in (("direct", mock_port), ("proxy", proxy_port)):
                row[name] = (
                    wrk_run(wrk, port, conns, args.seconds, script)
                    if wrk
                    else python_load(port, conns, args.seconds)
                )
            row["ratio"] = row["proxy"]["rps"] / row["direct"]["rps"]
            results[f"throughput_{conns}_in_flight"] = row
    finally:
        for proc in (proxy, mock):
            proc.send_signal(signal.SIGTERM)
            proc.wait(15)
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "proxy.json").write_text(json.dumps(results, indent=2))
    print(
        f"proxy overhead ({results['machine']}, proxy pinned to CPU 0, mock and load on CPU 1, load: {results['load_generator']})"
    )
    added = results["latency_1_in_flight_ms"]["added"]
    print(
        f"1 in flight, {args.latency_requests} requests each: direct p50 {d50:.3f} ms p99 {d99:.3f} ms; "
        f"proxy p50 {p50:.3f} ms p99 {p99:.3f} ms; added p50 {added['p50']:+.3f} ms, p99 {added['p99']:+.3f} ms"
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
