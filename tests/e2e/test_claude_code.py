"""The real Claude Code (`claude -p`, pinned in scripts/ensure-agents.sh) through the proxy.

What Claude Code 2.1.197 sends is written down in docs/decisions.md ("Messages ingress").
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from ..agents import AGENT_CLIENT_KEY, agent, claude_env
from ..upstream import CLAUDE_TEXT, TOOL_WORD, Upstream
from .test_proxy import PROVIDER_KEY, Proxy, start, stop

pytestmark = pytest.mark.slow
PROMPT = "Run echo in the shell with the Bash tool and tell me what it printed."


def claude(proxy: Proxy, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(agent("claude")), "-p", PROMPT, *args],
        env=claude_env(home, proxy.base, AGENT_CLIENT_KEY),
        cwd=home,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def attempts(proxy: Proxy) -> dict[tuple[str, str], float]:
    """The proxy's attempt counters by (provider, reason)."""
    _, text = proxy.get("/metrics", {"x-api-key": AGENT_CLIENT_KEY})
    out = {}
    for line in text.splitlines():
        if line.startswith("agent_reach_attempts_total{"):
            labels, value = line[len("agent_reach_attempts_total{") :].split("} ")
            fields = dict(kv.split("=", 1) for kv in labels.split(","))
            out[(fields["provider"].strip('"'), fields["reason"].strip('"'))] = float(value)
    return out


def run(
    config: dict[str, Any], tmp_path: Path, home: Path, up: Upstream, *args: str
) -> tuple[subprocess.CompletedProcess[str], dict[tuple[str, str], float]]:
    proxy = start(config, tmp_path, up, env={"PROXY_KEYS": AGENT_CLIENT_KEY})
    try:
        done = claude(proxy, home, *args)
        counts = attempts(proxy)
    finally:
        stop(proxy)
    log = (tmp_path / "proxy.log").read_text()
    assert "Traceback" not in log
    for secret in (PROVIDER_KEY, AGENT_CLIENT_KEY):
        assert secret not in done.stdout + done.stderr + log
    return done, counts


def test_claude_code_tool_turn_after_a_dead_and_a_401_provider(
    agent_config: dict[str, Any], agent_home: Path, up: Upstream, tmp_path: Path
) -> None:
    done, counts = run(
        agent_config,
        tmp_path,
        agent_home,
        up,
        "--allowedTools",
        "Bash(echo:*)",
        "--output-format",
        "json",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)
    assert result["result"] == f"The command printed: {TOOL_WORD}"
    assert result["num_turns"] == 2
    # The chat provider's usage (21 prompt, 9 completion tokens a turn) reached Claude Code.
    assert (result["usage"]["input_tokens"], result["usage"]["output_tokens"]) == (42, 18)
    calls, results = up.bodies("toolcall")
    assert calls["stream"] is True
    assert calls["model"] == "deepseek-chat"
    assert "Bash" in [t["function"]["name"] for t in calls["tools"]]
    # The tool really ran: its output came back as the tool result of the call.
    call = results["messages"][-2]["tool_calls"][0]
    assert call["function"]["name"] == "Bash"
    assert results["messages"][-1] == {
        "role": "tool",
        "tool_call_id": call["id"],
        "content": TOOL_WORD,
    }
    assert counts[("dead", "connect_failed")] == 2
    assert counts[("auth", "auth_failed")] == 2
    assert counts[("toolcall", "ok")] == 2


def test_claude_code_reaches_an_anthropic_provider_natively(
    agent_config: dict[str, Any], agent_home: Path, up: Upstream, tmp_path: Path
) -> None:
    config = {**agent_config, "fallback_order": ["dead", "auth", "claude"]}
    done, counts = run(config, tmp_path, agent_home, up)
    assert done.returncode == 0, done.stdout + done.stderr
    assert CLAUDE_TEXT in done.stdout
    [got] = [r for r in up.received if r.scenario == "claude"]
    # As Claude Code sent it: its beta header, thinking, cache_control, context management.
    assert "claude-code-20250219" in got.headers["anthropic-beta"]
    assert got.headers["x-api-key"] == PROVIDER_KEY
    assert "thinking" in got.body
    assert "context_management" in got.body
    assert any("cache_control" in block for block in got.body["system"])
    assert counts[("claude", "ok")] == 1
