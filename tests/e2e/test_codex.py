"""The real Codex CLI (from npm, pinned) completing a tool turn through the proxy's Responses
API, with a dead and a 401 provider in front of a chat-only upstream: configured by
`agent-reach setup codex --write`, and with no set-up at all through `agent-reach run`."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from ..agents import agent, answered_since
from ..fakes.upstream import TOOL_WORD, Upstream, cached_share, cut_in_a_tool_call, refused_url
from .test_proxy import PROVIDER_KEY, Proxy, start, stop

pytestmark = pytest.mark.agents

BIN = str(Path(sys.executable).parent / "agent-reach")
PROMPT = "Run echo in the shell and tell me what it printed."
ANSWER = f"The command printed: {TOOL_WORD}"


def agents_config(upstream: Upstream) -> dict[str, Any]:
    """A dead provider, a 401 one, then a chat-only upstream that drives a tool turn; the
    default order answers plain text only, the `agents` route goes through all three."""
    chain = ["dead", "auth", "toolcall"]
    return {
        "version": "0.3.2",
        "health": {"mode": "off"},
        "state": "memory://",
        "fallback_order": chain,
        "routes": {"agents": chain, "plain": ["ok"]},
        "providers": [
            {"name": "dead", "endpoint": refused_url()},
            {"name": "auth", "endpoint": upstream.url("auth"), "api_key_env": "PROVIDER_KEY"},
            {
                "name": "toolcall",
                "endpoint": upstream.url("toolcall"),
                "api_key_env": "PROVIDER_KEY",
                "model_map": {"*": "deepseek-chat"},
            },
            {"name": "ok", "endpoint": upstream.url("ok")},
        ],
    }


@pytest.fixture
def home(tmp_path: Path) -> dict[str, str]:
    """A HOME and CODEX_HOME where nothing was ever configured, and a work directory."""
    for name in ("home", "codex", "work"):
        (tmp_path / name).mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI", "AGENT_REACH"))}
    env.update(
        HOME=str(tmp_path / "home"),
        CODEX_HOME=str(tmp_path / "codex"),
        PROVIDER_KEY=PROVIDER_KEY,
    )
    return env


@pytest.fixture
def proxy(upstream: Upstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    upstream.clear()
    p = start(agents_config(upstream), tmp_path_factory.mktemp("codex-proxy"), upstream)
    yield p
    stop(p)


def codex_exec(
    env: dict[str, str], cwd: Path, *prefix: str, options: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    """`codex exec` of the prompt, as a user would type it (after `prefix`, e.g. a run; with
    `options`, e.g. `-c` settings)."""
    args = [*prefix, str(agent("codex")), "exec", *options]
    args += ["--dangerously-bypass-approvals-and-sandbox", "--skip-git-repo-check", PROMPT]
    return subprocess.run(
        args, check=False, cwd=cwd, env=env, capture_output=True, text=True, timeout=180
    )


def assert_tool_turn(
    result: subprocess.CompletedProcess[str], upstream: Upstream, first: bool = True
) -> None:
    """A whole tool turn through the chain; `first`: the 401 provider was tried (its circuit
    is open for a run after it)."""
    assert result.returncode == 0, result.stderr[-3000:]
    assert ANSWER in result.stdout
    calls = upstream.bodies("toolcall")
    assert len(calls) == 2  # the tool call, then the answer to its output
    assert calls[1]["messages"][-1]["role"] == "tool"
    assert TOOL_WORD in calls[1]["messages"][-1]["content"]
    assert {b["model"] for b in calls} == {"deepseek-chat"}  # the "*" mapping
    # The second turn starts with the bytes of the first up to its last message, and that is
    # most of it: a provider caching by prefix serves it from its cache (issue 19, item 5).
    assert cached_share(calls[0], calls[1]) >= 0.9
    assert bool(upstream.bodies("auth")) is first  # the 401 provider was tried first
    for text in (result.stdout, result.stderr):
        assert PROVIDER_KEY not in text
        assert "Traceback" not in text


def test_codex_configured_by_setup(proxy: Proxy, home: dict[str, str], tmp_path: Path) -> None:
    codex_home = Path(home["CODEX_HOME"])
    (codex_home / "config.toml").write_text('model_reasoning_effort = "low"\n')
    setup = subprocess.run(
        [BIN, "setup", "codex", "--base-url", proxy.base, "--write"],
        env=home,
        capture_output=True,
        text=True,
        check=True,
    )
    assert "config.toml" in setup.stdout
    assert "no model catalog for Codex (no config found)" in setup.stdout
    written = (codex_home / "config.toml").read_text()
    assert 'model_reasoning_effort = "low"' in written  # the user's settings are kept
    assert f'base_url = "{proxy.base}/v1"' in written
    env = {**home, "AGENT_REACH_API_KEY": "unused"}
    log = Path(proxy.proc.args[2]).parent / "proxy.log"  # type: ignore[index]
    before = log.read_text().count("GET /v1/responses 101")
    assert_tool_turn(codex_exec(env, tmp_path / "work"), proxy.upstream)
    assert log.read_text().count("GET /v1/responses 101") == before + 1  # one socket


def test_setup_writes_the_catalog_codex_reads(
    proxy: Proxy, home: dict[str, str], tmp_path: Path
) -> None:
    """With the proxy's config and a `codex` on PATH, `setup codex --write` writes the model
    catalog beside config.toml and names it there: `codex -m agents` gives no warning, and
    `--undo` takes both files back."""
    env = {**home, "PATH": f"{agent('codex').parent}:{home['PATH']}"}
    config = write_config(proxy.upstream, tmp_path)
    setup = [BIN, "--config", config, "setup", "codex", "--base-url", proxy.base]
    done = subprocess.run([*setup, "--write"], check=False, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    codex_home = Path(home["CODEX_HOME"])
    catalog = codex_home / "agent-reach-models.json"
    assert f"wrote {catalog}, Codex's models and the proxy's" in done.stdout
    assert f'model_catalog_json = "{catalog}"' in (codex_home / "config.toml").read_text()
    result = codex_exec(
        {**env, "AGENT_REACH_API_KEY": "unused"}, tmp_path / "work", options=("-m", "agents")
    )
    assert_tool_turn(result, proxy.upstream)
    assert "model: agents\n" in result.stderr
    assert "Model metadata" not in result.stderr
    undone = subprocess.run([*setup, "--undo"], check=True, env=env, capture_output=True, text=True)
    assert f"removed {catalog}, which `setup --write` created" in undone.stdout
    assert not catalog.exists()
    assert not (codex_home / "config.toml").exists()


def write_config(upstream: Upstream, tmp_path: Path) -> str:
    path = tmp_path / "agent-reach.yaml"
    path.write_text(yaml.safe_dump(agents_config(upstream)))
    return str(path)


def test_codex_through_agent_reach_run(
    upstream: Upstream, home: dict[str, str], tmp_path: Path
) -> None:
    upstream.clear()
    run = [BIN, "--config", write_config(upstream, tmp_path), "run", "--"]
    result = codex_exec(home, tmp_path / "work", *run)
    assert_tool_turn(result, upstream)
    # What the run said on stderr: each turn's failover, and a summary when Codex ended.
    lines = [x for x in result.stderr.splitlines() if x.startswith("agent-reach: ")]
    assert [re.sub(r", \d+\.\d s$", "", x) for x in lines] == [
        "agent-reach: auth is down (auth_failed: Incorrect API key provided: ***), skipped for 300 s",
        "agent-reach: dead connect_failed (connection refused) → auth auth_failed → toolcall ok",
        # the second request, of the same session (`session-id`), went home at once
        "agent-reach: 2 requests, 1 failed over, 0 failed; answered by toolcall (2)",
    ]


def test_run_names_the_proxys_models_in_codexs_catalog(
    upstream: Upstream, home: dict[str, str], tmp_path: Path
) -> None:
    """A route name as Codex's model (`-m agents`): the run's catalog lists it, so Codex
    gives no "fallback metadata" warning, and the tool turn goes down that route."""
    upstream.clear()
    run = [BIN, "--config", write_config(upstream, tmp_path), "run", "--"]
    result = codex_exec(home, tmp_path / "work", *run, options=("-m", "agents"))
    assert_tool_turn(result, upstream)
    assert "model: agents\n" in result.stderr
    assert "provider: agent_reach\n" in result.stderr  # its name is agent-reach, not OpenAI
    assert "Model metadata" not in result.stderr
    assert "fallback" not in result.stderr.lower()


def test_codex_behind_a_provider_that_cuts_inside_a_tool_call(
    upstream: Upstream, home: dict[str, str], tmp_path: Path
) -> None:
    """Issue 51: the held half call never reaches Codex; the next provider's turn does."""
    upstream.clear()
    config = tmp_path / "half.yaml"
    config.write_text(yaml.safe_dump(cut_in_a_tool_call(upstream)))
    result = codex_exec(home, tmp_path / "work", BIN, "--config", str(config), "run", "--")
    assert_tool_turn(result, upstream, first=False)
    assert len(upstream.bodies("toolhalf")) == 2  # both requests of the turn met the cut


