"""`agent-reach setup codex|claude`: point a coding agent at a running `agent-reach serve`.

Prints what to put in the agent's own config, or with `--write` puts it there (the file's
other settings kept, the old file saved as `*.bak`):
- Codex CLI: `~/.codex/config.toml` (or `$CODEX_HOME/config.toml`): an `agent_reach` model
  provider on the Responses API, selected as `model_provider`.
- Claude Code: `~/.claude/settings.json`: `env.ANTHROPIC_BASE_URL`, and an `apiKeyHelper` that
  reads the proxy key from `$AGENT_REACH_API_KEY` when the agent starts.
Neither file gets a key: both read it from `AGENT_REACH_API_KEY` (any value when the proxy
has no client keys).
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any

import click

from . import expected_errors

KEY_VAR = "AGENT_REACH_API_KEY"
_PROVIDER_TABLE = "[model_providers.agent_reach]"
_KEY_HELPER = f'printf %s "${{{KEY_VAR}:-agent-reach}}"'


def codex_toml(base: str) -> str:
    """The Codex config that selects agent-reach."""
    return (
        'model_provider = "agent_reach"\n\n'
        f"{_PROVIDER_TABLE}\n"
        'name = "agent-reach"\n'
        f'base_url = "{base}/v1"\n'
        f'env_key = "{KEY_VAR}"\n'
        'wire_api = "responses"\n'
    )


def merge_codex(text: str, base: str) -> str:
    """`text` (a config.toml) with agent-reach selected and its provider table replaced or
    added; every other setting kept."""
    import tomllib

    tomllib.loads(text)  # refuse to edit a file that is not TOML
    first = re.search(r"(?m)^\[", text)  # top-level keys come before the first table
    head, tables = (text[: first.start()], text[first.start() :]) if first else (text, "")
    selected = 'model_provider = "agent_reach"'
    if re.search(r"(?m)^model_provider\s*=", head):
        head = re.sub(r"(?m)^model_provider\s*=.*$", selected, head)
    else:
        head = f"{selected}\n{head}"
    table = codex_toml(base).split("\n\n", 1)[1]
    pattern = re.compile(r"(?ms)^\[model_providers\.agent_reach\]\n.*?(?=^\[|\Z)")
    if pattern.search(tables):
        tables = pattern.sub(table + "\n", tables)
    else:
        tables = (tables.rstrip("\n") + "\n\n" if tables.strip() else "") + table
    out = head.rstrip("\n") + "\n\n" + tables
    tomllib.loads(out)
    return out


def claude_settings(base: str, current: dict[str, Any] | None = None) -> dict[str, Any]:
    """Claude Code's settings with the base URL and key helper of agent-reach."""
    settings = dict(current or {})
    env = dict(settings.get("env") or {})
    env["ANTHROPIC_BASE_URL"] = base
    env.pop("ANTHROPIC_AUTH_TOKEN", None)
    env.pop("ANTHROPIC_API_KEY", None)  # preferred to apiKeyHelper: the real key would go to us
    settings["env"] = env
    settings["apiKeyHelper"] = _KEY_HELPER
    return settings


def _base_url(config_path: str | None, given: str | None) -> str:
    if given:
        return given.rstrip("/").removesuffix("/v1")
    from ..config import find_config_path, load_config
    from ..errors import ConfigError

    try:
        find_config_path(config_path)
    except ConfigError:
        if config_path:
            raise
        return "http://127.0.0.1:8000"
    server = load_config(config_path).server
    host = "127.0.0.1" if server.host in ("0.0.0.0", "::", "") else server.host
    return f"http://{host}:{server.port}"


def _write(path: Path, text: str) -> None:
    """Write `text` to `path`, the old file kept as `*.bak`. They may hold tokens: the backup
    takes the old file's mode, a new file is 0600 and new directories 0700."""
    missing = [d for d in (path.parent, *path.parent.parents) if not d.exists()]
    for directory in reversed(missing):
        directory.mkdir(mode=0o700)
    mode = stat.S_IMODE(path.stat().st_mode) if path.exists() else 0o600
    saves = [(path.with_name(path.name + ".bak"), path.read_text())] if path.exists() else []
    for target, content in [*saves, (path, text)]:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        os.fchmod(fd, mode)  # an existing backup, or the umask, may have had another
        with os.fdopen(fd, "w") as out:
            out.write(content)


@click.command()
@click.argument("agent", type=click.Choice(["codex", "claude"]))
@click.option("--base-url", help="Where the proxy listens (default: the config's server:).")
@click.option("--write", is_flag=True, help="Write it into the agent's own config file.")
@click.pass_obj
@expected_errors
def setup(obj: dict[str, Any], agent: str, base_url: str | None, write: bool) -> None:
    """Point Codex CLI or Claude Code at a running `agent-reach serve`."""
    base = _base_url(obj["config_path"], base_url)
    if agent == "codex":
        path = Path(os.environ.get("CODEX_HOME") or "~/.codex").expanduser() / "config.toml"
        if write:
            text = path.read_text() if path.exists() else ""
            _write(path, merge_codex(text, base))
        snippet = codex_toml(base)
    else:
        path = Path("~/.claude/settings.json").expanduser()
        if write:
            current = json.loads(path.read_text() or "{}") if path.exists() else {}
            _write(path, json.dumps(claude_settings(base, current), indent=2) + "\n")
            if "ANTHROPIC_API_KEY" in (current.get("env") or {}):
                click.echo(
                    f"agent-reach: removed env.ANTHROPIC_API_KEY from {path}: Claude Code would "
                    "send that key (your Anthropic key) to the proxy instead of its own"
                )
        snippet = json.dumps(claude_settings(base), indent=2) + "\n"
    if write:
        click.echo(f"agent-reach: wrote {path} (the old file, if any, is {path.name}.bak)")
    else:
        click.echo(f"# {path}\n{snippet}")
    click.echo(f"# then: export {KEY_VAR}=<a proxy key> (any value when client auth is off)")
