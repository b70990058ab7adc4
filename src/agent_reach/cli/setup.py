"""`agent-reach setup codex|claude|gemini|qwen|opencode`: point a coding agent at a running
`agent-reach serve`.

Prints what to put in the agent's own config, or with `--write` puts it there (the file's
other settings kept, the old file saved as `*.bak`):
- Codex CLI: `~/.codex/config.toml` (or `$CODEX_HOME/config.toml`): an `agent_reach` model
  provider on the Responses API, selected as `model_provider`.
- Claude Code: `~/.claude/settings.json`: `env.ANTHROPIC_BASE_URL`, and an `apiKeyHelper` that
  reads the proxy key from `$AGENT_REACH_API_KEY` when the agent starts.
- Gemini CLI: `~/.gemini/settings.json` (or under `$GEMINI_CLI_HOME`): the API-key auth it
  needs headless; its base URL and key are variables (printed).
- Qwen Code: `~/.qwen/settings.json`: OpenAI-compatible auth at the proxy; the key is
  `OPENAI_API_KEY` (printed).
- OpenCode: `~/.config/opencode/opencode.json`: an `agent-reach` provider whose key is
  `{env:AGENT_REACH_API_KEY}`, and its model selected.
No file gets a key: each reads it from a variable (any value when the proxy has no client
keys). `--undo` puts back, byte for byte, the file the first `--write` replaced (or removes
the file it created).
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any

import click

from .agents import (
    GEMINI_AUTH,
    OPENCODE_MODEL,
    codex_provider,
    opencode_provider,
    toml_value,
    with_auth,
)
from .exits import expected_errors, fail

KEY_VAR = "AGENT_REACH_API_KEY"
CODEX_CATALOG = "agent-reach-models.json"  # beside config.toml: `setup codex --write`'s catalog
_PROVIDER_TABLE = "[model_providers.agent_reach]"
_KEY_HELPER = f'printf %s "${{{KEY_VAR}:-agent-reach}}"'


def codex_toml(base: str, catalog: Path | None = None) -> str:
    """The Codex config that selects agent-reach (`agents.codex_provider`), and its model
    catalog file when there is one (`codex_catalog`)."""
    fields = codex_provider(base, KEY_VAR).items()
    table = "".join(f"{k} = {toml_value(v)}\n" for k, v in fields)
    top = "".join(f"{k} = {toml_value(v)}\n" for k, v in _top_keys(catalog).items())
    return f"{top}\n{_PROVIDER_TABLE}\n{table}"


def _top_keys(catalog: Path | None) -> dict[str, str]:
    keys = {"model_provider": "agent_reach"}
    if catalog is not None:
        keys["model_catalog_json"] = str(catalog)
    return keys


def merge_codex(text: str, base: str, catalog: Path | None = None) -> str:
    """`text` (a config.toml) with agent-reach selected (and its model `catalog`) and its
    provider table replaced or added; every other setting kept."""
    import tomllib

    tomllib.loads(text)  # refuse to edit a file that is not TOML
    first = re.search(r"(?m)^\[", text)  # top-level keys come before the first table
    head, tables = (text[: first.start()], text[first.start() :]) if first else (text, "")
    for key, value in _top_keys(catalog).items():
        line = f"{key} = {toml_value(value)}"
        if re.search(rf"(?m)^{key}\s*=", head):
            head = re.sub(rf"(?m)^{key}\s*=.*$", lambda _: line, head)  # noqa: B023
        else:
            head = f"{line}\n{head}"
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
    env["CLAUDE_CODE_ENABLE_GATEWAY_MODEL_DISCOVERY"] = "1"  # /model lists the claude-* routes
    env.pop("ANTHROPIC_AUTH_TOKEN", None)
    env.pop("ANTHROPIC_API_KEY", None)  # preferred to apiKeyHelper: the real key would go to us
    settings["env"] = env
    settings["apiKeyHelper"] = _KEY_HELPER
    return settings


def opencode_config(base: str, current: dict[str, Any] | None = None) -> dict[str, Any]:
    """OpenCode's config with the `agent-reach` provider, and its model selected."""
    config = dict(current or {})
    config["provider"] = {
        **dict(config.get("provider") or {}),
        **opencode_provider(base, f"{{env:{KEY_VAR}}}"),
    }
    config["model"] = OPENCODE_MODEL
    return config


# What `setup` prints after an agent's file: the variables it reads.
_THEN = {
    "gemini": "export GOOGLE_GEMINI_BASE_URL={base} GEMINI_API_KEY=<a proxy key starting AIza>",
    "qwen": "export OPENAI_API_KEY=<a proxy key>",
}


def _write_catalog(config_path: str | None, toml: Path) -> Path | None:
    """Codex's model catalog (`codex_models`) beside its config.toml `toml`, from the
    installed `codex` and the proxy's config; None, said why, when either is missing."""
    import asyncio
    import shutil

    from ..config import find_config_path
    from ..core.errors import ConfigError
    from ..router import Router
    from . import codex_models

    try:
        found: Path | None = find_config_path(config_path)
    except ConfigError:
        if config_path:
            raise
        found = None
    program = shutil.which("codex")
    models = None if program is None else asyncio.run(codex_models.bundled(program, {**os.environ}))
    if found is None or models is None:
        why = "no config found" if found is None else "no codex on PATH that gives its own"
        click.echo(f"agent-reach: no model catalog for Codex ({why}): it knows only its own models")
        return None
    router = Router.from_config(found)
    names = [(n, router.context_window(n)) for n in router.model_names()]
    path = toml.with_name(CODEX_CATALOG)
    _write(path, codex_models.catalog(models, names).decode())
    click.echo(f"agent-reach: wrote {path}, Codex's models and the proxy's {len(names)} names")
    return path


