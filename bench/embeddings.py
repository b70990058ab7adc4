"""Embeddings through a proxy (issue 35): agent-reach against LiteLLM's proxy in one run, both in
front of the same fake (tests/fakes/bench.py `/embed/`, 1,024-wide vectors): the added p50 at
1 in flight and req/s at 32 in flight, for requests of 1 input and of 100. And what one big
request costs agent-reach (issue 47): its peak RSS growth against the answer's size, and the
slowest `/healthz` answer while it runs, for 100 to 2,048 inputs, floats and base64.

    .venv/bin/python bench/embeddings.py [--quick] [--no-litellm] [--memory-only]

Pinning as bench/floor.py: the proxies on CPU 0, the fake, wrk and this client on CPU 1; every
proxy measured in rounds, in turn, its order alternating. LiteLLM is installed once under
bench/.peers (as bench/peers does). Results: bench/results/embeddings.{json,md}.
"""

from __future__ import annotations

import argparse
import http.client
import json
import string
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from common import (
    RESULTS,
    THIS_TREE,
    Load,
    Processes,
    Target,
    agent_reach_serve,
    cpu_s,
    interleaved,
    machine,
    pin_self,
    publish,
    spread,
    start_mock,
)
from peers.base import LOAD_CPU, PROXY_CPU
from peers.contenders import AUTH, Peer
from peers.install import INSTALLS, LITELLM_SPEC, install_venv
from peers.scenarios import cold_start

PATH = "/v1/embeddings"
SIZES = (1, 100)
AGENT_REACH = {
    "version": "0.3.2",
    "state": "memory://",
    "health": {"mode": "off"},
    "server": {"api_keys_env": "BENCH_PROXY_KEYS", "max_body_bytes": 2**24},
    "embeddings": {
        "spaces": {"bench-embed": {"dimensions": 1024}, "bench-embed-32": {"dimensions": 1024}}
    },
    "providers": [
        {
            "name": "upstream",
            "endpoint": "${BENCH_EMBED}/embed/v1/chat/completions",
            "api_key_env": "BENCH_UPSTREAM_KEY",
            "embeddings": {"models": {"bench-embed": "bench"}},
        },
        {
            "name": "upstream32",
            "endpoint": "${BENCH_EMBED}/embed32/v1/chat/completions",
            "api_key_env": "BENCH_UPSTREAM_KEY",
            "embeddings": {"models": {"bench-embed-32": "bench"}},
        },
    ],
}
LITELLM = """
model_list:
  - model_name: bench-embed
    litellm_params:
      model: openai/bench
      api_base: ${BENCH_EMBED}/embed/v1
      api_key: ${BENCH_UPSTREAM_KEY}
      max_retries: 0
litellm_settings: {num_retries: 0, request_timeout: 30}
general_settings: {master_key: ${BENCH_PROXY_KEY}}
"""


def body(n: int) -> str:
    inputs = [f"def function_{i}(x): return x * {i}  # a line of code to index" for i in range(n)]
    return json.dumps({"model": "bench-embed", "input": inputs, "encoding_format": "float"})


LABELS = {f"{n} input{'s' * (n > 1)}": n for n in SIZES}


def scenarios() -> dict[str, Target]:
    """One target per size, and "plain" (one input), which a cold start waits for."""
    sized = {label: Target(0, AUTH, body(n), PATH) for label, n in LABELS.items()}
    return {"plain": sized["1 input"], **sized}


def peers(env: dict[str, str], workdir: Path, litellm: bool) -> list[Peer]:
    config = workdir / "agent-reach.json"
    config.write_text(string.Template(json.dumps(AGENT_REACH)).substitute(env))
    out = [Peer(THIS_TREE.label, lambda port: agent_reach_serve(config, port), scenarios(), env)]
    if litellm:
        got = install_venv("litellm", LITELLM_SPEC, "litellm", workdir)
        if not got.ok:
            raise SystemExit(f"LiteLLM: {got.detail}")
        print(f"  LiteLLM {got.detail}", flush=True)
        lite = workdir / "litellm.yaml"
        lite.write_text(string.Template(LITELLM).substitute(env))
        binary = str(INSTALLS / "litellm" / "bin" / "litellm")
        own = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "ERROR"}
        command = [binary, "--config", str(lite), "--host", "127.0.0.1", "--num_workers", "1"]
        out.append(
            Peer(
                "LiteLLM",
                lambda port: [*command, "--port", str(port)],
                scenarios(),
                {**env, **own},
                start_timeout_s=120.0,
            )
        )
    return out


