"""`agent-reach run -- COMMAND …`: run a program (a coding agent, a script) with the proxy
in front of it, started for that run only (protocol §11, the seed's "protocol injection point").

The proxy listens on 127.0.0.1 with a fresh one-time key; the program gets the OpenAI,
Anthropic and Gemini base URLs and keys of its SDKs pointing at it; Codex CLI also gets the
`-c` overrides that define an `agent_reach` model provider speaking the Responses API, Claude
Code a `--settings` file that outranks its own, Gemini CLI a private home whose settings take
the key, and the other agents what `agents` says. The key is passed in the environment (and
the private files, 0600 in a 0700 folder removed after the run) only, never printed nor on a
command line. The run exits with the program's status.

While the program runs, `watch.Watch` writes to stderr what the user would otherwise not see,
each thing once: a failover or failure not said yet, a provider going down or coming back, and
a summary when the program ends (`--quiet` silences them; `--log FILE` gets them too, with the
proxy's access lines). A full-screen agent on a terminal would draw over them: they go to
`RUN_LOG` then, and only the summary to the terminal.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from . import agents
from .exits import expected_errors, fail
from .watch import Watch, writer

if TYPE_CHECKING:
    from ..config import Config

Names = list[tuple[str, int | None]]  # the proxy's model names, each with its context window
RUN_LOG = "~/.agent-reach/run.log"  # where the lines go while a full-screen agent runs
DISCOVERY = "CLAUDE_CODE_ENABLE_GATEWAY_MODEL_DISCOVERY"  # Claude Code asks GET /v1/models
UNTRUSTED = 55  # Gemini CLI's exit in a folder the user has not trusted
UNTRUSTED_FIX = "this folder is not trusted; `gemini --skip-trust …` trusts it for one run"


def agent_env(
    base: str, key: str, environ: dict[str, str], hidden: frozenset[str] = frozenset()
) -> dict[str, str]:
    """`environ` with the OpenAI, Anthropic and Gemini SDKs' base URLs and keys set to the
    proxy, and the other agents' settings (`agents.env_for`), without the variables in
    `hidden` (`secret_variables`): the program reaches providers through the proxy, and
    holds no secret of the config's."""
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


# What every program runs with, and no secret, though a config's `${VAR}` may read it.
_ORDINARY = frozenset({"HOME", "PATH", "USER", "LOGNAME", "SHELL", "PWD", "TMPDIR", "LANG", "TERM"})


def secret_variables(config: Config) -> frozenset[str]:
    """The variables the program is not given: each one the config names for a secret (the
    providers' `api_key_env` and `proxy_auth_env`, the client keys' `api_keys_env`, an email
    alert's `username_env` and `password_env`) and each one its `${VAR}`s read (a Redis
    password, a collector's token, a webhook's secret, a key in an endpoint), but the few
    every program runs with (`HOME`, `PATH`, …)."""
    from ..config import EmailAlert

    named: list[str | None] = [config.server.api_keys_env]
    for p in config.providers:
        named += [p.api_key_env, p.proxy_auth_env]
    for sink in config.alerts:
        if isinstance(sink, EmailAlert):
            named += [sink.username_env, sink.password_env]
    return frozenset(var for var in named if var) | (config.variables - _ORDINARY)


def codex_overrides(base: str, models: str | None = None) -> list[str]:
    """`codex -c` options that define the `agent_reach` provider (`agents.codex_provider`)
    and pick it, and name the catalog file `models` (`codex_models`) when there is one."""
    fields = agents.codex_provider(base, "OPENAI_API_KEY").items()
    provider = "{" + ", ".join(f"{k}={agents.toml_value(v)}" for k, v in fields) + "}"
    out = ["-c", f"model_providers.agent_reach={provider}", "-c", "model_provider=agent_reach"]
    if models is not None:
        out += ["-c", f"model_catalog_json={agents.toml_value(models)}"]
    return out


def claude_settings(base: str, key: str) -> dict[str, Any]:
    """The settings `run` gives Claude Code with `--settings`: they outrank the `env` and
    `apiKeyHelper` of its settings files (what `setup claude --write` writes among them),
    which outrank the process environment."""
    env = {"ANTHROPIC_BASE_URL": base, "ANTHROPIC_API_KEY": key, "ANTHROPIC_AUTH_TOKEN": ""}
    env[DISCOVERY] = "1"  # its model picker lists the proxy's claude-* routes
    # No key helper: with one, Claude Code sends its key as both x-api-key and a Bearer token.
    return {"env": env, "apiKeyHelper": ""}


def written_elsewhere(program: str) -> str | None:
    """What the agent's own config (`setup --write`'s file) points it at, when it does, and
    that this run overrides it; None for other programs or configs."""
    import tomllib

    from .setup import agent_config

    name = os.path.basename(program)
    if name not in ("codex", "claude"):
        return None
    path = agent_config(name)
    try:
        text = path.read_text(encoding="utf-8")
        if name == "claude":
            where = (json.loads(text).get("env") or {}).get("ANTHROPIC_BASE_URL")
        else:
            config = tomllib.loads(text)
            chosen = config.get("model_provider")
            where = (config.get("model_providers") or {}).get(chosen, {}).get("base_url", chosen)
    except (OSError, ValueError, AttributeError):
        return None
    if not where:
        return None
    how = "--settings" if name == "claude" else "-c options"
    return f"{path} points {name} at {where}; this run overrides it ({how})"