def _base_url(config_path: str | None, given: str | None) -> str:
    if given:
        return given.rstrip("/").removesuffix("/v1")
    from ..config import find_config_path, load_config
    from ..core.errors import ConfigError

    try:
        find_config_path(config_path)
    except ConfigError:
        if config_path:
            raise
        return "http://127.0.0.1:8000"
    server = load_config(config_path).server
    host = "127.0.0.1" if server.host in ("0.0.0.0", "::", "") else server.host
    return f"http://{host}:{server.port}"


def agent_config(agent: str) -> Path:
    """The config file `setup --write` writes for `agent`."""
    if agent == "codex":
        return Path(os.environ.get("CODEX_HOME") or "~/.codex").expanduser() / "config.toml"
    if agent == "gemini":
        home = os.environ.get("GEMINI_CLI_HOME") or "~"
        return Path(home).expanduser() / ".gemini" / "settings.json"
    if agent == "qwen":
        return Path("~/.qwen/settings.json").expanduser()
    if agent == "opencode":
        return Path("~/.config/opencode/opencode.json").expanduser()
    return Path("~/.claude/settings.json").expanduser()


def _json_for(agent: str, base: str, current: dict[str, Any] | None) -> dict[str, Any]:
    """The JSON config of `agent` (all but Codex) with agent-reach in it."""
    if agent == "gemini":
        return with_auth(current, GEMINI_AUTH)
    if agent == "qwen":
        return with_auth(current, {"selectedType": "openai", "baseUrl": f"{base}/v1"})
    if agent == "opencode":
        return opencode_config(base, current)
    return claude_settings(base, current)


def _saved(path: Path) -> tuple[Path, Path]:
    """Where the file before the first `--write` is kept, and the mark of that first write
    (`bak`: the file was saved; `new`: there was none)."""
    return path.with_name(path.name + ".bak"), path.with_name(path.name + ".agent-reach")


def _write(path: Path, text: str) -> None:
    """Write `text` to `path`, keeping what was there before the first write (a later write
    keeps that, so `--undo` goes back to the user's own file; a `.bak` of the user's own from
    before is replaced). They may hold tokens: the backup takes the old file's mode, a new
    file is 0600 and new directories 0700."""
    from ..config.write import private_parents

    private_parents(path)
    mode = stat.S_IMODE(path.stat().st_mode) if path.exists() else 0o600
    backup, mark = _saved(path)
    writes: list[tuple[Path, bytes]] = []
    if not mark.exists():
        first = b"bak" if path.exists() else b"new"
        if path.exists():
            writes.append((backup, path.read_bytes()))
        writes.append((mark, first))
    for target, content in [*writes, (path, text.encode())]:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        os.fchmod(fd, mode)  # an existing file, or the umask, may have had another
        with os.fdopen(fd, "wb") as out:
            out.write(content)


def _undo(path: Path) -> str | None:
    """Put back what the first `--write` replaced; what was done (None: it wrote nothing)."""
    backup, mark = _saved(path)
    if not mark.exists():
        return None
    first = mark.read_bytes()
    mark.unlink()
    if first == b"bak" and backup.exists():
        path.write_bytes(backup.read_bytes())
        backup.unlink()
        return f"restored {path} as it was before `setup --write`"
    path.unlink(missing_ok=True)
    return f"removed {path}, which `setup --write` created"


@click.command()
@click.argument("agent", type=click.Choice(["codex", "claude", "gemini", "qwen", "opencode"]))
@click.option("--base-url", help="Where the proxy listens (default: the config's server:).")
@click.option("--write", is_flag=True, help="Write it into the agent's own config file.")
@click.option("--undo", is_flag=True, help="Put back the file that --write replaced.")
@click.pass_obj
@expected_errors
def setup(obj: dict[str, Any], agent: str, base_url: str | None, write: bool, undo: bool) -> None:
    """Point Codex CLI, Claude Code, Gemini CLI, Qwen Code or OpenCode at a running
    `agent-reach serve`."""
    path = agent_config(agent)
    if undo:
        done = _undo(path)
        if done is None:
            fail(f"nothing to undo: `setup --write` has not written {path}", 1)
        click.echo(f"agent-reach: {done}")
        if agent == "codex" and (more := _undo(path.with_name(CODEX_CATALOG))):
            click.echo(f"agent-reach: {more}")
        return
    base = _base_url(obj["config_path"], base_url)
    if agent == "codex":
        if write:
            text = path.read_text() if path.exists() else ""
            _write(path, merge_codex(text, base, _write_catalog(obj["config_path"], path)))
        snippet = codex_toml(base)
    else:
        if write:
            current = json.loads(path.read_text() or "{}") if path.exists() else {}
            _write(path, json.dumps(_json_for(agent, base, current), indent=2) + "\n")
            if agent == "claude" and "ANTHROPIC_API_KEY" in (current.get("env") or {}):
                click.echo(
                    f"agent-reach: removed env.ANTHROPIC_API_KEY from {path}: Claude Code would "
                    "send that key (your Anthropic key) to the proxy instead of its own"
                )
        snippet = json.dumps(_json_for(agent, base, None), indent=2) + "\n"
    if write:
        click.echo(f"agent-reach: wrote {path} (`setup {agent} --undo` puts back the old one)")
    else:
        click.echo(f"# {path}\n{snippet}")
    then = _THEN.get(agent, f"export {KEY_VAR}=<a proxy key>").format(base=base)
    click.echo(f"# then: {then} (any value when client auth is off)")
