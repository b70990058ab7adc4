"""`agent-reach demo`: a real failover, offline, in a few seconds.

Three simulated providers run on 127.0.0.1 (`simulated`): one refuses connections, one rejects
the key with 401, one speaks native Ollama. A request goes through the same engine as every
other, over real HTTP, and the trace shows what happened.

`demo --serve` keeps them up until Ctrl-C, with a chat model that drives a coding agent's tool
turn, writes a config for them and prints the commands that try Codex CLI and Claude Code.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from .exits import expected_errors

if TYPE_CHECKING:
    from ..core.events import Event

PROMPT = "Explain quantum annealing in one sentence."
AGENT_PROMPT = "Run echo in the shell and tell me what it printed."


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
                "endpoint": f"http://127.0.0.1:{port}/api/chat",
                "format": "ollama",
                "auth_header": "",
                "model_map": {"qwen2.5-72b": "qwen2:72b"},
                "timeout": {"connect": 200, "read": 10000},
                "fallback_weight": 0.8,
            },
        ],
    }


@click.command()
@click.option(
    "--serve",
    is_flag=True,
    help="Keep the simulated providers up (until Ctrl-C) to try serve, run and the agents.",
)
@click.option("--port", type=click.IntRange(0, 65535), default=0, help="With --serve: their port.")
@expected_errors
def demo(serve: bool, port: int) -> None:
    """Watch a failover through three simulated local providers (offline, a few seconds)."""
    import asyncio

    if serve:
        try:
            asyncio.run(_serve(port))
        except OSError as exc:  # e.g. the port is taken
            from .exits import fail

            fail(f"cannot listen on 127.0.0.1:{port}: {exc.strerror or exc}", 2)
        return
    asyncio.run(_demo())


def command() -> str:
    """How the user's shell calls this command: `agent-reach` when PATH finds this very one,
    else the path it was started by (`.venv/bin/agent-reach` before activating the venv)."""
    typed = sys.argv[0]
    found = shutil.which("agent-reach")
    if os.path.basename(typed) != "agent-reach":
        return "agent-reach"
    if found is not None and os.path.samefile(found, typed):
        return "agent-reach"
    return typed


def agents_config(port: int, refused: int) -> dict[str, Any]:
    """The config `demo --serve` writes: a dead provider, a 401 one, the simulated model over
    Chat Completions (and its embedding space), then over native Ollama; any model an agent
    asks for maps to it."""
    from .simulated import EMBED_MODEL, EMBED_WIDTH

    base = f"http://127.0.0.1:{port}"
    return {
        "version": "0.3.2",
        "state": "memory://",
        "health": {"mode": "off"},
        "embeddings": {"spaces": {EMBED_MODEL: {"dimensions": EMBED_WIDTH}}},
        "providers": [
            {
                "name": "deepseek-official",
                "endpoint": f"http://127.0.0.1:{refused}/v1/chat/completions",
                "auth_header": "",
                "model_map": {"*": "deepseek-chat"},
            },
            {
                "name": "zhipu-api",
                "endpoint": f"{base}/cloud/v1/chat/completions",
                "auth_header": "",  # it answers 401 whatever is sent
                "model_map": {"*": "glm-4-flash"},
            },
            {
                "name": "local-model",
                "endpoint": f"{base}/v1/chat/completions",
                "auth_header": "",
                "model_map": {"*": "qwen2.5-coder:7b"},
                "embeddings": {"models": {EMBED_MODEL: EMBED_MODEL}},
            },
            {
                "name": "local-ollama",
                "endpoint": f"{base}/api/chat",
                "format": "ollama",
                "auth_header": "",
                "model_map": {"*": "qwen2.5-coder:7b"},
            },
        ],
    }


async def _serve(port: int) -> None:
    """Serve the simulated providers until SIGINT or SIGTERM; write and print the config."""
    import asyncio
    import signal

    from aiohttp import web

    from ..config.write import to_yaml, write_private
    from ..net.ports import free_port
    from .simulated import EMBED_MODEL, EMBED_WIDTH, app

    started = time.perf_counter()
    stop = asyncio.Event()  # Ctrl-C stops it cleanly from here on, before anything is printed
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    runner = web.AppRunner(app(), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    port = runner.addresses[0][1]
    refused = free_port()
    target = Path("~/.agent-reach/demo.yaml").expanduser()
    config = agents_config(port, refused)
    header = "# Written by `agent-reach demo --serve`: its simulated providers, while it runs.\n"
    write_private(target, header + to_yaml(config))
    base = f"http://127.0.0.1:{port}"
    me = command()
    run = f"{me} --config {target} run --"
    echo = click.echo
    echo("agent-reach demo: simulated providers on 127.0.0.1 until Ctrl-C")
    echo(f"  deepseek-official  http://127.0.0.1:{refused}  nothing listens: connection refused")
    echo(f"  zhipu-api          {base}/cloud/v1  answers 401 to any key")
    echo(f"  local-model        {base}/v1  a chat model: runs `echo` with the agent's shell tool;")
    echo(f"                     and {EMBED_MODEL}, an embedding model ({EMBED_WIDTH} wide)")
    echo(f"  local-ollama       {base}/api/chat  the same model, native Ollama")
    echo(f"config: {target}")
    echo("try, in another terminal:")
    echo(f'  {run} codex exec --skip-git-repo-check "{AGENT_PROMPT}"')
    echo(f'  {run} claude -p "{AGENT_PROMPT}" --allowedTools "Bash(echo:*)"')
    echo(f'  {run} gemini --skip-trust --yolo -p "{AGENT_PROMPT}"')
    echo(f'  {me} --config {target} embed -m {EMBED_MODEL} "a line to embed"')
    echo(f"  OLLAMA_HOST={base} {me} init    # your own config, from what answers")
    echo(f"ready in {time.perf_counter() - started:.2f} s", err=True)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
    echo("agent-reach demo: stopped")


async def _demo() -> None:
    from aiohttp import web

    from ..net.ports import free_port
    from ..router import Router
    from .render import TraceLines
    from .simulated import app

    runner = web.AppRunner(app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    refused = free_port()
    secrets = {"DEMO_DEEPSEEK_KEY": os.urandom(8).hex(), "DEMO_ZHIPU_KEY": os.urandom(8).hex()}
    router = Router(_config(port, refused), environ=secrets)
    lines = TraceLines()

    def narrate(event: Event) -> None:
        from ..core.events import AttemptEvent

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
    echo(f"\nTry it on your own providers: {command()} chat --verbose --prompt 'Hello'")