def settle(peer: Peer, limit_s: float = 120.0) -> None:
    """Wait until `peer` has worked off what the load left it (requests wrk gave up on are
    still answered), so it takes no CPU from the next one measured: under 2 % of a core over
    half a second."""
    assert peer.proc is not None
    end = time.monotonic() + limit_s
    before = cpu_s(peer.proc.pid)
    while time.monotonic() < end:
        time.sleep(0.5)
        now = cpu_s(peer.proc.pid)
        if now - before < 0.01:
            return
        before = now


MEMORY_SIZES = (100, 500, 2048)


def _kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def _get_ms(port: int, path: str) -> float:
    start = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", path)
    conn.getresponse().read()
    conn.close()
    return (time.perf_counter() - start) * 1000


def one_big_request(peer: Peer, space: str, n: int, encoding: str) -> dict[str, float]:
    """One request of `n` inputs: the proxy's peak RSS growth over it (VmHWM reset first), the
    answer's size, and the slowest of the `/healthz` answers asked every 20 ms meanwhile."""
    assert peer.proc is not None
    pid, port = peer.proc.pid, peer.port
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM := VmRSS
    before = _kb(pid, "VmRSS")
    inputs = [f"def function_{i}(x): return x * {i}" for i in range(n)]
    payload = json.dumps({"model": space, "input": inputs, "encoding_format": encoding})
    done = threading.Event()
    health: list[float] = []

    def poll() -> None:
        while not done.is_set():
            health.append(_get_ms(port, "/healthz"))
            time.sleep(0.02)

    poller = threading.Thread(target=poll)
    poller.start()
    start = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    conn.request("POST", PATH, payload, {**AUTH, "Content-Type": "application/json"})
    resp = conn.getresponse()
    size = len(resp.read())
    conn.close()
    took = time.perf_counter() - start
    done.set()
    poller.join()
    assert resp.status == 200, resp.status
    growth = (_kb(pid, "VmHWM") - before) / 1024
    return {
        "answer_mb": size / 2**20,
        "peak_growth_mb": growth,
        "ratio": growth / (size / 2**20),
        "seconds": took,
        "healthz_max_ms": max(health, default=0.0),
    }


# The two fakes' vectors: numbers of 5 characters, and float32s written as OpenAI does (~20).
MEMORY_SPACES = {"bench-embed": "short numbers", "bench-embed-32": "float32s"}


