"""How much of a coding session's input its providers serve from their prompt cache, with session
affinity and without (issue 55), in one run.

    .venv/bin/python bench/cache_affinity.py [--turns 20] [--sessions 4] [--instances 4]

- Upstream: two chat providers in this process (aiohttp), each a caching fake: a request's
  cached tokens are the longest byte prefix of its messages that provider has seen before
  (a quarter of the bytes, as tokens); no TTL, so what differs is only where turns went.
- Sessions, each `--turns` turns, every turn adding an answer (1 KB) and a tool result (2 KB):
  Claude Code-shaped (`POST /v1/messages`, `metadata.user_id`'s `session_id`) and Codex-shaped
  (`POST /v1/responses`, `session-id`), `--sessions` of each, one after another.
- Cases: `steady` (an ordered route, nothing fails); `failover` (the first provider, every
  session's home, answers 500 for turns 8-11 and is back at turn 12); `weighted` (1:1); and
  `fleet` (`weighted`, `--instances` proxies sharing Redis, turns round-robin over them).
  Each with `affinity` on and off.
- Printed: the cached share of input tokens over all turns and over turns 12-20, and a cost
  index (uncached input 1.0 a token, cached 0.1: Anthropic's and DeepSeek's ratio of cache
  reads to input, roughly) relative to the same turns with nothing cached.
Results: bench/results/cache_affinity.{json,md}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

import httpx
import orjson
import yaml
from aiohttp import web

from agent_reach.net.ports import free_port
from agent_session import up_by
from common import AGENT_REACH, Processes, publish
from fleet import start_redis
from tests.fakes.shapes import completion
from tests.fakes.upstream import shared_prefix

ANSWER = "I looked at the file and changed what the failing test needed. " * 16  # ~1 KB
RESULT = "test_module.py::test_case PASSED\n" * 62  # ~2 KB
CACHED_PRICE = 0.1  # a cached input token's price, an uncached one's being 1


class Caching:
    """A chat provider that remembers every prefix it was sent: `log` holds (session, turn,
    tokens, cached) of each request it answered."""

    def __init__(self) -> None:
        self.seen: list[bytes] = []
        self.log: list[tuple[str, int, int, int]] = []
        self.failing = False

    async def chat(self, request: web.Request) -> web.Response:
        body = await request.json()
        if self.failing:
            return web.json_response({"error": {"message": "overloaded"}}, status=500)
        sent = orjson.dumps(body["messages"])
        cached = max((shared_prefix(sent, s) for s in self.seen), default=0)
        self.seen.append(sent)
        first = next(m for m in body["messages"] if m["role"] == "user")
        session = str(first["content"]).split()[1]
        turn = sum(1 for m in body["messages"] if m["role"] == "user")
        self.log.append((session, turn, len(sent) // 4, cached // 4))
        return web.json_response(completion(ANSWER, "m"))


def messages(session: str, turns: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "user", "content": f"session {session}: fix the tests"}]
    for n in range(1, turns):
        out += [
            {"role": "assistant", "content": ANSWER},
            {"role": "user", "content": RESULT + str(n)},
        ]
    return out


async def turn(client: httpx.AsyncClient, base: str, kind: str, session: str, n: int) -> None:
    history = messages(session, n)
    if kind == "claude":
        user_id = json.dumps({"device_id": "d", "account_uuid": "", "session_id": session})
        body = {
            "model": "m",
            "max_tokens": 64,
            "messages": history,
            "metadata": {"user_id": user_id},
        }
        r = await client.post(f"{base}/v1/messages", json=body)
    else:
        items = [{"type": "message", **m} for m in history]
        body = {"model": "m", "input": items, "store": False}
        r = await client.post(f"{base}/v1/responses", json=body, headers={"session-id": session})
    r.raise_for_status()


async def run_case(
    case: str,
    affinity: bool,
    args: argparse.Namespace,
    ups: list[Caching],
    ports: list[int],
    procs: Processes,
    work: Path,
    redis: str | None,
) -> dict[str, float]:
    for up in ups:
        up.seen.clear()
        up.log.clear()
        up.failing = False
    config = {
        "version": "0.3.2",
        "health": {"mode": "off"},
        "state": redis or "memory://",
        "circuit": {"failures": 1000, "cooldown_s": 0},
        "defaults": {"retries": 0, "model_map": {"*": ""}},
        "balance": "order" if case in ("steady", "failover") else "weighted",
        "affinity": affinity,
        "server": {"api_keys_env": None},
        "providers": [
            {"name": f"p{i}", "endpoint": f"http://127.0.0.1:{port}/v1/chat/completions"}
            for i, port in enumerate(ports)
        ],
    }
    path = work / f"{case}-{affinity}.yaml"
    path.write_text(yaml.safe_dump(config))
    instances = args.instances if case == "fleet" else 1
    bases = []
    started = []
    for _ in range(instances):
        port = free_port()
        started.append(
            procs.start([AGENT_REACH, "--config", str(path), "serve", "--port", str(port)])
        )
        bases.append(f"http://127.0.0.1:{port}")
    async with httpx.AsyncClient(timeout=30) as client:
        for base in bases:
            await up_by(base + "/healthz", 20)
        for kind in ("claude", "codex"):
            for s in range(args.sessions):
                session = f"{kind}{s}-{case}-{affinity}"
                for n in range(1, args.turns + 1):
                    ups[0].failing = case == "failover" and 8 <= n <= 11
                    await turn(client, bases[n % len(bases)], kind, session, n)
    for proc in started:
        procs.stop(proc)
    log = [row for up in ups for row in up.log]
    return {"all": _share(log, 1), "from_12": _share(log, 12), "cost": _cost(log)}


def _share(log: list[tuple[str, int, int, int]], since: int) -> float:
    rows = [r for r in log if r[1] >= since]
    return round(100 * sum(r[3] for r in rows) / max(1, sum(r[2] for r in rows)), 1)


def _cost(log: list[tuple[str, int, int, int]]) -> float:
    full = sum(r[2] for r in log)
    paid = sum(r[2] - r[3] + CACHED_PRICE * r[3] for r in log)
    return round(paid / max(1, full), 3)


async def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--sessions", type=int, default=4)
    parser.add_argument("--instances", type=int, default=4)
    args = parser.parse_args()
    ups = [Caching(), Caching()]
    runners, ports = [], []
    for up in ups:
        app = web.Application(client_max_size=64 * 2**20)
        app.router.add_post("/v1/chat/completions", up.chat)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        runners.append(runner)
        ports.append(port)
    results: dict[str, dict[str, dict[str, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp, Processes() as procs:
        work = Path(tmp)
        redis = start_redis(procs, work)
        for case in ("steady", "failover", "weighted", "fleet"):
            results[case] = {}
            for affinity in (True, False):
                shared = redis if case == "fleet" else None
                got = await run_case(case, affinity, args, ups, ports, procs, work, shared)
                results[case]["on" if affinity else "off"] = got
    for runner in runners:
        await runner.cleanup()
    lines = [
        f"# Cached share of input tokens, affinity on and off ({args.turns}-turn sessions, "
        f"{args.sessions} Claude Code- and {args.sessions} Codex-shaped per case)\n",
        "| case | on: all turns | on: turns 12+ | on: cost | off: all turns | off: turns 12+ "
        "| off: cost |",
        "|---|---|---|---|---|---|---|",
    ]
    for case, by in results.items():
        on, off = by["on"], by["off"]
        lines.append(
            f"| {case} | {on['all']} % | {on['from_12']} % | {on['cost']} | {off['all']} % "
            f"| {off['from_12']} % | {off['cost']} |"
        )
    lines.append(
        f"\nCost: input paid relative to none cached (cached tokens at {CACHED_PRICE}). "
        f"Fleet: {args.instances} instances on Redis, turns round-robin over them.\n"
    )
    publish("cache_affinity", {"args": vars(args), "results": results}, "\n".join(lines))


if __name__ == "__main__":
    asyncio.run(main())
