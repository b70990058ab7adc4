"""The real Gemini CLI (`gemini --yolo -p`, pinned in scripts/ensure-agents.sh) through the
proxy's Gemini API face, with a dead and a 401 provider before a chat-only provider that asks
for a shell command and then answers with its output (the agents' config of conftest.py).

What Gemini CLI 0.61.0 sends (docs/decisions.md, "Gemini ingress"): a routing classifier call
(`generateContent` on a flash model, JSON with a `responseJsonSchema`), then the turn as
`streamGenerateContent?alt=sse`, key in `x-goog-api-key`; it needs
`security.auth.selectedType: gemini-api-key` in its settings to take a key headless.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from ..agents import agent, gemini_env
from ..fakes.upstream import TOOL_WORD, Upstream
from .test_proxy import PROVIDER_KEY, start, stop

pytestmark = pytest.mark.agents

BIN = str(Path(sys.executable).parent / "agent-reach")
KEY = "AIza-agent-client-7c6b5a4e-SECRET"  # Gemini CLI checks a key's look: it starts with AIza
PROMPT = "Run echo in the shell and tell me what it printed."


def gemini(env: dict[str, str], cwd: Path, *prefix: str) -> subprocess.CompletedProcess[str]:
    """`gemini --yolo -p` of the prompt (after `prefix`, e.g. an `agent-reach run`)."""
    return subprocess.run(
        [*prefix, str(agent("gemini")), "--yolo", "-p", PROMPT],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def test_gemini_cli_completes_a_tool_turn_through_the_proxy(
    agent_config: dict[str, Any], agent_home: Path, tmp_path: Path, up: Upstream
) -> None:
    settings = agent_home / ".gemini" / "settings.json"
    settings.parent.mkdir()
    original = b'{"ui": {"theme": "GitHub"}}'
    settings.write_bytes(original)
    proxy = start(agent_config, tmp_path, up, env={"PROXY_KEYS": KEY})
    env = gemini_env(agent_home, GOOGLE_GEMINI_BASE_URL=proxy.base, GEMINI_API_KEY=KEY)
    setup = [BIN, "setup", "gemini", "--base-url", proxy.base]
    said = subprocess.run([*setup, "--write"], env=env, capture_output=True, text=True, check=True)
    assert f"GOOGLE_GEMINI_BASE_URL={proxy.base}" in said.stdout
    assert json.loads(settings.read_text()) == {
        "ui": {"theme": "GitHub"},
        "security": {"auth": {"selectedType": "gemini-api-key"}},
    }
    try:
        done = gemini(env, agent_home)
    finally:
        stop(proxy)
    subprocess.run([BIN, "setup", "gemini", "--undo"], env=env, capture_output=True, check=True)
    assert settings.read_bytes() == original
    log = (tmp_path / "proxy.log").read_text()
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == f"The command printed: {TOOL_WORD}"
    # The shell tool ran: its output went back to the chat provider as the tool's result.
    asked = up.bodies("toolcall")
    results = [m for b in asked for m in b["messages"] if m["role"] == "tool"]
    assert any(TOOL_WORD in m["content"] for m in results)
    # The routing classifier's JSON call was answered (no retry: one call per turn).
    classifier = [b for b in asked if "response_format" in b]
    assert len(classifier) == 1
    assert classifier[0]["response_format"]["type"] == "json_schema"
    assert "NumericalClassifierStrategy failed" not in done.stderr
    # Every request went past the dead and the 401 provider.
    lines = [ln for ln in log.splitlines() if "POST /v1beta/models/" in ln]
    assert lines
    assert all(" 200 " in ln for ln in lines), lines
    assert any(":streamGenerateContent" in ln for ln in lines)
    assert "Traceback" not in log
    for secret in (PROVIDER_KEY, KEY):
        assert secret not in done.stdout + done.stderr + log


def test_gemini_cli_through_agent_reach_run(
    agent_config: dict[str, Any], agent_home: Path, tmp_path: Path, up: Upstream
) -> None:
    """Nothing points Gemini CLI anywhere, and the user's own settings ask for a Google login
    (which fails headless): `run` wins for its child and leaves those settings as they were."""
    own = agent_home / ".gemini"
    own.mkdir()
    settings = own / "settings.json"
    settings.write_text('{"security": {"auth": {"selectedType": "oauth-personal"}}, "x": 1}\n')
    (own / "GEMINI.md").write_text("Always be brief.\n")
    before = settings.read_bytes()
    config = tmp_path / "agent-reach.yaml"
    config.write_text(yaml.safe_dump(agent_config))
    env = gemini_env(agent_home, PROVIDER_KEY=PROVIDER_KEY, TMPDIR=str(tmp_path))
    project = agent_home / "project"  # in HOME itself, ~/.gemini would be the project's too
    project.mkdir()
    done = gemini(env, project, BIN, "--config", str(config), "run", "--")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == f"The command printed: {TOOL_WORD}"
    assert settings.read_bytes() == before
    assert not list(tmp_path.glob("agent-reach-run-*"))  # the run's private home is gone
    system = up.bodies("toolcall")[-1]["messages"][0]["content"]
    assert "Always be brief." in system  # the user's own GEMINI.md still reached the model
    assert PROVIDER_KEY not in done.stdout + done.stderr


def test_run_names_the_fix_when_gemini_finds_the_folder_untrusted(
    agent_config: dict[str, Any], agent_home: Path, tmp_path: Path
) -> None:
    """Issue 50, item 5: without `--skip-trust` (or the user's own trust), Gemini CLI exits 55
    in a folder it has not seen; `run` says how to trust it for one run, once."""
    config = tmp_path / "agent-reach.yaml"
    config.write_text(yaml.safe_dump(agent_config))
    env = gemini_env(agent_home, PROVIDER_KEY=PROVIDER_KEY)
    del env["GEMINI_CLI_TRUST_WORKSPACE"]
    project = agent_home / "project"
    project.mkdir()
    done = gemini(env, project, BIN, "--config", str(config), "run", "--")
    assert done.returncode == 55
    fix = "agent-reach: gemini exited 55: this folder is not trusted; `gemini --skip-trust …`"
    assert done.stderr.count(fix) == 1