def memory(peer: Peer) -> list[dict[str, Any]]:
    rows = []
    for space, numbers in MEMORY_SPACES.items():
        for n in MEMORY_SIZES:
            for encoding in ("float", "base64"):
                row = {
                    "numbers": numbers,
                    "inputs": n,
                    "encoding": encoding,
                    **one_big_request(peer, space, n, encoding),
                }
                print(
                    f"  {numbers:>13}, {n:>5} inputs, {encoding:>6}: answer "
                    f"{row['answer_mb']:6.2f} MB, peak RSS +{row['peak_growth_mb']:6.1f} MB "
                    f"({row['ratio']:.1f}x), {row['seconds']:.2f} s, slowest /healthz meanwhile "
                    f"{row['healthz_max_ms']:.1f} ms",
                    flush=True,
                )
                rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short run to try the script")
    parser.add_argument("--no-litellm", action="store_true", help="agent-reach alone")
    parser.add_argument("--memory-only", action="store_true", help="only one big request's cost")
    args = parser.parse_args()
    requests, seconds, runs = (200, 2.0, 1) if args.quick else (2000, 3.0, 5)
    workdir = Path(tempfile.mkdtemp(prefix="agent-reach-embeddings-"))
    pinned = pin_self(LOAD_CPU)
    with Processes() as procs:
        fake = f"http://127.0.0.1:{start_mock(procs, cpu=LOAD_CPU)}"
        env = {
            "BENCH_EMBED": fake,
            "BENCH_UPSTREAM_KEY": "sk-bench-upstream",
            "BENCH_PROXY_KEY": AUTH["Authorization"].split()[1],
            "BENCH_PROXY_KEYS": AUTH["Authorization"].split()[1],
        }
        proxies = peers(env, workdir, not (args.no_litellm or args.memory_only))
        for peer in proxies:
            why = cold_start(procs, peer, 1, workdir)
            if why is not None:
                raise SystemExit(f"{peer.name} did not start: {why}")
        print("One big request through agent-reach (1,024-wide vectors):", flush=True)
        big = memory(proxies[0])
        rows: dict[str, dict[str, Any]] = {p.name: {} for p in proxies}
        load = Load(workdir)
        for scenario, size in LABELS.items() if not args.memory_only else ():
            direct = Target(
                int(fake.rsplit(":", 1)[1]), {}, scenarios()[scenario].body, "/embed" + PATH
            )
            targets = {"direct": direct, **{p.name: p.target(scenario) for p in proxies}}
            samples, _ = interleaved(targets, requests, max_s=120)
            base = spread(samples["direct"])["p50"]
            kept: dict[str, list[dict[str, Any]]] = {p.name: [] for p in proxies}
            length = seconds * (3 if size > 1 else 1)  # a slow answer has the time it takes
            for i in range(runs):
                for p in proxies if i % 2 == 0 else proxies[::-1]:
                    kept[p.name].append(load.run(p.target(scenario), 32, length))
                    settle(p)
            for p in proxies:
                middle = sorted(kept[p.name], key=lambda r: r["rps"])[runs // 2]
                rows[p.name][scenario] = {
                    "added_p50_ms": spread(samples[p.name])["p50"] - base,
                    "rps": middle["rps"],
                    "timeouts": middle["socket_errors"],
                }
    results = {
        "when": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "machine": machine(),
        "pinning": f"proxies on CPU {PROXY_CPU}, the rest on CPU {LOAD_CPU}" if pinned else "none",
        "rows": rows,
        "one_big_request": big,
    }
    if not args.memory_only:
        publish("embeddings", results, markdown(results))


def markdown(r: dict[str, Any]) -> str:
    m = r["machine"]
    lines = [
        "# Embeddings through a proxy: agent-reach and LiteLLM in front of one fake",
        "",
        f"{r['when']}, bench/embeddings.py; {m['cpu']}, pinning: {r['pinning']}.",
        "Vectors of 1,024 floats; 32 in flight for req/s (rounds of 3 s, 9 s for 100 inputs; each",
        "proxy left to finish what a round left it before the next), the median round.",
        "",
        "| proxy | scenario | added p50, 1 in flight | req/s, 32 in flight | timed out (10 s) |",
        "|---|---|---|---|---|",
    ]
    for name, by in r["rows"].items():
        for scenario, row in by.items():
            lines.append(
                f"| {name} | {scenario} | +{row['added_p50_ms']:.3f} ms | {row['rps']:,.1f} "
                f"| {row['timeouts']:,.0f} |"
            )
    lines += [
        "",
        "One big request through agent-reach, alone (1,024-wide vectors): the proxy's peak RSS",
        "growth over it against the answer's size, and the slowest `/healthz` asked every 20 ms",
        "meanwhile.",
        "",
        "| upstream numbers | inputs | encoding | answer | peak RSS growth | ratio | took |"
        " slowest /healthz |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in r["one_big_request"]:
        lines.append(
            f"| {row['numbers']} | {row['inputs']:,} | {row['encoding']} | {row['answer_mb']:.2f} MB "
            f"| +{row['peak_growth_mb']:.1f} MB | {row['ratio']:.1f}x | {row['seconds']:.2f} s "
            f"| {row['healthz_max_ms']:.1f} ms |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    RESULTS.mkdir(exist_ok=True)
    main()
