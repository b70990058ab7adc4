"""Codex's model catalog for a run (`cli/codex_models.py`): the names the proxy answers for, with
the context windows of the providers behind them, added to Codex's own catalog; and the installed
Codex asked for that catalog as a subprocess. The real Codex reading what is written:
tests/e2e/test_codex.py."""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path
from typing import Any

import orjson

from agent_reach import Router
from agent_reach.cli import codex_models


def entry(slug: str, priority: int, visibility: str = "list") -> dict[str, Any]:
    """A Codex catalog entry, with a few of the fields 0.171's have."""
    return {
        "slug": slug,
        "display_name": slug.upper(),
        "priority": priority,
        "visibility": visibility,
        "context_window": 500_000,
        "max_context_window": 872_000,
        "auto_compact_token_limit": None,
        "upgrade": {"model": "newer"},
        "shell_type": "shell_command",
        "model_messages": {"instructions_template": f"You are {slug}."},
    }


CODEX_OWN = [entry("gpt-b", 2), entry("gpt-hidden", 0, "hide"), entry("gpt-a", 1)]


def test_each_name_is_a_copy_of_codexs_default_after_its_own() -> None:
    written = orjson.loads(codex_models.catalog(CODEX_OWN, [("agents", 64_000), ("m", None)]))
    models = written["models"]
    assert models[:3] == CODEX_OWN  # Codex's own, unchanged
    agents, m = models[3:]
    # The template is the listed entry of the highest priority (the lowest number): gpt-a.
    assert agents["model_messages"] == {"instructions_template": "You are gpt-a."}
    assert agents["shell_type"] == "shell_command"
    assert (agents["slug"], agents["display_name"], agents["visibility"]) == ("agents",) * 2 + (
        "list",
    )
    assert agents["context_window"] == agents["max_context_window"] == 64_000
    assert m["context_window"] == codex_models.UNKNOWN_WINDOW
    assert agents["upgrade"] is None  # no "a newer model" notice for a proxy name
    # After Codex's own, so that its default model stays its default.
    assert (agents["priority"], m["priority"]) == (3, 4)


def test_a_name_codex_lists_itself_keeps_codexs_entry() -> None:
    written = orjson.loads(codex_models.catalog(CODEX_OWN, [("gpt-b", 1000)]))
    assert written["models"] == CODEX_OWN


def test_fields_the_installed_codex_lacks_are_not_added() -> None:
    bare = [{"slug": "old", "display_name": "Old", "priority": 1, "visibility": "list"}]
    added = orjson.loads(codex_models.catalog(bare, [("agents", None)]))["models"][1]
    assert not {"max_context_window", "auto_compact_token_limit", "upgrade"} & set(added)


def config() -> dict[str, Any]:
    return {
        "providers": [
            {
                "name": "small",
                "endpoint": "http://127.0.0.1:9/v1/chat/completions",
                "model_map": {"*": "deepseek-chat", "alias": "tiny"},
                "model_limits": {"deepseek-chat": {"context_window": 131072}},
                "context_window": 32000,
            },
            {
                "name": "big",
                "endpoint": "http://127.0.0.1:9/v1/chat/completions",
                "model_map": {"*": "big-model"},
                "context_window": 1_000_000,
            },
            {"name": "unknown", "endpoint": "http://127.0.0.1:9/v1/chat/completions"},
        ],
        "routes": {"agents": ["big", "small"], "wide": ["big"], "claude-*": ["small"]},
    }


def test_router_names_and_windows() -> None:
    router = Router(config())
    # GET /v1/models' names: model_map keys and targets, models, routes; no pattern.
    assert router.model_names() == ["alias", "deepseek-chat", "tiny", "big-model", "agents", "wide"]
    # Each provider is asked for its own name of the model: small maps "agents" to
    # deepseek-chat, whose own limit (131,072) wins over the provider's 32,000; the smallest
    # of the route's providers counts.
    assert router.context_window("agents") == 131072
    assert router.context_window("wide") == 1_000_000
    # The default order: small asks for "tiny" (its own 32,000), big and unknown serve it too.
    assert router.context_window("alias") == 32000
    # A name no route has: the smallest of the default order's.
    assert router.context_window("other-model") == 131072
    assert Router({"providers": config()["providers"][2:]}).context_window("m") is None


def script(tmp_path: Path, body: str) -> str:
    path = tmp_path / "codex"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_bundled_asks_the_program(tmp_path: Path) -> None:
    said = orjson.dumps({"models": CODEX_OWN}).decode()
    program = script(tmp_path, f'[ "$*" = "debug models --bundled" ] && echo \'{said}\'')
    assert asyncio.run(codex_models.bundled(program, dict(os.environ))) == CODEX_OWN


def test_a_codex_that_cannot_say_gives_no_catalog(tmp_path: Path) -> None:
    env = dict(os.environ)
    for body in ("exit 2", "echo not json", "echo '{\"models\": []}'", "echo '[1]'"):
        assert asyncio.run(codex_models.bundled(script(tmp_path, body), env)) is None
    assert asyncio.run(codex_models.bundled(str(tmp_path / "missing"), env)) is None