def command_line(command: tuple[str, ...], base: str, settings: str | None = None) -> list[str]:
    """The program's argv, with Codex's overrides right after `codex` (`settings`: its model
    catalog file), and Claude Code's `--settings FILE` right after `claude`."""
    argv = list(command)
    name = os.path.basename(argv[0])
    if name == "codex":
        argv[1:1] = codex_overrides(base, settings)
    elif name == "claude" and settings is not None:
        argv[1:1] = ["--settings", settings]
    return agents.argv_for(name, argv)


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--route", "-r", help="Send every request of the run down this route.")
@click.option(
    "--port", type=click.IntRange(0, 65535), default=0, help="Port (default: a free one)."
)
@click.option("--quiet", "-q", is_flag=True, help="No failover lines and no summary on stderr.")
@click.option(
    "--log",
    "log_path",
    type=click.Path(dir_okay=False),
    help="Append the proxy's access lines (and the failover lines) to this file (new: 0600).",
)
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.pass_obj
@expected_errors
def run(
    obj: dict[str, Any],
    route: str | None,
    port: int,
    quiet: bool,
    log_path: str | None,
    command: tuple[str, ...],
) -> None:
    """Run COMMAND with the proxy in front of it: `agent-reach run -- codex exec "…"`."""
    if shutil.which(command[0]) is None:
        fail(f"{command[0]}: command not found", 127)
    from ..router import Router

    router = Router.from_config(obj["config_path"])
    if route is not None and route not in router.routes and route not in router.providers:
        fail(f"no route or provider named {route!r}", 2)
    import asyncio

    from ..config.write import open_private
    from ..server import CannotServe, run_with

    try:
        log_file = None if log_path is None else open_private(Path(log_path), append=True)
    except OSError as exc:
        fail(f"--log {log_path}: {exc.strerror or exc}", 2)
    tui = not quiet and log_file is None and sys.stderr.isatty() and full_screen(command)
    if tui:  # lines on its screen would be drawn over: they go to a file it does not touch
        target = Path(RUN_LOG).expanduser()
        log_file = open_private(target, append=True)
        click.echo(
            f"agent-reach: {os.path.basename(command[0])} draws over this terminal: what its"
            f" requests meet goes to {target} (tail -f it); a summary follows when it exits",
            err=True,
        )
    streams = [s for s in (None if quiet or tui else sys.stderr, log_file) if s is not None]
    watch = Watch(writer(*streams))
    elsewhere = written_elsewhere(command[0])
    if elsewhere and streams:
        watch.write(elsewhere)
    router.subscribe(watch)
    key = "AIza-" + secrets.token_urlsafe(24)  # Gemini CLI takes only keys that look Google's
    hidden = secret_variables(router.config)
    names = [(n, router.context_window(n)) for n in router.model_names()]
    try:
        code = asyncio.run(
            run_with(
                router,
                port,
                key,
                route,
                lambda base: _child(command, base, key, hidden, names),
                log_file,
            )
        )
    except CannotServe as exc:
        fail(str(exc), 2)
    if streams:
        (writer(*streams, sys.stderr) if tui else watch.write)(watch.summary())
    if code == UNTRUSTED and os.path.basename(command[0]) == "gemini" and not quiet:
        click.echo(f"agent-reach: gemini exited {code}: {UNTRUSTED_FIX}", err=True)
    sys.exit(code)


def full_screen(command: tuple[str, ...]) -> bool:
    """Whether COMMAND is an agent's full-screen UI, which redraws over stderr: `codex` but
    `codex exec`, `claude` but `claude -p`."""
    name, args = os.path.basename(command[0]), command[1:]
    if name == "codex":
        return not (args and args[0] in ("exec", "e"))
    if name == "claude":
        return not any(a in ("-p", "--print") for a in args)
    return False


async def _child(
    command: tuple[str, ...], base: str, key: str, hidden: frozenset[str], names: Names
) -> int:
    """Run the program to its end; its exit status (128 + N when killed by signal N).
    `names`: the proxy's model names and their context windows (Codex's catalog)."""
    import tempfile

    env = agent_env(base, key, dict(os.environ), hidden)
    name = os.path.basename(command[0])
    if name not in ("claude", "gemini", "codex"):
        return await _wait(command_line(command, base), env)
    # Its files carry the key: only this user can read them, and they are gone after the run.
    with tempfile.TemporaryDirectory(prefix="agent-reach-run-") as private:  # mode 0700
        if name == "gemini":
            env["GEMINI_CLI_HOME"] = str(agents.gemini_home(env, Path(private)))
            return await _wait(command_line(command, base), env)
        if name == "codex":
            return await _wait(
                command_line(command, base, await _catalog(command[0], env, names, private)), env
            )
        settings = os.path.join(private, "claude-settings.json")
        with open(os.open(settings, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            json.dump(claude_settings(base, key), f)
        return await _wait(command_line(command, base, settings), env)


async def _catalog(program: str, env: dict[str, str], names: Names, private: str) -> str | None:
    """Codex's model catalog for the run, written in `private`; None when the installed Codex
    cannot give its own (`codex_models.bundled`)."""
    from . import codex_models

    models = await codex_models.bundled(program, env)
    if models is None:
        return None
    path = os.path.join(private, "codex-models.json")
    with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "wb") as f:
        f.write(codex_models.catalog(models, names))
    return path


async def _wait(argv: list[str], env: dict[str, str]) -> int:
    import asyncio
    import signal

    proc = await asyncio.create_subprocess_exec(*argv, env=env)
    loop = asyncio.get_running_loop()
    # Ctrl-C reaches the program from the terminal; the run ends when it does.
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, _forward, proc, sig)
    try:
        code = await proc.wait()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
    return 128 - code if code < 0 else code


def _forward(proc: Any, sig: int) -> None:
    if proc.returncode is None and sig != 2:  # SIGINT already went to the whole group
        proc.send_signal(sig)
