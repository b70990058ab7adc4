"""A Codex-shaped agent session over HTTP against the same over WebSocket (issue 52): wall
time, latency and bytes per turn of a session of `--calls` (20) tool calls through agent-reach to a
chat-only upstream, in one run; then `--sockets` (100) sessions at once over WebSocket, and what
an idle socket costs the proxy in memory.

    .venv/bin/python bench/agent_session.py [--calls 20] [--rounds 5] [--sockets 100]

- Upstream: a chat-completions fake in this process (aiohttp), streaming a call of the
  `exec_command` tool until the conversation holds `--calls` tool outputs, then a text; it
  answers at once, so that what differs is the client's side of the proxy.
- The session, as Codex 0.171 sends it: instructions (8 KB) and 10 function tools on every
  request; each tool output 4 KB. Over HTTP (`POST /v1/responses`, `stream: true`,
  `store: false`, one keep-alive connection, httpx) every request carries the whole
  conversation; over WebSocket (one socket, `websockets`) each `response.create` carries the
  instructions, the tools and the new items, with `previous_response_id`.
- Rounds alternate HTTP and WebSocket sessions (`--rounds` of each); the median wall time of a
  session, and the bytes the client sent and received per turn (request bodies or messages,
  events' bytes: HTTP heads left out).
- The proxy's RSS (its process tree) after one session of each kind, then with `--sockets` idle
  sockets open: per idle socket. Then, after the rounds, `--sockets` sessions at once over
  WebSocket (each `--calls` tool calls), every error counted, and the RSS while each socket
  still holds its session's conversation: per socket (over the first reading).
Results: bench/results/agent_session.{json,md}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import yaml
from aiohttp import web
from websockets.asyncio.client import ClientConnection, connect

from agent_reach.net.ports import free_port
from common import AGENT_REACH, Processes, publish, rss_mb
from tests.fakes.shapes import sse
from tests.fakes.upstream import chunk, tool_chunk

INSTRUCTIONS = ("You are a coding agent. Follow the repository's conventions. " * 140)[:8192]
TOOLS = [
    {
        "type": "function",
        "name": "exec_command" if n == 0 else f"tool_{n}",
        "description": "Runs a shell command and returns what it printed. " * 4,
        "parameters": {
            "type": "object",
            "properties": {
                "cmd": {"type": "string", "description": "The command line."},
                "workdir": {"type": "string", "description": "Where to run it."},
                "timeout_ms": {"type": "integer", "description": "How long it may run."},
            },
            "required": ["cmd"],
        },
    }
    for n in range(10)
]
OUTPUT = ("test_module.py::test_case PASSED\n" * 200)[:4096]


async def upstream(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    calls = sum(1 for m in body["messages"] if m.get("role") == "tool")
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    if calls < request.app["calls"]:
        call = {"index": 0, "id": f"call_{calls}", "type": "function"}
        args = json.dumps({"cmd": f"pytest -k step{calls}"})
        pieces = [
            chunk(role=True),
            tool_chunk([{**call, "function": {"name": "exec_command", "arguments": ""}}]),
            tool_chunk([{"index": 0, "function": {"arguments": args}}]),
            chunk(finish="tool_calls"),
        ]
    else:
        pieces = [chunk("All tests pass.", role=True), chunk(finish="stop")]
    usage = {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}
    pieces.append({**chunk(), "choices": [], "usage": usage})
    await resp.write(b"".join(sse(p) for p in pieces) + sse(b"[DONE]"))
    return resp


def request(items: list[Any], **more: Any) -> dict[str, Any]:
    return {
        "model": "gpt-5-codex",
        "instructions": INSTRUCTIONS,
        "tools": TOOLS,
        "input": items,
        "store": False,
        **more,
    }


def next_items(output: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tool outputs that answer `output`'s calls (none: the session is over)."""
    return [
        {"type": "function_call_output", "call_id": i["call_id"], "output": OUTPUT}
        for i in output
        if i["type"] == "function_call"
    ]


FIRST = [{"type": "message", "role": "user", "content": "Make the failing tests pass."}]


async def over_http(base: str) -> dict[str, Any]:
    sent = received = turns = 0
    items = list(FIRST)
    start = time.perf_counter()
    async with httpx.AsyncClient(base_url=base, timeout=60) as client:
        while True:
            body = orjson.dumps(request(items, stream=True))
            sent += len(body)
            turns += 1
            raw = b""
            headers = {"Content-Type": "application/json"}
            async with client.stream("POST", "/v1/responses", content=body, headers=headers) as r:
                async for piece in r.aiter_bytes():
                    raw += piece
            received += len(raw)
            done = [
                json.loads(line[6:])
                for line in raw.split(b"\n")
                if line.startswith(b"data: ") and b'"response.completed"' in line
            ]
            output = done[-1]["response"]["output"]
            new = next_items(output)
            if not new:
                break
            items += [*output, *new]
    return {"s": time.perf_counter() - start, "turns": turns, "sent": sent, "received": received}


async def ws_session(ws: ClientConnection) -> dict[str, Any]:
    sent = received = turns = 0
    new: list[Any] = list(FIRST)
    previous: str | None = None
    start = time.perf_counter()
    while True:
        more = {"previous_response_id": previous} if previous else {}
        message = orjson.dumps({"type": "response.create", **request(new, **more)})
        await ws.send(message.decode())
        sent += len(message)
        turns += 1
        while True:
            event = await ws.recv()
            received += len(event)
            data = orjson.loads(event)
            if data["type"] == "error":
                raise RuntimeError(data["message"])
            if data["type"] == "response.completed":
                break
        response = data["response"]
        previous = response["id"]
        new = next_items(response["output"])
        if not new:
            break
    return {"s": time.perf_counter() - start, "turns": turns, "sent": sent, "received": received}


