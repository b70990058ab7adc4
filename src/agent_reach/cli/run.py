"""`agent-reach run -- COMMAND …`: run a program (a coding agent, a script) with the proxy
in front of it, started for that run only (protocol §11, the seed's "protocol injection point").

The proxy listens on 127.0.0.1 with a fresh one-time key; the program gets the OpenAI,
Anthropic and Gemini base URLs and keys of its SDKs pointing at it; Codex CLI also gets the
`-c` overrides that define an `agent_reach` model provider speaking the Responses API, and
Gemini CLI a private home whose settings take the key (`agents.gemini_home`). The key is
passed in the environment only, never printed. The run exits with the program's status.
"""

from __future__ import annotations

import os
import secrets
import shutil
import sys
from typing import Any

import click

from . import agents, expected_errors, fail


def agent_env(
    base: str, key: str, environ: dict[str, str], hidden: frozenset[str] = frozenset()
) -> dict[str, str]:
    """`environ` with the OpenAI, Anthropic and Gemini SDKs' base URLs and keys set to the
    proxy, and the other agents' settings (`agents.env_for`), without the variables in
    `hidden` (the providers' keys, the proxy's client keys): the program reaches providers
    through the proxy, and holds no key of theirs."""
    env = {k: v for k, v in environ.items() if k != "ANTHROPIC_AUTH_TOKEN" and k not in hidden}
    env.update(
        {
            "OPENAI_BASE_URL": f"{base}/v1",
            "OPENAI_API_KEY": key,
            "ANTHROPIC_BASE_URL": base,
            "ANTHROPIC_API_KEY": key,
            **agents.env_for(base, key, environ),
        }
    )
    return env


def codex_overrides(base: str) -> list[str]:
    """`codex -c` options that define the `agent_reach` provider (Responses API) and pick it."""
    provider = (
        f'{{name="agent-reach", base_url="{base}/v1", env_key="OPENAI_API_KEY", '
        'wire_api="responses"}'
    )
    return ["-c", f"model_providers.agent_reach={provider}", "-c", "model_provider=agent_reach"]


def command_line(command: tuple[str, ...], base: str) -> list[str]:
    """The program's argv, with Codex's overrides right after `codex`."""
    argv = list(command)
    if _name(command) == "codex":
        argv[1:1] = codex_overrides(base)
    return agents.argv_for(_name(command), argv)


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--route", "-r", help="Send every request of the run down this route.")
@click.option(
    "--port", type=click.IntRange(0, 65535), default=0, help="Port (default: a free one)."
)
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.pass_obj
@expected_errors
def run(obj: dict[str, Any], route: str | None, port: int, command: tuple[str, ...]) -> None:
    """Run COMMAND with the proxy in front of it: `agent-reach run -- codex exec "…"`."""
    if shutil.which(command[0]) is None:
        fail(f"{command[0]}: command not found", 127)
    from ..router import Router

    router = Router.from_config(obj["config_path"])
    if route is not None and route not in router.routes and route not in router.providers:
        fail(f"no route or provider named {route!r}", 2)
    import asyncio

    from ..server import run_with

    key = "AIza-" + secrets.token_urlsafe(24)  # Gemini CLI takes only keys that look Google's
    config = router.config
    named = [p.api_key_env for p in config.providers] + [config.server.api_keys_env]
    hidden = frozenset(var for var in named if var)
    code = asyncio.run(
        run_with(router, port, key, route, lambda base: _child(command, base, key, hidden))
    )
    sys.exit(code)


async def _child(command: tuple[str, ...], base: str, key: str, hidden: frozenset[str]) -> int:
    """Run the program to its end; its exit status (128 + N when killed by signal N)."""
    import asyncio
    import signal

    env = agent_env(base, key, dict(os.environ), hidden)
    home = agents.gemini_home(env) if _name(command) == "gemini" else None
    if home is not None:
        env["GEMINI_CLI_HOME"] = str(home)
    try:
        proc = await asyncio.create_subprocess_exec(*command_line(command, base), env=env)
        loop = asyncio.get_running_loop()
        # Ctrl-C reaches the program from the terminal; the run ends when it does.
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, _forward, proc, sig)
        try:
            code = await proc.wait()
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
    finally:
        if home is not None:
            shutil.rmtree(home, ignore_errors=True)  # links are removed, not followed
    return 128 - code if code < 0 else code


def _name(command: tuple[str, ...]) -> str:
    return os.path.basename(command[0])


def _forward(proc: Any, sig: int) -> None:
    if proc.returncode is None and sig != 2:  # SIGINT already went to the whole group
        proc.send_signal(sig)
