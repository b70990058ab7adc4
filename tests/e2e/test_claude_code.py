"""The real Claude Code (`claude -p`, pinned in scripts/ensure-agents.sh) through the proxy:
`agent-reach serve` with Claude Code pointed at it, and `agent-reach run` with nothing set up.

What Claude Code 2.1.197 sends is written down in docs/decisions.md ("Messages ingress").
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from ..agents import AGENT_CLIENT_KEY, agent, answered_since, claude_env
from ..fakes.upstream import (
    CLAUDE_TEXT,
    DEEPSEEK_MAX_TOKENS,
    TOOL_WORD,
    Upstream,
    cached_share,
    cut_in_a_tool_call,
    proxy_config,
    refused_url,
)
from .test_proxy import PROVIDER_KEY, Proxy, start, stop

pytestmark = pytest.mark.agents

BIN = str(Path(sys.executable).parent / "agent-reach")
PROMPT = "Run echo in the shell with the Bash tool and tell me what it printed."


def claude(env: dict[str, str], cwd: Path, *prefix: str) -> subprocess.CompletedProcess[str]:
    """`claude -p` of the prompt with its tool allowed and a JSON result (after `prefix`,
    e.g. an `agent-reach run`)."""
    args = [*prefix, str(agent("claude")), "-p", PROMPT, "--allowedTools", "Bash(echo:*)"]
    return with_json(args, env, cwd)


def with_json(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """A Claude Code command line (maybe after an `agent-reach run`), its result as JSON."""
    return subprocess.run(
        [*args, "--output-format", "json"],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def attempts(proxy: Proxy) -> dict[tuple[str, str], float]:
    """The proxy's attempt counters by (provider, reason)."""
    _, text = proxy.get("/metrics", {"x-api-key": AGENT_CLIENT_KEY})
    return {
        (s.labels["provider"], s.labels["reason"]): s.value
        for family in text_string_to_metric_families(text)
        if family.name == "agent_reach_attempts"
        for s in family.samples
        if s.name == "agent_reach_attempts_total"
    }


def served(
    config: dict[str, Any], tmp_path: Path, home: Path, up: Upstream
) -> tuple[subprocess.CompletedProcess[str], dict[tuple[str, str], float]]:
    """Claude Code against `agent-reach serve` with `config`; its run and the proxy's
    attempt counts (the proxy log checked for tracebacks and keys)."""
    proxy = start(config, tmp_path, up, env={"PROXY_KEYS": AGENT_CLIENT_KEY})
    env = claude_env(home, ANTHROPIC_BASE_URL=proxy.base, ANTHROPIC_API_KEY=AGENT_CLIENT_KEY)
    try:
        done = claude(env, home)
        counts = attempts(proxy)
    finally:
        stop(proxy)
    log = (tmp_path / "proxy.log").read_text()
    assert "Traceback" not in log
    for secret in (PROVIDER_KEY, AGENT_CLIENT_KEY):
        assert secret not in done.stdout + done.stderr + log
    return done, counts


def assert_tool_turn(
    done: subprocess.CompletedProcess[str], up: Upstream, scenario: str = "toolcall"
) -> None:
    """Claude Code ran the tool the chat provider (`scenario`) asked for and finished with
    its answer; the provider's last two requests were the turn's."""
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)
    assert result["result"] == f"The command printed: {TOOL_WORD}"
    assert result["num_turns"] == 2
    # The chat provider's usage (21 prompt, 9 completion tokens a turn) reached Claude Code.
    assert (result["usage"]["input_tokens"], result["usage"]["output_tokens"]) == (42, 18)
    *_, calls, results = up.bodies(scenario)
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
    # The second turn's body starts with the first one's bytes up to its last message, and
    # that is most of it (tools and system come first): a provider that caches by prefix
    # (DeepSeek, Kimi) serves it from its cache (issue 19, item 5).
    assert cached_share(calls, results) >= 0.9
    assert "Traceback" not in done.stderr
    assert PROVIDER_KEY not in done.stdout + done.stderr


def test_claude_code_tool_turn_after_a_dead_and_a_401_provider(
    agent_config: dict[str, Any], agent_home: Path, up: Upstream, tmp_path: Path
) -> None:
    done, counts = served(agent_config, tmp_path, agent_home, up)
    assert_tool_turn(done, up)
    # the first request walked the chain; the second, of the same session, went home at once
    # (issue 55: its `metadata.user_id` names the session)
    assert len(up.bodies("auth")) == 1
    assert counts[("dead", "connect_failed")] == 1
    assert counts[("auth", "auth_failed")] == 1
    assert counts[("toolcall", "ok")] == 2


