"""`agent-reach demo`: a real failover, offline, in a few seconds.

Three simulated providers run on 127.0.0.1: one refuses connections, one rejects the key with
401, one speaks native Ollama. A request goes through the same engine as every other, over
real HTTP, and the trace shows what happened.
"""

from __future__ import annotations

import os
import socket
import time
from typing import TYPE_CHECKING, Any

import click

from . import expected_errors

if TYPE_CHECKING:
    from aiohttp import web

    from ..events import Event

ANSWER = (
    "Quantum annealing searches for the lowest-energy state of a problem encoded in qubits, "
    "letting quantum tunnelling carry it through energy barriers instead of over them."
)
PROMPT = "Explain quantum annealing in one sentence."


def _free_port() -> int:
    """A port nothing listens on: connecting to it is refused at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _app() -> web.Application:
    import asyncio

    from aiohttp import web

    async def unauthorized(_: web.Request) -> web.Response:
        error = {"message": "Incorrect API key provided", "type": "invalid_request_error"}
        return web.json_response({"error": {**error, "code": "invalid_api_key"}}, status=401)

    async def tags(_: web.Request) -> web.Response:
        return web.json_response({"models": [{"name": "qwen2:72b", "size": 41_000_000_000}]})

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if body.get("stream"):
            resp = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
            await resp.prepare(request)
            for word in ANSWER.split(" "):
                line = {
                    "model": body["model"],
                    "message": {"role": "assistant", "content": word + " "},
                    "done": False,
                }
                await resp.write(_dumps(line) + b"\n")
                await asyncio.sleep(0.01)
            done = {
                "model": body["model"],
                "message": {"role": "assistant", "content": ""},
                "done": True,
                "done_reason": "stop",
                "prompt_eval_count": 14,
                "eval_count": 31,
            }
            await resp.write(_dumps(done) + b"\n")
            return resp
        await asyncio.sleep(0.005)  # a fast local model
        return web.json_response(
            {
                "model": body["model"],
                "created_at": "2026-11-30T00:00:00Z",
                "message": {"role": "assistant", "content": ANSWER},
                "done": True,
                "done_reason": "stop",
                "prompt_eval_count": 14,
                "eval_count": 31,
            }
        )

    app = web.Application()
    app.router.add_get("/cloud/v1/models", unauthorized)
    app.router.add_post("/cloud/v1/chat/completions", unauthorized)
    app.router.add_get("/ollama/api/tags", tags)
    app.router.add_post("/ollama/api/chat", chat)
    return app


def _dumps(value: Any) -> bytes:
    import orjson

    return orjson.dumps(value)


def _config(port: int, refused: int) -> dict[str, Any]:
    return {
        "version": "0.3.2",
        "health": {"mode": "cached", "ttl_s": 30},
        "state": "memory://",  # the demo never touches your real state file
        "providers": [
            {
                "name": "deepseek-official",
                "endpoint": f"http://127.0.0.1:{refused}/v1/chat/completions",
                "api_key_env": "DEMO_DEEPSEEK_KEY",
                "timeout": {"connect": 500, "read": 3000},
                "fallback_weight": 1.0,
            },
            {
                "name": "zhipu-api",
                "endpoint": f"http://127.0.0.1:{port}/cloud/v1/chat/completions",
                "api_key_env": "DEMO_ZHIPU_KEY",
                "fallback_weight": 0.9,
            },
            {
                "name": "local-ollama",
                "endpoint": f"http://127.0.0.1:{port}/ollama/api/chat",
                "format": "ollama",
                "auth_header": "",
                "model_map": {"qwen2.5-72b": "qwen2:72b"},
                "timeout": {"connect": 200, "read": 10000},
                "fallback_weight": 0.8,
            },
        ],
    }


@click.command()
@expected_errors
def demo() -> None:
    """Watch a failover through three simulated local providers (offline, a few seconds)."""
    import asyncio

    asyncio.run(_demo())


async def _demo() -> None:
    from aiohttp import web

    from ..router import Router
    from .render import TraceLines

    runner = web.AppRunner(_app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    refused = _free_port()
    secrets = {"DEMO_DEEPSEEK_KEY": os.urandom(8).hex(), "DEMO_ZHIPU_KEY": os.urandom(8).hex()}
    router = Router(_config(port, refused), environ=secrets)
    lines = TraceLines()

    def narrate(event: Event) -> None:
        from ..events import AttemptEvent

        if isinstance(event, AttemptEvent):
            click.echo("  " + lines.line(event.attempt))

    router.subscribe(narrate)
    echo = click.echo
    echo("agent-reach demo: three simulated providers on 127.0.0.1, real HTTP, one engine.\n")
    echo(f"  deepseek-official  127.0.0.1:{refused}  nothing listens: connection refused")
    echo(f"  zhipu-api          127.0.0.1:{port}  OpenAI format, rejects the key with 401")
    echo(f"  local-ollama       127.0.0.1:{port}  native Ollama /api/chat, serves qwen2:72b\n")
    request = {"model": "qwen2.5-72b", "messages": [{"role": "user", "content": PROMPT}]}
    try:
        echo(f'1) agent-reach chat --model qwen2.5-72b --verbose --prompt "{PROMPT}"')
        start = time.perf_counter()
        result = await router.achat(request)
        total = (time.perf_counter() - start) * 1000
        r = result.response
        echo(f"\n  answer ({result.provider}, {total:.0f} ms end to end):")
        echo(f"    {r['choices'][0]['message']['content']}")
        echo(
            f"  normalized: object={r['object']} model={r['model']} "
            f"finish_reason={r['choices'][0]['finish_reason']} usage={r['usage']}\n"
        )
        echo("2) the same request again: circuits and health results are remembered")
        lines.count, lines.last = 0, None
        await router.achat(request)
        echo("\n3) streamed (--stream): Ollama NDJSON arrives as OpenAI chunks")
        lines.count, lines.last = 0, None
        stream = await router.open_stream(request)
        words = []
        async for chunk in stream:
            for c in chunk["choices"]:
                words.append(c["delta"].get("content") or "")
        echo(f"  {len(words)} chunks: {''.join(words).strip()[:60]}…")
    finally:
        await router.aclose()
        await runner.cleanup()
    echo("\nTry it on your own providers: agent-reach chat --verbose --prompt 'Hello'")
