"""Qwen Code and OpenCode (pinned in scripts/ensure-agents.sh) in their headless modes, with a
dead and a 401 provider first, then a chat provider that asks for a shell command and answers
with its output (conftest.py's agents' config): through `agent-reach run` with nothing set up
(`run` knows each by its command name, `cli/agents.py`), and against `agent-reach serve` after
`setup NAME --write`, which `--undo` takes back byte for byte."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from ..agents import AGENT_CLIENT_KEY, agent
from ..fakes.upstream import TOOL_WORD, Upstream
from .test_proxy import PROVIDER_KEY, start, stop

pytestmark = pytest.mark.agents

BIN = str(Path(sys.executable).parent / "agent-reach")
PROMPT = "Run echo in the shell and tell me what it printed."


def agent_env(home: Path) -> dict[str, str]:
    """The environment both agents run in, offline, in a HOME of their own."""
    return {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "PROVIDER_KEY": PROVIDER_KEY,
        "NO_COLOR": "1",
        "OPENCODE_DISABLE_AUTOUPDATE": "1",
        "OPENCODE_DISABLE_MODELS_FETCH": "1",
        "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
    }


def run(
    config: dict[str, Any], home: Path, tmp_path: Path, *command: str
) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "agent-reach.yaml"
    path.write_text(yaml.safe_dump(config))
    project = home / "project"
    project.mkdir()
    return subprocess.run(
        [BIN, "--config", str(path), "run", "--", *command],
        env=agent_env(home),
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


@pytest.mark.parametrize(
    ("name", "path", "key_var"),
    [
        ("qwen", ".qwen/settings.json", "OPENAI_API_KEY"),
        ("opencode", ".config/opencode/opencode.json", "AGENT_REACH_API_KEY"),
    ],
)
def test_an_agent_set_up_by_setup_write_reaches_serve(
    agent_config: dict[str, Any],
    agent_home: Path,
    tmp_path: Path,
    up: Upstream,
    name: str,
    path: str,
    key_var: str,
) -> None:
    written = agent_home / path
    written.parent.mkdir(parents=True)
    original = b'{"theme": "dark"}\n'
    written.write_bytes(original)
    proxy = start(agent_config, tmp_path, up, env={"PROXY_KEYS": AGENT_CLIENT_KEY})
    env = {**agent_env(agent_home), key_var: AGENT_CLIENT_KEY}
    setup = [BIN, "setup", name]
    subprocess.run([*setup, "--write", "--base-url", proxy.base], env=env, check=True)
    assert json.loads(written.read_text())["theme"] == "dark"  # the user's own setting kept
    argv = [str(agent("qwen")), "--yolo", "-p", PROMPT] if name == "qwen" else []
    argv = argv or [str(agent("opencode")), "run", PROMPT]
    project = agent_home / "project"
    project.mkdir()
    try:
        done = subprocess.run(
            argv, env=env, cwd=project, capture_output=True, text=True, timeout=180, check=False
        )
    finally:
        stop(proxy)
    assert_tool_turn(done, up)
    subprocess.run([*setup, "--undo"], env=env, check=True, capture_output=True)
    assert written.read_bytes() == original
