"""What holding a tool call until it is whole costs (issue 51, item 2): the time to the first
byte of a streamed tool call, against the same pieces streamed as text (which pass as they
come), in one run.

    .venv/bin/python bench/tool_hold.py [--pieces 40] [--gap-ms 25] [--rounds 5]

An upstream on 127.0.0.1 (aiohttp, in this process) streams one answer of `--pieces` pieces,
`--gap-ms` apart: as the arguments of one tool call, or as text. The library's `Router.astream`
reads it; measured from the request to the first chunk that carries a tool call (or text), the
median of `--rounds` rounds, each round both ways. The added time is about the time the call
takes to arrive: the price of never giving an agent half a call.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from typing import Any

from aiohttp import web

from agent_reach import Router


def chunk(delta: dict[str, Any]) -> bytes:
    body = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m"}
    body["choices"] = [{"index": 0, "delta": delta, "finish_reason": None}]
    return b"data: " + json.dumps(body).encode() + b"\n\n"


async def upstream(pieces: int, gap_s: float) -> tuple[web.AppRunner, int]:
    args = json.dumps({"command": "x" * (pieces * 8)})
    size = -(-len(args) // pieces)

    async def answer(request: web.Request) -> web.StreamResponse:
        tool = (await request.json())["model"] == "tool"
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(chunk({"role": "assistant"}))
        for i in range(pieces):
            part = args[i * size : (i + 1) * size]
            if tool:
                call: dict[str, Any] = {"index": 0, "function": {"arguments": part}}
                if i == 0:
                    call.update(
                        id="call_1", type="function", function={"name": "f", "arguments": part}
                    )
                await resp.write(chunk({"tool_calls": [call]}))
            else:
                await resp.write(chunk({"content": part}))
            await asyncio.sleep(gap_s)
        await resp.write(b"data: [DONE]\n\n")
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]


async def first_byte(router: Router, model: str) -> float:
    start = time.perf_counter()
    took = None
    request = {"model": model, "messages": [{"role": "user", "content": "go"}], "stream": True}
    async for c in router.astream(request):
        delta = c["choices"][0]["delta"] if c.get("choices") else {}
        if took is None and (delta.get("tool_calls") or delta.get("content")):
            took = time.perf_counter() - start
    assert took is not None
    return took


async def main(pieces: int, gap_ms: float, rounds: int) -> None:
    runner, port = await upstream(pieces, gap_ms / 1000)
    config = {
        "state": "memory://",
        "health": {"mode": "off"},
        "providers": [{"name": "up", "endpoint": f"http://127.0.0.1:{port}/v1/chat/completions"}],
    }
    async with Router(config) as router:
        text, tool = [], []
        for _ in range(rounds):
            text.append(await first_byte(router, "text"))
            tool.append(await first_byte(router, "tool"))
    await runner.cleanup()
    t, h = statistics.median(text), statistics.median(tool)
    print(f"{pieces} pieces, {gap_ms:g} ms apart, median of {rounds} rounds")
    print(f"  first text byte (streamed through):  {t * 1000:8.1f} ms")
    print(f"  first tool-call byte (held, whole):  {h * 1000:8.1f} ms")
    print(f"  added by holding: {(h - t) * 1000:.1f} ms ({h / t:.1f}x)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--pieces", type=int, default=40)
    parser.add_argument("--gap-ms", type=float, default=25.0)
    parser.add_argument("--rounds", type=int, default=5)
    ns = parser.parse_args()
    asyncio.run(main(ns.pieces, ns.gap_ms, ns.rounds))
