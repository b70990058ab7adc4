"""agent-reach's own work per request, face by face: the added p50 at 1 in flight, req/s at 32
in flight and the CPU per request of `agent-reach serve`, for the chat face (whole and
streamed), the Responses and Messages faces (translated to a chat provider, and native to a
provider that speaks them), against one nginx answering every upstream call from memory.

    .venv/bin/python bench/own_work.py [--quick] [--profile DIR] [--only chat,stream,...]
                                       [--against REV,...]

`--against`: the same scenarios through `agent-reach serve` of these git revisions (exported
beside this tree, run with its venv) in the same run; then each proxy's CPU per request is
measured once more with all of them loaded at the same time ("paired"), which a machine that
others use disturbs alike.

`--profile DIR`: py-spy records the proxy during each scenario's load (DIR/NAME.txt, the
collapsed stacks) and the table adds the share of the proxy's samples spent in agent-reach's
own frames (a sample counts as ours when its innermost `agent_reach` frame is not below an
aiohttp, asyncio or other library frame of the I/O) and the top functions by own time.
Pinning as bench/floor.py: the proxy on CPU 0, nginx, wrk and this client on CPU 1.
Results: bench/results/own_work.{json,md}.
"""

from __future__ import annotations

import argparse
import collections
import json
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from agent_reach.net.ports import free_port
from common import (
    HERE,
    RESULTS,
    Client,
    Load,
    Processes,
    Target,
    agent_reach_serve,
    machine,
    pin_self,
    spread,
    wait_until_ok,
    wrk_run,
)
from floor import cpu_s
from peers.base import LOAD_CPU, PROXY_CPU, PROXY_KEY, UPSTREAM_KEY
from peers.contenders import AUTH
from peers.install import install_nginx
from peers.nginx import nginx_command, nginx_frame
from tests.fakes.bench import BODY as COMPLETION
from tests.fakes.bench import SSE_END, SSE_FRAMES

RESPONSE = {
    "id": "resp_bench",
    "object": "response",
    "created_at": 1700000000,
    "status": "completed",
    "model": "bench",
    "output": [
        {
            "type": "message",
            "id": "msg_bench",
            "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "pong", "annotations": []}],
        }
    ],
    "usage": {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2},
}
MESSAGE = {
    "id": "msg_bench",
    "type": "message",
    "role": "assistant",
    "model": "bench",
    "content": [{"type": "text", "text": "pong"}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 1, "output_tokens": 1},
}
# The chat answer as agent-reach would normalize it: it passes as its bytes.
NORMALIZED = orjson.loads(COMPLETION)
NORMALIZED["choices"][0]["message"]["refusal"] = None
NORMALIZED["choices"][0]["logprobs"] = None


def agent_turn(turns: int = 40) -> dict[str, Any]:
    """A coding agent's request late in a session (~90 KB): a long system prompt, `turns`
    rounds of a question, a tool call and its output, and 20 tools."""
    tool = {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a shell command. " * 20,
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string"}, "timeout": {"type": "integer"}},
                "required": ["command"],
            },
        },
    }
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are an agent. " * 200}]
    for i in range(turns):
        call = {"id": f"call_{i}", "type": "function"}
        call["function"] = {"name": "bash", "arguments": json.dumps({"command": f"cat f{i}.py"})}
        messages += [
            {"role": "user", "content": f"Please look at file {i} and fix it. " * 10},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"call_{i}", "content": f"def f(): return {i}\n" * 50},
        ]
    return {"model": "bench", "messages": messages, "tools": [tool] * 20}


PING = [{"role": "user", "content": "ping"}]
SCENARIOS: dict[str, tuple[str, dict[str, Any], str]] = {
    # name: (path, body, route)
    "chat": ("/v1/chat/completions", {"model": "bench", "messages": PING}, "chat"),
    "chat-agent": ("/v1/chat/completions", agent_turn(), "chat"),
    "chat-verbatim": ("/v1/chat/completions", {"model": "bench", "messages": PING}, "verbatim"),
    "stream": ("/v1/chat/completions", {"model": "bench", "messages": PING, "stream": True}, "sse"),
    "responses": ("/v1/responses", {"model": "bench", "input": "ping"}, "chat"),
    "responses-native": ("/v1/responses", {"model": "bench", "input": "ping"}, "responses"),
    "messages": ("/v1/messages", {"model": "bench", "max_tokens": 8, "messages": PING}, "chat"),
    "messages-native": (
        "/v1/messages",
        {"model": "bench", "max_tokens": 8, "messages": PING},
        "messages",
    ),
}
OURS = "agent_reach"
PYSPY = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
LIBRARIES = ("aiohttp", "asyncio", "multidict", "yarl", "prometheus_client", "orjson")