def test_run_wins_over_what_setup_wrote(
    upstream: Upstream, home: dict[str, str], tmp_path: Path
) -> None:
    upstream.clear()
    dead = refused_url().removesuffix("/v1/chat/completions")
    subprocess.run([BIN, "setup", "codex", "--write", "--base-url", dead], env=home, check=True)
    run = [BIN, "--config", write_config(upstream, tmp_path), "run", "--"]
    result = codex_exec(home, tmp_path / "work", *run)
    assert_tool_turn(result, upstream)
    config = Path(home["CODEX_HOME"]) / "config.toml"
    assert (
        f"agent-reach: {config} points codex at {dead}/v1; this run overrides it (-c options)"
        in (result.stderr)
    )


def test_run_route_sends_every_request_down_it(
    upstream: Upstream, home: dict[str, str], tmp_path: Path
) -> None:
    upstream.clear()
    config = write_config(upstream, tmp_path)
    result = codex_exec(
        home, tmp_path / "work", BIN, "--config", config, "run", "-r", "plain", "--"
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "hello from ok" in result.stdout
    assert not upstream.bodies("toolcall")


def test_codex_prints_its_token_usage_from_a_chat_only_upstream(
    upstream: Upstream, home: dict[str, str], tmp_path: Path
) -> None:
    """The chat upstream sends usage only when asked (`stream_options.include_usage`): the
    Responses translation asks, `response.completed` carries it, and `codex exec` prints it
    (21 prompt and 9 completion tokens for each of the turn's two requests)."""
    upstream.clear()
    run = [BIN, "--config", write_config(upstream, tmp_path), "run", "--"]
    result = codex_exec(home, tmp_path / "work", *run)
    assert_tool_turn(result, upstream)
    assert all(b["stream_options"] == {"include_usage": True} for b in upstream.bodies("toolcall"))
    assert "tokens used\n60\n" in result.stderr


def provider_overrides(base: str, websockets: bool) -> list[str]:
    """`codex -c` options for a custom provider at `base`, with `supports_websockets` as given
    (Codex's default for its built-in OpenAI provider, and what users copy)."""
    table = (
        f'{{name="agent-reach", base_url="{base}/v1", env_key="OPENAI_API_KEY", '
        f'wire_api="responses", supports_websockets={str(websockets).lower()}}}'
    )
    return ["-c", f"model_providers.agent_reach={table}", "-c", "model_provider=agent_reach"]


def test_codex_asking_for_websockets_gets_one(
    proxy: Proxy, home: dict[str, str], tmp_path: Path
) -> None:
    """Codex opens a session with `GET /v1/responses` and `Upgrade: websocket` (issue 52: the
    Responses WebSocket face takes it): with `supports_websockets` the tool turn goes over one
    upgraded connection (a 101, its turns `WS` lines, no POST); without, over HTTP."""
    log = Path(proxy.proc.args[2]).parent / "proxy.log"  # type: ignore[index]
    env = {**home, "OPENAI_API_KEY": "unused"}
    took: dict[bool, float] = {}
    for websockets in (False, True):
        proxy.upstream.clear()
        before = log.read_text().splitlines()
        started = time.monotonic()
        options = tuple(provider_overrides(proxy.base, websockets))
        result = codex_exec(env, tmp_path / "work", options=options)
        took[websockets] = time.monotonic() - started
        assert_tool_turn(result, proxy.upstream, first=not websockets)
        lines = log.read_text().splitlines()[len(before) :]
        upgrades = [x for x in lines if "GET /v1/responses" in x]
        posts = [x for x in lines if "POST /v1/responses" in x]
        turns = [x for x in lines if "WS /v1/responses 200" in x and "provider=toolcall" in x]
        if websockets:
            assert [" 101 " in x for x in upgrades] == [True], upgrades
            assert (len(turns), posts) == (2, []), lines
        else:
            assert (upgrades, turns, len(posts)) == ([], [], 2), lines
    print(f"codex exec: {took[False]:.1f} s over HTTP, {took[True]:.1f} s over WebSocket")


def failed_turn(
    home: dict[str, str], tmp_path: Path, providers: list[dict[str, Any]]
) -> subprocess.CompletedProcess[str]:
    """`codex exec` through `run` with `providers`, none of which can answer: it must end with
    an error within 30 s (the time is printed)."""
    config = {"version": "0.3.2", "health": {"mode": "off"}, "state": "memory://"}
    path = tmp_path / "agent-reach.yaml"
    path.write_text(yaml.safe_dump({**config, "providers": providers}))
    started = time.monotonic()
    result = codex_exec(home, tmp_path / "work", BIN, "--config", str(path), "run", "--")
    took = time.monotonic() - started
    print(f"codex exec ended in {took:.1f} s (exit {result.returncode})")
    assert result.returncode != 0, (result.stdout + result.stderr)[-2000:]
    assert took < 30, took
    return result


def test_codex_stops_at_once_when_every_provider_is_out_of_quota(
    upstream: Upstream, home: dict[str, str], tmp_path: Path
) -> None:
    """Issue 49, item 2: a dead provider, a used-up coding plan (Zhipu's 429 1308, an hour to
    its reset), a used-up balance (DeepSeek's 402) and Kimi's spent weekly window (a 403): the
    Responses face answers OpenAI's `usage_limit_reached` with `resets_at`, which Codex prints
    and stops on (it retried a plain 429 with `Retry-After`: 30 requests, 25 s)."""
    upstream.clear()
    upstream.reopens_at = time.time() + 3600
    providers = [
        {"name": "dead", "endpoint": refused_url()},
        {"name": "plan", "endpoint": upstream.url("plan")},
        {"name": "balance", "endpoint": upstream.url("balance")},
        {"name": "kimi", "endpoint": upstream.url("kimiweek")},
    ]
    result = failed_turn(home, tmp_path, providers)
    said = result.stdout + result.stderr
    assert "usage limit" in said.lower(), said[-2000:]


def test_codex_stops_soon_when_every_provider_is_dead(home: dict[str, str], tmp_path: Path) -> None:
    """Issue 49, item 2: every provider refusing connections. `run` sets Codex's own retries
    to one of each kind (the proxy has tried every provider already), so the turn ends in
    seconds with the error (it took 25 s and 30 requests: 5 tries of 6 streams)."""
    providers = [{"name": f"dead{i}", "endpoint": refused_url()} for i in range(2)]
    result = failed_turn(home, tmp_path, providers)
    assert "all providers failed" in result.stdout + result.stderr
    summary = [x for x in result.stderr.splitlines() if re.match(r"agent-reach: \d+ request", x)]
    # over the socket first, whose 502 error event makes Codex 0.171 fall back to HTTP ("Falling
    # back from WebSockets to HTTPS transport"), then as over HTTP alone (4): 6 in all
    assert summary == ["agent-reach: 6 requests, 0 failed over, 6 failed"], summary
    assert "Falling back from WebSockets" in result.stderr


def test_codex_keeps_its_home_through_a_failover_and_back(
    upstream: Upstream, home: dict[str, str], tmp_path: Path
) -> None:
    """Issue 55: turns of one Codex session (`codex exec`, then `exec resume --last`) under
    `balance: weighted` over three chat providers: the first turn's provider is its home; the
    second turn, with home failing, fails over; the next three are home again (by weight
    alone, their six requests would all go there once in 729 runs)."""
    upstream.clear()
    upstream.switch = "toolcall"
    cfg = {
        "version": "0.3.2",
        "health": {"mode": "off"},
        "state": "memory://",
        "balance": "weighted",
        "circuit": {"failures": 1000, "cooldown_s": 0},
        "defaults": {"retries": 0, "model_map": {"*": "deepseek-chat"}},
        "providers": [
            {"name": "home", "endpoint": upstream.url("switch"), "api_key_env": "PROVIDER_KEY"},
            {"name": "other", "endpoint": upstream.url("toolcall"), "api_key_env": "PROVIDER_KEY"},
            {"name": "third", "endpoint": upstream.url("toolcall"), "api_key_env": "PROVIDER_KEY"},
        ],
    }
    proxy = start(cfg, tmp_path, upstream)
    env = {**home, "OPENAI_API_KEY": "unused"}
    work = tmp_path / "work"
    options = tuple(provider_overrides(proxy.base, False))
    routed = (
        *options,
        "-c",
        'model_providers.agent_reach.http_headers={"X-Agent-Reach-Route"="home"}',
    )
    log = tmp_path / "proxy.log"
    turns: list[list[str]] = []

    def answered() -> list[str]:
        return answered_since(log, "/v1/responses", sum(len(t) for t in turns))

    try:
        runs = [codex_exec(env, work, options=routed)]
        turns.append(answered())
        upstream.switch = "server"
        resume = [str(agent("codex")), "exec", "resume", "--last", *options]
        resume += ["--dangerously-bypass-approvals-and-sandbox", "--skip-git-repo-check", PROMPT]

        def again() -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                resume, check=False, cwd=work, env=env, capture_output=True, text=True, timeout=180
            )

        runs.append(again())
        turns.append(answered())
        upstream.switch = "toolcall"
        for _ in range(3):
            runs.append(again())
            turns.append(answered())
    finally:
        stop(proxy)
    for done in runs:
        assert done.returncode == 0, done.stderr[-3000:]
    print(f"who answered each turn's requests: {turns}")
    assert set(turns[0]) == {"home"}
    assert set(turns[1]) & {"other", "third"}  # home failed: the turn failed over
    assert [set(t) for t in turns[2:]] == [{"home"}] * 3