def test_claude_codes_session_reaches_a_provider_that_routes_its_cache_by_a_key(
    agent_config: dict[str, Any], agent_home: Path, up: Upstream, tmp_path: Path
) -> None:
    """The answering provider routes its prompt cache by a key (`session_header`, xAI's, and
    `prompt_cache_key`, OpenAI's): both of the tool turn's requests carry the same key in each,
    after a dead and a 401 provider."""
    [answering] = [p for p in agent_config["providers"] if p["name"] == "toolcall"]
    answering.update(session_header="x-grok-conv-id", prompt_cache_key=True)
    done, _ = served(agent_config, tmp_path, agent_home, up)
    assert_tool_turn(done, up)
    sent = [r for r in up.received if r.scenario == "toolcall"][-2:]
    headers = {{k.lower(): v for k, v in r.headers.items()}.get("x-grok-conv-id") for r in sent}
    keys = {r.body.get("prompt_cache_key") for r in sent}
    assert len(headers) == len(keys) == 1
    assert None not in headers | keys


def test_claude_code_through_agent_reach_run(
    agent_config: dict[str, Any], agent_home: Path, up: Upstream, tmp_path: Path
) -> None:
    config = tmp_path / "agent-reach.yaml"
    config.write_text(yaml.safe_dump(agent_config))
    env = claude_env(agent_home, PROVIDER_KEY=PROVIDER_KEY)  # nothing points Claude Code anywhere
    done = claude(env, agent_home, BIN, "--config", str(config), "run", "--")
    assert_tool_turn(done, up)
    assert len(up.bodies("auth")) == 1  # the second request went home at once (its session)
    # What the run said on stderr: each turn's failover, and a summary when Claude Code ended.
    lines = [x for x in done.stderr.splitlines() if x.startswith("agent-reach: ")]
    assert [re.sub(r", \d+\.\d s$", "", x) for x in lines] == [
        "agent-reach: dead connect_failed (connection refused) → auth auth_failed"
        " (Incorrect API key provided: ***) → toolcall ok",
        "agent-reach: 2 requests, 1 failed over, 0 failed; answered by toolcall (2)",
    ]


@pytest.mark.parametrize("version", ["claude", "claude-newest"])
def test_run_lets_claude_code_discover_the_proxys_models(
    agent_config: dict[str, Any], agent_home: Path, up: Upstream, tmp_path: Path, version: str
) -> None:
    """Issue 50, item 1: through `run`, Claude Code's gateway model discovery (it asks
    `GET /v1/models?limit=1000` in Anthropic's shape and keeps the `claude`/`anthropic` ids)
    finds the `claude-deepseek` route, and a tool turn with that model goes down it."""
    agent_config["routes"] = {"claude-deepseek": ["dead", "toolcall"]}
    config = tmp_path / "agent-reach.yaml"
    config.write_text(yaml.safe_dump(agent_config))
    env = claude_env(agent_home, PROVIDER_KEY=PROVIDER_KEY)
    del env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"]  # it turns discovery off
    run = [BIN, "--config", str(config), "run", "--", str(agent(version)), "-p", PROMPT]
    args = [*run, "--model", "claude-deepseek", "--allowedTools", "Bash(echo:*)"]
    done = with_json(args, env, agent_home)
    assert_tool_turn(done, up)
    assert not up.bodies("auth")  # the route, not the default order
    cache = json.loads((agent_home / ".claude" / "cache" / "gateway-models.json").read_text())
    assert cache["models"] == [{"id": "claude-deepseek", "display_name": "claude-deepseek"}]


def test_the_newest_claude_codes_body_reaches_an_anthropic_endpoint(
    agent_config: dict[str, Any], agent_home: Path, up: Upstream, tmp_path: Path
) -> None:
    """Issue 50, item 4: Claude Code 2.1.332 through `run` with an Anthropic-compatible
    provider first: its request goes as it sent it (its thinking and context management
    included: none is refused), and the answer comes back."""
    agent_config["fallback_order"] = ["claude", "toolcall"]
    config = tmp_path / "agent-reach.yaml"
    config.write_text(yaml.safe_dump(agent_config))
    up.clear()
    run = [BIN, "--config", str(config), "run", "--", str(agent("claude-newest")), "-p", "hi"]
    done = with_json(run, claude_env(agent_home, PROVIDER_KEY=PROVIDER_KEY), agent_home)
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["result"] == CLAUDE_TEXT
    got = [r for r in up.received if r.scenario == "claude"][-1]
    assert not up.bodies("toolcall")  # answered natively, not failed over
    # What 2.1.332 sends (measured): each reached the endpoint as sent.
    assert got.body["thinking"] == {"type": "adaptive", "display": "omitted"}
    assert got.body["context_management"] == {
        "edits": [{"type": "clear_thinking_20251015", "keep": "all"}]
    }
    betas = got.headers["anthropic-beta"].split(",")
    assert {"thinking-token-count-2026-05-13", "advanced-tool-use-2025-11-20"} <= set(betas)


