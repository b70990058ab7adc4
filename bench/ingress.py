"""The four APIs a client can speak (Chat Completions, Responses, Messages, Gemini) through
agent-reach and through LiteLLM's proxy, side by side in one run, on one chat-only upstream.

    .venv/bin/python bench/ingress.py [--quick]

- Upstream: nginx answering a fixed chat.completion (the "direct" baseline) and
  tests/fakes/bench.py's paced SSE stream (20 chunks 5 ms apart) for streams; neither speaks
  Responses, Messages or Gemini, so both proxies translate (as they do for DeepSeek, Zhipu,
  Ollama). LiteLLM's proxy has no Gemini face for chat deployments: that row is agent-reach's.
- Proxies: `agent-reach serve` (bench/peers/agent-reach.yaml) and LiteLLM 1.108.7
  (bench/peers/litellm-ingress.yaml: deployments LiteLLM bridges to chat completions, as it
  must for chat-only providers; installed into bench/.peers/ by bench/peers's installer),
  on CPU 0; the upstreams and this script's client on CPU 1.
- Measured: the latency added at 1 in flight (interleaved keep-alive rounds, p50/p99 over
  the direct upstream) and the added time to the first streamed content event, for every API
  through both proxies; and whether each answer is really in the API it was asked in (an
  Anthropic `message`, a `response` object), since a wrong shape is what an agent sees first.
Targets (issues 9 and 22): Responses, Messages and Gemini within +0.3 ms p50 of agent-reach's
own chat path, and their stream TTFB within +0.3 ms of its chat stream.
Results: bench/results/ingress.json and ingress.md.
"""

from __future__ import annotations

import argparse
import http.client
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import (
    Processes,
    Target,
    interleaved,
    machine,
    pin_self,
    publish,
    spread,
    start_mock,
)
from peers.base import INSTALLS, LOAD_CPU, PROXY_KEY
from peers.contenders import Peer, agent_reach, bench_env, litellm
from peers.install import LITELLM_SPEC, install_venv, need_nginx
from peers.nginx import start_nginx
from peers.scenarios import cold_start, streaming

APIS = {
    "chat": "/v1/chat/completions",
    "responses": "/v1/responses",
    "messages": "/v1/messages",
    "gemini": "/v1beta/models/bench:generateContent",
}
STREAM_PATHS = {"gemini": "/v1beta/models/bench:streamGenerateContent?alt=sse"}
TARGET_MS = 0.3


def body(api: str, model: str, stream: bool) -> str:
    """The same one-word question in each API."""
    question: dict[str, Any]
    if api == "gemini":  # the model is in the path, the stream too
        return json.dumps({"contents": [{"role": "user", "parts": [{"text": "ping"}]}]})
    if api == "responses":
        question = {"model": model, "input": "ping", "store": False}
    elif api == "messages":
        question = {
            "model": model,
            "max_tokens": 64,
            "messages": [{"role": "user", "content": "ping"}],
        }
    else:
        question = {"model": model, "messages": [{"role": "user", "content": "ping"}]}
    if stream:
        question["stream"] = True
    return json.dumps(question)


def targets(peer: Peer, stream: bool) -> dict[str, Target]:
    """One target per API through `peer`: agent-reach picks the stream route by header,
    LiteLLM by model name."""
    auth = {"Authorization": f"Bearer {PROXY_KEY}"}
    out = {}
    for api, path in APIS.items():
        if peer.name == "LiteLLM":  # see bench/peers/litellm-ingress.yaml
            if api == "gemini":
                continue
            model = "bench-messages" if api == "messages" else "bench"
            model, headers = (f"{model}-stream" if stream else model), auth
        else:
            model, headers = "bench", {**auth, "X-Agent-Reach-Route": "stream"} if stream else auth
        where = STREAM_PATHS.get(api, path) if stream else path
        out[f"{peer.name} {api}"] = Target(peer.port, headers, body(api, model, stream), where)
    return out


