"""`agent-reach init`: a starter config from the catalog (protocol §11).

It keeps the catalog providers whose key variables are set (the first entry of each variable,
and its Anthropic-compatible endpoint, which the route `claude-*` puts first for Claude Code),
and a local Ollama, in its native format, if `$OLLAMA_HOST` (default
`http://127.0.0.1:11434`) answers its health check `/api/tags`. It never writes a key, only the
names of the variables; it never overwrites a file without `--force`; and when nothing is
usable it writes nothing and exits 1.

The config serves the coding agents as written: a provider whose model names the agents do not
send (all but OpenAI's and Anthropic's own) maps `"*"` to its first model, so Codex CLI's
`gpt-…` and Claude Code's `claude-…` requests reach it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from .exits import expected_errors, fail

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ..catalog import Entry

READ_TIMEOUT_MS = 30000  # a whole LLM answer; the protocol's 3 s default suits health checks
# The route Claude Code's model names take: the kept Anthropic-compatible endpoints first (no
# translation: thinking, tools and cache_control as Claude Code sends them), then the rest.
CLAUDE_ROUTE = "claude-*"


@dataclass(frozen=True)
class Choice:
    """What `init` did with one catalog entry, and why."""

    entry: Entry
    kept: bool
    why: str
    provider: dict[str, Any] = field(default_factory=dict)  # the config entry, when kept

    def line(self) -> str:
        """`name: kept (why)` or `name: skipped (why)`."""
        return f"{self.entry.name}: {'kept' if self.kept else 'skipped'} ({self.why})"


def config_target(path: str | None) -> Path:
    """The config file to write: `path`, else `$AGENT_REACH_CONFIG`, else
    `~/.agent-reach/config.yaml` (the lookup order of protocol §2.1, without requiring the file)."""
    from ..config import DEFAULT_PATH, ENV_PATH

    return Path(path or os.environ.get(ENV_PATH) or DEFAULT_PATH).expanduser()


@click.command()
@click.option("--force", is_flag=True, help="Overwrite an existing file.")
@click.option(
    "--path",
    type=click.Path(dir_okay=False),
    help="Where to write (default: --config, $AGENT_REACH_CONFIG, ~/.agent-reach/config.yaml).",
)
@click.option("--json", "as_json", is_flag=True, help="Print what was kept and written as JSON.")
@click.pass_obj
@expected_errors
def init(obj: dict[str, Any], force: bool, path: str | None, as_json: bool) -> None:
    """Write a starter config: the known providers whose key variables are set, and a local
    Ollama if one answers. Exit 1 (writing nothing) when none is usable."""
    import asyncio

    from .. import catalog
    from ..config.write import write_private

    target = config_target(path or obj["config_path"])
    if target.exists() and not force:
        fail(f"{target} already exists; use --force to overwrite it", 2)
    choices = asyncio.run(choose(catalog.load(), dict(os.environ)))
    kept = [c for c in choices if c.kept]
    if as_json:
        from .render import print_json

        print_json(
            {
                "path": str(target),
                "written": bool(kept),
                "providers": [
                    {"name": c.entry.name, "kept": c.kept, "why": c.why} for c in choices
                ],
            }
        )
    else:
        for choice in choices:
            click.echo(choice.line())
    if not kept:
        fail(
            "nothing usable was found, so nothing was written: set the key variable of a "
            "provider above (or start Ollama, or point $OLLAMA_HOST at it) and run init again",
            1,
        )
    text = render(kept, json_file=target.suffix.lower() == ".json")
    _check(text, target)
    write_private(target, text)
    names = ", ".join(c.entry.name for c in kept)
    click.echo(f"wrote {target} with {len(kept)} provider(s): {names}", err=as_json)
    mapped = [c.entry.name for c in kept if "model_map" in c.provider]
    if mapped:
        click.echo(
            f"Codex CLI and Claude Code can use it: {', '.join(mapped)} map any model name to"
            ' their first model (model_map "*")',
            err=as_json,
        )
    click.echo("next: `agent-reach check`, then `agent-reach chat -v -p Hello`", err=as_json)
    click.echo(
        'or: `agent-reach run -- codex exec "…"`, `agent-reach run -- claude -p "…"`',
        err=as_json,
    )


async def choose(entries: tuple[Entry, ...], environ: Mapping[str, str]) -> list[Choice]:
    """Keep or skip each catalog entry, in catalog order."""
    used: dict[str, str] = {}  # key variable -> the entry that has it
    messages: set[str] = set()  # key variables whose Anthropic-compatible endpoint is kept
    out: list[Choice] = []
    for e in entries:
        if e.key_env:
            missing = [v for v in (e.key_env, *e.requires) if not environ.get(v)]
            if e.key_env in used and e.format == "anthropic" and e.key_env not in messages:
                messages.add(e.key_env)  # the chat entry's Messages endpoint: Claude Code's
                provider = agent_ready(e, e.provider())
                why = f"{e.key_env} is set; route {CLAUDE_ROUTE} sends Claude Code here first"
                out.append(Choice(e, True, why, provider))
            elif e.key_env in used:
                out.append(Choice(e, False, f"{e.key_env} is already used by {used[e.key_env]}"))
            elif missing:
                out.append(Choice(e, False, f"{missing[0]} is not set"))
            else:
                used[e.key_env] = e.name
                messages.update([e.key_env] if e.format == "anthropic" else [])
                provider = with_embeddings(e, agent_ready(e, e.provider()))
                out.append(Choice(e, True, f"{e.key_env} is set", provider))
        elif e.format == "ollama":
            out.append(await _local_ollama(e, environ))
        else:
            why = "a local server: init looks only for Ollama; add it with `probe URL --write NAME`"
            out.append(Choice(e, False, why))
    return out


async def _local_ollama(entry: Entry, environ: Mapping[str, str]) -> Choice:
    """The catalog's native Ollama entry, kept when `$OLLAMA_HOST` answers its health check;
    its models are the ones that Ollama lists."""
    from ..catalog import embedding_space, ollama_base
    from ..router import Router
    from ..state import MemoryStore

    endpoint = ollama_base(environ.get("OLLAMA_HOST")) + "/api/chat"
    provider = entry.provider(endpoint=endpoint)
    router = Router({"providers": [provider]}, store=MemoryStore(), environ=dict(environ))
    try:
        checked = await router.check(provider["name"])
    finally:
        await router.aclose()
    if not checked.usable:
        what = f"{checked.health}, {checked.detail}" if checked.detail else checked.health
        return Choice(entry, False, f"no Ollama answers at {checked.url}: {what}")
    listed = checked.models or []
    spaces = {name: embedding_space(name) for name in listed}
    pulled = {s[0]: name for name, s in spaces.items() if s and s[0] in entry.embeddings}
    models = [name for name in listed if spaces[name] is None]  # the chat ones
    provider.pop("models", None)
    if models:
        provider["models"] = models
    provider = with_embeddings(entry, agent_ready(entry, provider), pulled)
    found = f"{len(listed)} model(s)" if listed else "no models pulled yet"
    return Choice(entry, True, f"Ollama answers at {checked.url}, {found}", provider)


def with_embeddings(
    entry: Entry, provider: dict[str, Any], served: dict[str, str] | None = None
) -> dict[str, Any]:
    """`provider` with the embedding models of `entry` it serves (default: all of them)."""
    embeddings = entry.embedding(served)
    return provider if embeddings is None else {**provider, "embeddings": embeddings}


def agent_ready(entry: Entry, provider: dict[str, Any]) -> dict[str, Any]:
    """`provider` with `"*"` mapped to its first model, unless the agents send its own names."""
    models = provider.get("models")
    if entry.own_models or not models:
        return provider
    return {**provider, "model_map": {"*": models[0]}}


HEADER = [
    "agent-reach config, written by `agent-reach init` from the provider catalog.",
    "No key is stored here: each provider names the environment variable that holds it.",
    "`models` are typical ones: the first is used when a request names none. `model_map`",
    "\"*\" sends any other model (Codex CLI's gpt-…, Claude Code's claude-…) to that first",
    "model; without it, a request for a model not listed skips the provider.",
]


def render(kept: list[Choice], json_file: bool = False) -> str:
    """The config file's text: a short header, defaults, and each provider with its notes (a
    `.json` file gets the same data as JSON, without the comments)."""
    from ..catalog import spaces as catalog_spaces
    from ..config.write import render as render_config

    providers = [
        (
            c.provider,
            f"{c.entry.title}, level {c.entry.level}"
            + (f": {c.entry.notes}" if c.entry.notes else ""),
        )
        for c in kept
    ]
    defaults = {"timeout": {"connect": 1000, "read": READ_TIMEOUT_MS}}
    used = {m for c in kept for m in c.provider.get("embeddings", {}).get("models", {})}
    known = catalog_spaces(c.entry for c in kept)
    spaces = {m: space for m, space in known.items() if m in used}
    top: dict[str, Any] = {"embeddings": {"spaces": spaces}} if spaces else {}
    names = [c.provider["name"] for c in kept]
    first = [c.provider["name"] for c in kept if c.entry.format == "anthropic"]
    if first and len(first) < len(names):
        top["routes"] = {CLAUDE_ROUTE: [*first, *(n for n in names if n not in first)]}
    return render_config(providers, defaults, HEADER, json_file=json_file, top=top)


def _check(text: str, target: Path) -> None:
    """The text must load as a config (a failure here is a bug, reported as a config error)."""
    from ..config import config_from_data, parse_text

    data = parse_text(text, json_file=target.suffix.lower() == ".json", file=str(target))
    config_from_data(data, source=str(target))