def test_claude_code_behind_a_provider_that_cuts_inside_a_tool_call(
    agent_home: Path, up: Upstream, tmp_path: Path
) -> None:
    """Issue 51: the held half call never reaches Claude Code; the next provider's turn does."""
    config = tmp_path / "agent-reach.yaml"
    config.write_text(yaml.safe_dump(cut_in_a_tool_call(up)))
    up.clear()
    env = claude_env(agent_home, PROVIDER_KEY=PROVIDER_KEY)
    done = claude(env, agent_home, BIN, "--config", str(config), "run", "--")
    assert_tool_turn(done, up)
    assert len(up.bodies("toolhalf")) == 2


def test_a_local_server_that_repeats_its_tool_call_ids(
    agent_home: Path, up: Upstream, tmp_path: Path
) -> None:
    """Issue 50, item 3: a provider that names every tool call `call_1` looped Claude Code
    (415 requests in 60 s); with ids made apart it runs the three commands and ends."""
    config = tmp_path / "agent-reach.yaml"
    local = up.provider("samecall", model_map={"*": "qwen2.5-coder"})
    config.write_text(yaml.safe_dump(proxy_config([local])))
    up.clear()
    run = [BIN, "--config", str(config), "run", "--", str(agent("claude"))]
    args = [*run, "-p", "Run echo three times.", "--allowedTools", "Bash(echo:*)"]
    done = with_json(
        [*args, "--max-turns", "10"], claude_env(agent_home, PROVIDER_KEY=PROVIDER_KEY), agent_home
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["result"] == "Ran 3 commands."
    asked = up.bodies("samecall")
    print(f"{len(asked)} requests for a three-command task")
    assert len([b for b in asked if b.get("tools")]) == 4  # three tool turns and the answer


def test_with_every_provider_down_claude_code_says_why_at_once(
    agent_home: Path, tmp_path: Path
) -> None:
    config = tmp_path / "agent-reach.yaml"
    dead = {"name": "dead", "endpoint": refused_url(), "model_map": {"*": "m"}}
    config.write_text(yaml.safe_dump({"state": "memory://", "providers": [dead]}))
    env = claude_env(agent_home)
    done = claude(env, agent_home, BIN, "--config", str(config), "run", "--")
    # The run's line on stderr at the first failure, and Claude Code shows the 502 itself
    # instead of retrying it (x-should-retry: false): one request, not a retry loop.
    assert done.returncode != 0
    assert "all providers failed (dead: connect_failed)" in done.stdout
    lines = [x for x in done.stderr.splitlines() if x.startswith("agent-reach: ")]
    # (its health check found it down first: passed over without the chat request, a skip)
    assert re.fullmatch(
        r"agent-reach: claude-\S+: no provider answered: dead skip\(connect_failed\)"
        r" \(connection refused\), \d\.\d s",
        lines[0],
    )
    assert lines[-1] == "agent-reach: 1 request, 0 failed over, 1 failed"


def test_run_wins_over_what_setup_wrote_and_undo_puts_it_back(
    agent_config: dict[str, Any], agent_home: Path, up: Upstream, tmp_path: Path
) -> None:
    config = tmp_path / "agent-reach.yaml"
    config.write_text(yaml.safe_dump(agent_config))
    settings = agent_home / ".claude" / "settings.json"
    settings.parent.mkdir()
    original = b'{"theme": "dark",\n "env": {"ANTHROPIC_AUTH_TOKEN": "user-token", "FOO": "1"}}'
    settings.write_bytes(original)
    env = claude_env(agent_home, PROVIDER_KEY=PROVIDER_KEY)
    dead = refused_url().removesuffix("/v1/chat/completions")
    setup = [BIN, "setup", "claude"]
    subprocess.run([*setup, "--write", "--base-url", dead], env=env, check=True)
    done = claude(env, agent_home, BIN, "--config", str(config), "run", "--")
    assert_tool_turn(done, up)  # through the run's own proxy, not the written dead URL
    assert (
        f"agent-reach: {settings} points claude at {dead}; this run overrides it (--settings)"
        in (done.stderr)
    )
    subprocess.run([*setup, "--undo"], env=env, check=True, capture_output=True)
    assert settings.read_bytes() == original


@pytest.mark.parametrize("configured", [True, False], ids=["cap-configured", "cap-learned"])
def test_claude_code_tool_turn_through_a_deepseek_that_refuses_its_max_tokens(
    agent_config: dict[str, Any],
    agent_home: Path,
    up: Upstream,
    tmp_path: Path,
    configured: bool,
) -> None:
    """Claude Code asks for more output tokens than `deepseek-chat` allows; DeepSeek answers
    its exact 400 to anything above 8192. With `max_output_tokens: 8192` every request goes
    out clamped; with no cap the first refusal is read, retried once at 8192, and remembered:
    the turn's second request is clamped up front."""
    deepseek = up.provider("deepseek", model_map={"*": "deepseek-chat"})
    if configured:
        deepseek["max_output_tokens"] = DEEPSEEK_MAX_TOKENS
    dead = {"name": "dead", "endpoint": refused_url()}
    config = {**agent_config, "providers": [dead, deepseek], "fallback_order": ["dead", "deepseek"]}
    done, counts = served(config, tmp_path, agent_home, up)
    assert_tool_turn(done, up, "deepseek")
    asked, *sent = [b["max_tokens"] for b in up.bodies("deepseek")]
    if configured:
        assert [asked, *sent] == [DEEPSEEK_MAX_TOKENS] * 2
        assert ("deepseek", "bad_request") not in counts
    else:
        assert asked > DEEPSEEK_MAX_TOKENS  # what Claude Code asked for, refused once
        assert sent == [DEEPSEEK_MAX_TOKENS] * 2  # the retry, then the next request up front
        assert counts[("deepseek", "bad_request")] == 1
    assert counts[("deepseek", "ok")] == 2
    assert counts[("dead", "connect_failed")] == 1  # the second request went home at once


def test_claude_code_reaches_an_anthropic_provider_natively(
    agent_config: dict[str, Any], agent_home: Path, up: Upstream, tmp_path: Path
) -> None:
    config = {**agent_config, "fallback_order": ["dead", "auth", "claude"]}
    done, counts = served(config, tmp_path, agent_home, up)
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["result"] == CLAUDE_TEXT
    [got] = [r for r in up.received if r.scenario == "claude"]
    # As Claude Code sent it: its beta header, thinking, cache_control, context management.
    assert "claude-code-20250219" in got.headers["anthropic-beta"]
    assert got.headers["x-api-key"] == PROVIDER_KEY
    assert "thinking" in got.body
    assert "context_management" in got.body
    assert any("cache_control" in block for block in got.body["system"])
    assert counts[("claude", "ok")] == 1


def test_claude_code_keeps_its_home_through_a_failover_and_back(
    up: Upstream, agent_home: Path, tmp_path: Path
) -> None:
    """Issue 55: turns of one Claude Code session (`claude -p`, then `--continue`) under
    `balance: weighted` over three chat providers: the first turn's provider is its home; the
    second turn, with home failing, fails over; the next three are home again (by weight
    alone, their six requests would all go there once in 729 runs)."""
    up.switch = "toolcall"
    cfg = proxy_config(
        [
            {"name": "home", "endpoint": up.url("switch"), "api_key_env": "PROVIDER_KEY"},
            {"name": "other", "endpoint": up.url("toolcall"), "api_key_env": "PROVIDER_KEY"},
            {"name": "third", "endpoint": up.url("toolcall"), "api_key_env": "PROVIDER_KEY"},
        ],
        balance="weighted",
        server={"api_keys_env": "PROXY_KEYS"},
    )
    proxy = start(cfg, tmp_path, up, env={"PROXY_KEYS": AGENT_CLIENT_KEY})
    env = claude_env(agent_home, ANTHROPIC_BASE_URL=proxy.base, ANTHROPIC_API_KEY=AGENT_CLIENT_KEY)
    claude_bin = str(agent("claude"))
    allowed = ("--allowedTools", "Bash(echo:*)")
    try:
        first_env = {**env, "ANTHROPIC_CUSTOM_HEADERS": "X-Agent-Reach-Route: home"}
        first = with_json([claude_bin, "-p", PROMPT, *allowed], first_env, agent_home)
        turns = [_answered(proxy)]
        up.switch = "server"
        again = [claude_bin, "-p", "--continue", PROMPT, *allowed]
        second = with_json(again, env, agent_home)
        turns.append(_answered(proxy))
        up.switch = "toolcall"
        later = []
        for _ in range(3):
            later.append(with_json(again, env, agent_home))
            turns.append(_answered(proxy))
    finally:
        stop(proxy)
    for done in (first, second, *later):
        assert done.returncode == 0, done.stdout + done.stderr
    print(f"who answered each turn's requests: {turns}")
    assert set(turns[0]) == {"home"}
    assert set(turns[1]) & {"other", "third"}  # home failed: the turn failed over
    assert [set(t) for t in turns[2:]] == [{"home"}] * 3  # home again, under weighted 1:1:1


def _answered(proxy: Proxy) -> list[str]:
    """The providers that answered the Messages requests of the turn since the last call."""
    log = Path(proxy.proc.args[2]).parent / "proxy.log"  # type: ignore[index]
    seen = getattr(proxy, "_seen", 0)
    got = answered_since(log, "/v1/messages", seen)
    proxy._seen = seen + len(got)  # type: ignore[attr-defined]
    return got