def shape(api: str, raw: bytes) -> str:
    """'ok' when an answer is a valid one of `api` carrying the upstream's text, else what it
    is instead."""
    try:
        answer = json.loads(raw)
    except ValueError:
        return f"not JSON: {raw[:120]!r}"
    if api == "gemini":
        parts = ((answer.get("candidates") or [{}])[0].get("content") or {}).get("parts") or []
        good = [p.get("text") for p in parts] == ["pong"]
    elif api == "responses":
        texts = [
            part.get("text")
            for item in answer.get("output") or ()
            for part in item.get("content") or ()
        ]
        good = answer.get("object") == "response" and "pong" in texts
    elif api == "messages":
        texts = [b.get("text") for b in answer.get("content") or () if isinstance(b, dict)]
        good = answer.get("type") == "message" and "pong" in texts
    else:
        choices = answer.get("choices") or [{}]
        good = (choices[0].get("message") or {}).get("content") == "pong"
    return "ok" if good else f"wrong shape: {json.dumps(answer)[:160]}"


def check_shapes(all_targets: dict[str, Target]) -> dict[str, str]:
    out = {}
    for name, target in all_targets.items():
        conn = http.client.HTTPConnection("127.0.0.1", target.port, timeout=30)
        try:
            conn.request("POST", target.path, target.body.encode(), target.all_headers())
            resp = conn.getresponse()
            raw = resp.read()
            api = name.rsplit(" ", 1)[1]
            out[name] = shape(api, raw) if resp.status == 200 else f"HTTP {resp.status}"
        except (OSError, http.client.HTTPException) as exc:
            out[name] = f"{type(exc).__name__}: {exc}"
        finally:
            conn.close()
    return out


def run(quick: bool, workdir: Path, logs: Path) -> dict[str, Any]:
    results: dict[str, Any] = {"when": time.strftime("%Y-%m-%d %H:%M:%S %z"), "machine": machine()}
    requests, streams, max_s = (200, 6, 20.0) if quick else (2000, 40, 90.0)
    nginx = need_nginx(logs)
    lite = install_venv("litellm", LITELLM_SPEC, "litellm", logs)
    results["versions"] = {"nginx": nginx.detail, "LiteLLM": lite.detail if lite.ok else None}
    results["pinning"] = (
        "proxies on CPU 0, upstreams and client on CPU 1" if pin_self(LOAD_CPU) else "none"
    )
    with Processes() as procs:
        upstream, failing = start_nginx(procs, nginx.path, workdir, logs)
        sse = start_mock(procs, cpu=LOAD_CPU)
        env = bench_env(upstream, failing, sse)
        peers = [agent_reach(env)]
        if lite.ok:
            peers.append(litellm(env, workdir, "litellm-ingress.yaml"))
        else:
            results["left_out"] = {"LiteLLM": lite.detail}
        for peer in list(peers):
            why = cold_start(procs, peer, 1, logs)
            if why is not None:
                if peer.name == "agent-reach":
                    raise SystemExit(f"agent-reach did not start: {why}")
                results.setdefault("left_out", {})[peer.name] = why
                peers.remove(peer)
            print(f"  {peer.name}: {'up' if why is None else why}", flush=True)
        plain = {k: t for p in peers for k, t in targets(p, False).items()}
        streamed = {k: t for p in peers for k, t in targets(p, True).items()}
        results["shapes"] = check_shapes(plain)
        if lite.ok and any(p.name == "LiteLLM" for p in peers):
            # What a new user gets asking LiteLLM's Messages API for a DeepSeek deployment.
            port = next(p.port for p in peers if p.name == "LiteLLM")
            deepseek = Target(
                port,
                plain["LiteLLM chat"].headers,
                body("messages", "bench", False),
                APIS["messages"],
            )
            results["litellm_messages_deepseek_deployment"] = check_shapes(
                {"LiteLLM messages": deepseek}
            )["LiteLLM messages"]
        results["stream_shapes"] = check_stream_shapes(streamed)
        print(
            "  shapes: " + ", ".join(f"{k}: {v}" for k, v in results["shapes"].items()), flush=True
        )
        usable = {k: t for k, t in plain.items() if results["shapes"][k] == "ok"}
        samples, failed = interleaved(
            {"direct": Target(upstream), **usable}, requests, warmup=100, max_s=max_s
        )
        base = spread(samples["direct"])
        results["latency_ms"] = {
            name: {
                **spread(v),
                "added_p50": spread(v)["p50"] - base["p50"],
                "added_p99": spread(v)["p99"] - base["p99"],
                "failed": failed[name],
            }
            for name, v in samples.items()
            if v
        }
        direct_sse = Target(sse, body=body("chat", "bench", True), path="/sse" + APIS["chat"])
        good_streams = {k: t for k, t in streamed.items() if results["stream_shapes"][k] == "ok"}
        ttfb = streaming({"direct": direct_sse, **good_streams}, streams, max_s)
        results["streaming"] = ttfb
    results["targets"] = targets_met(results)
    return results