async def over_ws(url: str) -> dict[str, Any]:
    async with connect(url, max_size=None) as ws:
        return await ws_session(ws)


def per_turn(runs: list[dict[str, Any]]) -> dict[str, float]:
    run = runs[0]
    return {
        "session_ms": round(statistics.median(r["s"] for r in runs) * 1000, 1),
        "turn_ms": round(statistics.median(r["s"] / r["turns"] for r in runs) * 1000, 2),
        "turns": run["turns"],
        "sent_bytes_per_turn": round(run["sent"] / run["turns"]),
        "received_bytes_per_turn": round(run["received"] / run["turns"]),
        "sent_bytes_session": run["sent"],
    }


async def many(url: str, sockets: int) -> dict[str, Any]:
    """`sockets` sessions at once, each on its socket; errors counted, sockets kept open."""
    conns = [await connect(url, max_size=None) for _ in range(sockets)]
    start = time.perf_counter()
    results = await asyncio.gather(*(ws_session(c) for c in conns), return_exceptions=True)
    wall = time.perf_counter() - start
    errors = [r for r in results if isinstance(r, BaseException)]
    turns = sum(r["turns"] for r in results if isinstance(r, dict))
    return {"conns": conns, "errors": len(errors), "turns": turns, "wall_s": round(wall, 2)}


async def up_by(url: str, timeout_s: float) -> None:
    """Wait until `url` answers (the proxy started)."""
    deadline = time.monotonic() + timeout_s
    async with httpx.AsyncClient() as client:
        while True:
            try:
                if (await client.get(url)).status_code == 200:
                    return
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise
            await asyncio.sleep(0.05)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sockets", type=int, default=100)
    args = parser.parse_args()
    app = web.Application(client_max_size=64 * 2**20)
    app["calls"] = args.calls
    app.router.add_post("/v1/chat/completions", upstream)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    up_port = free_port()
    await web.TCPSite(runner, "127.0.0.1", up_port).start()
    config = {
        "version": "0.3.2",
        "health": {"mode": "off"},
        "state": "memory://",
        "providers": [
            {"name": "chat", "endpoint": f"http://127.0.0.1:{up_port}/v1/chat/completions"}
        ],
        "server": {"api_keys_env": None},
    }
    with tempfile.TemporaryDirectory() as tmp, Processes() as procs:
        path = Path(tmp) / "agent-reach.yaml"
        path.write_text(yaml.safe_dump(config))
        port = free_port()
        proc = procs.start([AGENT_REACH, "--config", str(path), "serve", "--port", str(port)])
        base, url = f"http://127.0.0.1:{port}", f"ws://127.0.0.1:{port}/v1/responses"
        await up_by(base + "/healthz", 20)
        await over_http(base)  # warm both paths once
        await over_ws(url)
        before = rss_mb(proc.pid)  # before the rounds: their freed memory would be reused
        idle = [await connect(url, max_size=None) for _ in range(args.sockets)]
        await asyncio.sleep(0.5)
        opened = rss_mb(proc.pid)
        for ws in idle:
            await ws.close()
        http_runs, ws_runs = [], []
        for _ in range(args.rounds):
            http_runs.append(await over_http(base))
            ws_runs.append(await over_ws(url))
        load = await many(url, args.sockets)
        await asyncio.sleep(0.5)
        holding = rss_mb(proc.pid)
        for ws in load.pop("conns"):
            await ws.close()
    await runner.cleanup()
    http, ws = per_turn(http_runs), per_turn(ws_runs)
    results = {
        "calls": args.calls,
        "rounds": args.rounds,
        "http": http,
        "websocket": ws,
        "websocket_faster": ws["session_ms"] < http["session_ms"],
        "concurrent": {"sockets": args.sockets, **load},
        "memory_mb": {
            "before": round(before, 1),
            "idle_sockets_open": round(opened, 1),
            "per_idle_socket_kb": round((opened - before) * 1024 / args.sockets, 1),
            "after_sessions_held": round(holding, 1),
            "per_socket_holding_a_session_kb": round((holding - before) * 1024 / args.sockets, 1),
        },
    }
    report = (
        f"# Agent session: HTTP against WebSocket ({args.calls} tool calls, median of "
        f"{args.rounds})\n\n| transport | session ms | ms/turn | turns | sent B/turn | received B/turn |"
        "\n|---|---|---|---|---|---|\n"
        + "".join(
            f"| {name} | {r['session_ms']} | {r['turn_ms']} | {r['turns']} | "
            f"{r['sent_bytes_per_turn']} | "
            f"{r['received_bytes_per_turn']} |\n"
            for name, r in (("HTTP", http), ("WebSocket", ws))
        )
        + f"\nWebSocket/HTTP session time: {ws['session_ms'] / http['session_ms']:.2f}.\n"
        + f"\n{args.sockets} sockets at once × {args.calls + 1} turns: {load['turns']} turns, "
        f"{load['errors']} errors, {load['wall_s']} s.\n\nMemory (proxy RSS): "
        f"{results['memory_mb']['per_idle_socket_kb']} KB per idle socket, "
        f"{results['memory_mb']['per_socket_holding_a_session_kb']} KB per socket holding "
        "its session's conversation.\n"
    )
    publish("agent_session", results, report)


if __name__ == "__main__":
    asyncio.run(main())