@dataclass(frozen=True)
class Proxy:
    """One `agent-reach serve` under test: its process, port, log, and its profiles' suffix."""

    proc: subprocess.Popen[bytes]
    port: int
    log: Path
    tag: str


def upstream_conf(port: int, workdir: Path) -> str:
    """nginx answering the chat answer, a 20-chunk SSE stream (unpaced), a Responses answer and
    a Messages answer, each from memory."""
    sse = b"".join([*SSE_FRAMES, SSE_END]).decode()
    return nginx_frame(
        workdir,
        "warn",
        f"""
    server {{
        listen 127.0.0.1:{port} backlog=4096;
        location = /v1/chat/completions {{ return 200 '{COMPLETION.decode()}'; }}
        location = /verbatim/v1/chat/completions {{ return 200 '{json.dumps(NORMALIZED)}'; }}
        location = /sse/v1/chat/completions {{
            default_type text/event-stream; return 200 '{sse}';
        }}
        location = /v1/responses {{ return 200 '{json.dumps(RESPONSE)}'; }}
        location = /v1/messages {{ return 200 '{json.dumps(MESSAGE)}'; }}
        location / {{ return 200 '{{"object": "list", "data": [{{"id": "bench"}}]}}'; }}
    }}""",
    )


def proxy_config(upstream: str) -> dict[str, Any]:
    """As a user runs it: client keys, default health checks and circuits, memory state."""
    providers = [
        {"name": "chat", "endpoint": f"{upstream}/v1/chat/completions"},
        {"name": "verbatim", "endpoint": f"{upstream}/verbatim/v1/chat/completions"},
        {"name": "sse", "endpoint": f"{upstream}/sse/v1/chat/completions"},
        {"name": "responses", "endpoint": f"{upstream}/v1/responses", "format": "responses"},
        {"name": "messages", "endpoint": f"{upstream}/v1/messages", "format": "anthropic"},
    ]
    for p in providers:
        p["api_key_env"] = "BENCH_UPSTREAM_KEY"
    return {
        "version": "0.3.2",
        "state": "memory://",
        "server": {"api_keys_env": "BENCH_PROXY_KEYS"},
        "providers": providers,
    }


def shares(stacks: Path, top: int = 20) -> dict[str, Any]:
    """From py-spy's collapsed stacks: the share of samples spent in our code, in the I/O
    libraries, or elsewhere. A sample belongs to its innermost frame that is ours or a library's
    (a stdlib helper such as `re` counts for whoever called it; C calls, such as orjson's, have
    no frame and count for their caller); our top functions by such samples."""
    counts: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    under: collections.Counter[str] = collections.Counter()  # ours, with what they call
    total = 0
    for line in stacks.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not n.isdigit():
            continue
        total += int(n)
        for frame in reversed(stack.split(";")):
            package = _package(frame)
            if package == OURS:
                counts["ours"] += int(n)
                own[_name(frame)] += int(n)
                ours = {_name(f) for f in stack.split(";") if _package(f) == OURS}
                under.update(dict.fromkeys(ours, int(n)))
                break
            if package in LIBRARIES:
                counts["libraries"] += int(n)
                break
        else:
            counts["other"] += int(n)
    total = max(total, 1)
    return {
        "samples": total,
        **{k: round(100 * counts[k] / total, 1) for k in ("ours", "libraries", "other")},
        "top_ours": [(name, round(100 * n / total, 1)) for name, n in own.most_common(top)],
        "top_under": [(name, round(100 * n / total, 1)) for name, n in under.most_common(top)],
    }


def _package(frame: str) -> str:
    """The top-level package of a py-spy frame `fn (aiohttp/web_protocol.py:602)`, or of its
    last directory when its path is absolute."""
    path = frame.rsplit(" (", 1)[-1]
    for part in path.split("/"):
        if part in LIBRARIES or part == OURS:
            return part
    return ""