def check_stream_shapes(all_targets: dict[str, Target]) -> dict[str, str]:
    """'ok' for a stream whose content arrives in its own API's events."""
    from peers.scenarios import stream_once

    out = {}
    for name, target in all_targets.items():
        conn = http.client.HTTPConnection("127.0.0.1", target.port, timeout=30)
        try:
            stream_once(conn, target)
            out[name] = "ok"
        except (OSError, RuntimeError, http.client.HTTPException, ValueError) as exc:
            out[name] = f"{type(exc).__name__}: {exc}"
        finally:
            conn.close()
    return out


def _p50(results: dict[str, Any], section: str, name: str) -> float | None:
    entry = results.get(section, {}).get(name) or {}
    value = entry.get("p50") if section == "latency_ms" else (entry.get("ttfb_ms") or {}).get("p50")
    return None if value is None else float(value)


def targets_met(results: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for section, what in (("latency_ms", "p50"), ("streaming", "TTFB p50")):
        chat = _p50(results, section, "agent-reach chat")
        for api in ("responses", "messages", "gemini"):
            other = _p50(results, section, f"agent-reach {api}")
            delta = None if chat is None or other is None else other - chat
            out.append(
                {
                    "what": f"{api} {what} vs chat, through agent-reach",
                    "target_ms": TARGET_MS,
                    "measured_ms": None if delta is None else round(delta, 3),
                    "met": delta is not None and delta <= TARGET_MS,
                }
            )
    return out


def markdown(results: dict[str, Any]) -> str:
    lines = [
        f"# Ingress: four APIs through agent-reach and LiteLLM ({results['when']})",
        "",
        "| target | answer | p50 ms | p99 ms | added p50 | added p99 | stream TTFB p50 | added TTFB |",
        "|---|---|---|---|---|---|---|---|",
    ]
    direct = results["streaming"].get("direct", {}).get("ttfb_ms", {}).get("p50")
    for name, lat in results["latency_ms"].items():
        ttfb = (results["streaming"].get(name, {}).get("ttfb_ms") or {}).get("p50")
        base = name == "direct"
        cells = [
            name,
            results["shapes"].get(name, "—"),
            f"{lat['p50']:.2f}",
            f"{lat['p99']:.2f}",
            "" if base else f"+{lat['added_p50']:.2f}",
            "" if base else f"+{lat['added_p99']:.2f}",
            "" if ttfb is None else f"{ttfb:.2f}",
            "" if ttfb is None or direct is None or base else f"+{ttfb - direct:.2f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    for name, why in results["shapes"].items():
        if why != "ok":
            lines.append(f"| {name} | {why} | — | — | — | — | — | — |")
    for name, why in results.get("stream_shapes", {}).items():
        if why != "ok":
            lines.append(f"\nstream {name}: {why}")
    lines.append("")
    for t in results["targets"]:
        state = "met" if t["met"] else "MISSED"
        lines.append(
            f"- {t['what']}: {t['measured_ms']} ms (target ≤ +{t['target_ms']} ms): {state}"
        )
    seen = results.get("litellm_messages_deepseek_deployment")
    if seen is not None:
        lines.append(
            f"- LiteLLM /v1/messages for a `deepseek/` deployment on this upstream: {seen}"
        )
    for name, why in results.get("left_out", {}).items():
        lines.append(f"- {name} left out: {why}")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short run to try the script")
    args = parser.parse_args()
    logs = INSTALLS / "logs-ingress"
    shutil.rmtree(logs, ignore_errors=True)
    logs.mkdir(parents=True)
    workdir = Path(tempfile.mkdtemp(prefix="agent-reach-ingress-"))
    print("four APIs through agent-reach and LiteLLM, one run (bench/ingress.py)", flush=True)
    try:
        results = run(args.quick, workdir, logs)
    except KeyboardInterrupt:
        sys.exit("interrupted; every process it started has been stopped")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    publish("ingress", results, markdown(results))


if __name__ == "__main__":
    main()
