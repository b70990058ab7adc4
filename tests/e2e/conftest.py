"""Fixtures for the end-to-end tests of the real coding agents (Claude Code, Codex CLI).

`agent_config` is a config whose default chain is a dead provider, one that answers 401, and a
chat provider (the `toolcall` scenario of `tests/fakes/upstream.py`) that asks to run `echo` in a
shell tool and then answers with its output; any model an agent asks for maps to `deepseek-chat` there. The proxy
requires the client key `tests.agents.AGENT_CLIENT_KEY` (from the variable `PROXY_KEYS`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ..fakes.upstream import Upstream, proxy_config, refused_url


@pytest.fixture
def agent_config(up: Upstream) -> dict[str, Any]:
    return proxy_config(
        [
            {"name": "dead", "endpoint": refused_url()},
            up.provider("auth"),
            up.provider("toolcall", model_map={"*": "deepseek-chat"}),
            up.provider("claude", "anthropic"),
        ],
        fallback_order=["dead", "auth", "toolcall"],
        server={"api_keys_env": "PROXY_KEYS"},
    )


@pytest.fixture
def agent_home(tmp_path: Path) -> Path:
    """A HOME no agent has ever been configured in."""
    home = tmp_path / "home"
    home.mkdir()
    return home