def _name(frame: str) -> str:
    """`fn server/log.py` of a py-spy frame `fn (agent_reach/server/log.py:12)`."""
    path = frame.rsplit("(", 1)[-1].split(":", 1)[0]
    return frame.split(" (", 1)[0] + " " + path.split(f"{OURS}/", 1)[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short run to try the script")
    parser.add_argument("--profile", type=Path, help="py-spy each scenario's load into DIR")
    parser.add_argument("--only", help="these scenarios only (comma-separated)")
    parser.add_argument("--against", help="git revisions measured beside this tree (a,b,…)")
    args = parser.parse_args()
    names = args.only.split(",") if args.only else list(SCENARIOS)
    requests, seconds, runs = (300, 2.0, 1) if args.quick else (2000, 3.0, 3)
    workdir = Path(tempfile.mkdtemp(prefix="agent-reach-own-"))
    nginx = install_nginx(workdir)
    if not nginx.ok:
        sys.exit(f"no nginx: {nginx.detail}")
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    sources: dict[str, Path | None] = {"this tree": None}
    if args.against:
        revs = args.against.split(",")
        exported: dict[str, Path | None] = {
            rev: _export(rev, workdir / f"rev{i}") for i, rev in enumerate(revs)
        }
        sources = exported | sources
    pinned = pin_self(LOAD_CPU)
    rows: dict[str, dict[str, dict[str, Any]]] = {}
    with Processes() as procs:
        port = free_port()
        conf = workdir / "nginx.conf"
        conf.write_text(upstream_conf(port, workdir))
        procs.start(nginx_command(nginx.path, conf, workdir), cpu=LOAD_CPU)
        if wait_until_ok(Target(port), timeout_s=20) is None:
            sys.exit("the upstream nginx did not answer")
        config = workdir / "agent-reach.json"
        config.write_text(json.dumps(proxy_config(f"http://127.0.0.1:{port}")))
        proxies: dict[str, Proxy] = {}
        for label, source in sources.items():
            proxy_port = free_port()
            env = {"BENCH_UPSTREAM_KEY": UPSTREAM_KEY, "BENCH_PROXY_KEYS": PROXY_KEY}
            env["PATH"] = str(Path(sys.executable).parent) + ":/usr/bin:/bin"
            if source is not None:
                env["PYTHONPATH"] = str(source / "src")
            log = workdir / f"log-{len(proxies)}"
            proc = procs.start(
                agent_reach_serve(config, proxy_port), cpu=PROXY_CPU, env=env, log=log
            )
            tag = "" if source is None else f"-{source.name}"
            proxies[label] = Proxy(proc, proxy_port, log, tag)
        load = Load(workdir)
        for name in names:
            rows[name] = scenario(name, port, proxies, load, args, seconds, requests, runs)
    results = {
        "when": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "machine": machine(),
        "pinning": f"proxies on CPU {PROXY_CPU}, the rest on CPU {LOAD_CPU}" if pinned else "none",
        "rows": rows,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "own_work.json").write_text(json.dumps(results, indent=2) + "\n")


def scenario(
    name: str,
    port: int,
    proxies: dict[str, Proxy],
    load: Load,
    args: argparse.Namespace,
    seconds: float,
    requests: int,
    runs: int,
) -> dict[str, dict[str, Any]]:
    """One scenario through each proxy: p50 at 1 in flight beside direct, then req/s at 32 in
    flight in rounds (py-spy recording the first round of each, with `--profile`)."""
    rows: dict[str, dict[str, Any]] = {}
    path, body, route = SCENARIOS[name]
    headers = {**AUTH, "X-Agent-Reach-Route": route, "anthropic-version": "2023-06-01"}
    targets = {"direct": Target(port, {}, json.dumps(body), _upstream_path(route))}
    for label, proxy in proxies.items():
        targets[label] = Target(proxy.port, headers, json.dumps(body), path)
        if wait_until_ok(targets[label], timeout_s=30) is None:
            sys.exit(f"{name}: {label} did not answer: {proxy.log.read_text()[-500:]}")
    lat: dict[str, list[float]] = {who: [] for who in targets}
    clients = {who: Client(target) for who, target in targets.items()}
    for _ in range(requests // 100):  # interleaved rounds, as bench/common.interleaved
        for who, client in clients.items():
            for _ in range(100):
                ms = client.post()
                if ms is not None:
                    lat[who].append(ms)
    for client in clients.values():
        client.close()
    kept: dict[str, list[tuple[float, float, int]]] = {label: [] for label in proxies}
    for i in range(runs):  # in rounds, so that the machine's slow spells hit all alike
        for label, proxy in proxies.items():
            spy = None
            if args.profile and i == 0:
                out = args.profile / f"{name}{proxy.tag}.txt"
                spy = subprocess.Popen(
                    [PYSPY, "record", "--format", "raw", "-o", str(out), "-r", "500",
                     "-d", str(round(seconds)), "-p", str(proxy.proc.pid)],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                )  # fmt: skip
                time.sleep(0.3)
            before = cpu_s(proxy.proc.pid)
            run = load.run(targets[label], 32, seconds)
            per = (cpu_s(proxy.proc.pid) - before) / max(run["requests"], 1)
            kept[label].append((run["rps"], per, run.get("non_2xx", 0)))
            if spy is not None:
                spy.wait(30)
    together = paired(proxies, targets, load, seconds, runs) if len(proxies) > 1 else {}
    direct = spread(lat["direct"])["p50"]
    for label, proxy in proxies.items():
        rps, per, bad = sorted(kept[label])[len(kept[label]) // 2]
        row: dict[str, Any] = {
            "p50_ms": spread(lat[label])["p50"],
            "added_p50_ms": spread(lat[label])["p50"] - direct,
            "rps_32": rps,
            "cpu_us": per * 1e6,
            "non_2xx": bad,
        }
        if together:
            row["cpu_us_paired"] = together[label]
        if args.profile and (args.profile / f"{name}{proxy.tag}.txt").exists():
            row["profile"] = shares(args.profile / f"{name}{proxy.tag}.txt")
        rows[label] = row
        print(_line(f"{name} ({label})", row), flush=True)
    return rows


def paired(
    proxies: dict[str, Proxy], targets: dict[str, Target], load: Load, seconds: float, runs: int
) -> dict[str, float]:
    """CPU per request of each proxy loaded at the same time (16 in flight each, one wrk per
    proxy), the median of `runs` rounds: whatever else the machine does meanwhile slows them
    alike, so this compares them more steadily than runs one after another."""
    assert load.wrk is not None, "paired runs need wrk"
    wrk = load.wrk
    per: dict[str, list[float]] = {label: [] for label in proxies}
    with ThreadPoolExecutor(len(proxies)) as pool:
        for _ in range(runs):
            before = {label: cpu_s(p.proc.pid) for label, p in proxies.items()}
            done = {
                label: pool.submit(
                    wrk_run, wrk, targets[label], 16, seconds, load.script.with_name(f"{i}.lua")
                )
                for i, label in enumerate(proxies)
            }
            for label, future in done.items():
                count = max(future.result()["requests"], 1)
                used = cpu_s(proxies[label].proc.pid) - before[label]
                per[label].append(used / count * 1e6)
    return {label: sorted(v)[len(v) // 2] for label, v in per.items()}


def _export(rev: str, into: Path) -> Path:
    """The tree of git revision `rev`, exported into `into`."""
    into.mkdir()
    archive = subprocess.run(
        ["git", "archive", rev, "src"], cwd=HERE.parent, capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def _upstream_path(route: str) -> str:
    return {
        "chat": "/v1/chat/completions",
        "verbatim": "/verbatim/v1/chat/completions",
        "sse": "/sse/v1/chat/completions",
        "responses": "/v1/responses",
        "messages": "/v1/messages",
    }[route]


def _line(name: str, row: dict[str, Any]) -> str:
    text = (
        f"{name:30} p50 {row['p50_ms']:.3f} ms (+{row['added_p50_ms']:.3f})"
        f"  {row['rps_32']:7,.0f} req/s @32  {row['cpu_us']:5.0f} µs CPU/req"
    )
    if "cpu_us_paired" in row:
        text += f" ({row['cpu_us_paired']:.0f} paired)"
    if row["non_2xx"]:
        text += f"  NON-2XX {row['non_2xx']}"
    if "profile" in row:
        p = row["profile"]
        text += f"\n    ours {p['ours']} %, libraries {p['libraries']} %, other {p['other']} %"
        text += "\n    our time by function (own):"
        for fn, share in p["top_ours"]:
            text += f"\n      {share:5.1f} %  {fn}"
        text += "\n    our time under a function of ours:"
        for fn, share in p["top_under"]:
            text += f"\n      {share:5.1f} %  {fn}"
    return text


if __name__ == "__main__":
    main()
