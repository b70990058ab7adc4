"""Qwen Code and OpenCode (pinned in scripts/ensure-agents.sh) in their headless modes through
`agent-reach run`, with nothing set up in either: a dead and a 401 provider first, then a
chat provider that asks for a shell command and answers with its output (conftest.py's
agents' config). `run` knows each by its command name (`cli/agents.py`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from ..agents import agent
from ..upstream import TOOL_WORD, Upstream
from .test_proxy import PROVIDER_KEY

pytestmark = pytest.mark.slow
BIN = str(Path(sys.executable).parent / "agent-reach")
PROMPT = "Run echo in the shell and tell me what it printed."


def run(
    config: dict[str, Any], home: Path, tmp_path: Path, *command: str
) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "agent-reach.yaml"
    path.write_text(yaml.safe_dump(config))
    project = home / "project"
    project.mkdir()
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "PROVIDER_KEY": PROVIDER_KEY,
        "NO_COLOR": "1",
        "OPENCODE_DISABLE_AUTOUPDATE": "1",
        "OPENCODE_DISABLE_MODELS_FETCH": "1",
        "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
    }
    return subprocess.run(
        [BIN, "--config", str(path), "run", "--", *command],
        env=env,
        cwd=project,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def assert_tool_turn(done: subprocess.CompletedProcess[str], up: Upstream) -> None:
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().endswith(f"The command printed: {TOOL_WORD}"), done.stdout
    results = [m for b in up.bodies("toolcall") for m in b["messages"] if m["role"] == "tool"]
    assert any(TOOL_WORD in str(m["content"]) for m in results)  # the command ran
    assert up.bodies("auth")  # the 401 provider was tried first
    assert PROVIDER_KEY not in done.stdout + done.stderr


def test_qwen_code_through_agent_reach_run(
    agent_config: dict[str, Any], agent_home: Path, tmp_path: Path, up: Upstream
) -> None:
    done = run(agent_config, agent_home, tmp_path, str(agent("qwen")), "--yolo", "-p", PROMPT)
    assert_tool_turn(done, up)


def test_opencode_through_agent_reach_run(
    agent_config: dict[str, Any], agent_home: Path, tmp_path: Path, up: Upstream
) -> None:
    done = run(agent_config, agent_home, tmp_path, str(agent("opencode")), "run", PROMPT)
    assert_tool_turn(done, up)
    models = {b.get("model") for b in up.bodies("toolcall")}
    assert models == {"deepseek-chat"}  # "default", mapped by the provider's "*"
