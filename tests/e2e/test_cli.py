"""The `agent-reach` command as a user runs it: a subprocess, against real local servers."""

from __future__ import annotations

import atexit
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from ..conftest import CHUNK, COMPLETION, assert_valid
from ..fakes.upstream import ECHOED_KEY_PREFIX, Upstream, refused_url

BIN = str(Path(sys.executable).parent / "agent-reach")
KEY = "sk-live-cli-4f1d2c3b5a697887-TOPSECRET"
HOME = tempfile.mkdtemp(prefix="agent-reach-home-")  # each process that imports this file
atexit.register(shutil.rmtree, HOME, ignore_errors=True)


def run(
    *args: str,
    config: Path | None = None,
    stdin: str | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 30,
) -> subprocess.CompletedProcess[str]:
    cmd = [BIN]
    if config is not None:
        cmd += ["--config", str(config)]
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_REACH")}
    full_env.update({"CLI_KEY": KEY, "HOME": HOME}, **(env or {}))
    return subprocess.run(
        [*cmd, *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
        check=False,
    )


def config_file(tmp_path: Path, *providers: dict[str, Any], **top: Any) -> Path:
    data = {
        "version": "0.3.2",
        "health": {"mode": "off"},
        "state": f"sqlite:///{tmp_path}/state.db",  # each test its own, shared by its runs
        # The simulated providers take any model, or none: `chat -p hi` needs no --model; each
        # is tried once (the default's quick retry: tests/e2e/test_defaults.py).
        "defaults": {"model_map": {"*": ""}, "retries": 0},
        "continue_on_cut": False,  # a cut is the client's error (the default: test_defaults.py)
        "providers": list(providers),
        **top,
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def p(name: str, url: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "endpoint": url, **fields}


def no_secrets(result: subprocess.CompletedProcess[str]) -> None:
    assert KEY not in result.stdout
    assert KEY not in result.stderr


def test_chat_prints_the_answer(up: Upstream, tmp_path: Path) -> None:
    cfg = config_file(tmp_path, p("a", up.url("ok")))
    result = run("chat", "--prompt", "hi", config=cfg)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "hello from ok\n"


def test_prompt_from_stdin_and_flags(up: Upstream, tmp_path: Path) -> None:
    cfg = config_file(tmp_path, p("a", up.url("ok"), api_key_env="CLI_KEY"))
    result = run(
        "chat",
        "--model",
        "gpt-test",
        "--system",
        "be brief",
        "--max-tokens",
        "20",
        "--temperature",
        "0.5",
        config=cfg,
        stdin="from stdin\n",
    )
    assert result.returncode == 0, result.stderr
    body = up.bodies("ok")[-1]
    assert body["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "from stdin"},
    ]
    assert (body["model"], body["max_tokens"], body["temperature"]) == ("gpt-test", 20, 0.5)


# Each reason of protocol §5 that the engine produces, through the CLI, with the backup answering.
REASONS = [
    ("auth", "auth_failed", "(401,"),
    ("ratelimit", "rate_limited", "(429,"),
    ("server", "server_error", "(500,"),
    ("badreq", "bad_request", "(400,"),
    ("html", "schema_mismatch", "HTML page"),
    ("brokenjson", "schema_mismatch", "invalid JSON"),
    ("error200", "schema_mismatch", "error in 200 body"),
    ("model404", "model_unavailable", "(404,"),
]


@pytest.mark.parametrize(("scenario", "reason", "detail"), REASONS)
def test_verbose_trace_for_each_failure(
    up: Upstream, tmp_path: Path, scenario: str, reason: str, detail: str
) -> None:
    cfg = config_file(
        tmp_path,
        p("primary", up.url(scenario), api_key_env="CLI_KEY"),
        p("backup", up.url("backup")),
    )
    result = run("chat", "--verbose", "--prompt", "hi", config=cfg)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "hello from backup\n"
    lines = result.stderr.splitlines()
    assert lines[0].startswith(f"Connecting to primary… {reason} ")
    assert detail in lines[0]
    assert lines[1].startswith("Fallback to backup, success! (")
    no_secrets(result)


def test_connect_failed_and_timeout(up: Upstream, tmp_path: Path) -> None:
    cfg = config_file(
        tmp_path,
        p("dead", refused_url(), timeout={"connect": 500, "read": 20000}),
        p("slow", up.url("hang"), timeout={"connect": 500, "read": 300}),
        p("backup", up.url("backup")),
    )
    start = time.perf_counter()
    result = run("chat", "-v", "-p", "hi", config=cfg)
    assert time.perf_counter() - start < 10
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert lines[0].startswith("Connecting to dead… connect_failed (")
    assert "connection refused" in lines[0]
    assert lines[1].startswith("Fallback to slow… timeout (")
    assert lines[2].startswith("Fallback to backup, success!")


def test_unhealthy_and_circuit_and_missing_key(up: Upstream, tmp_path: Path) -> None:
    cfg = config_file(
        tmp_path,
        p("nokey", up.url("ok"), api_key_env="SURELY_NOT_SET_VAR"),
        p("sick", up.url("html-health")),
        p("backup", up.url("backup")),
        health={"mode": "cached"},
    )
    result = run("chat", "-v", "-p", "hi", config=cfg)
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert lines[0] == "Connecting to nokey… auth_failed (0 ms) — SURELY_NOT_SET_VAR is not set"
    assert lines[1].startswith("Skipping sick: unhealthy — health check failed")
    assert "not JSON (text/html)" in lines[1]


def test_rate_limited_with_retry_after_then_circuit_open(up: Upstream, tmp_path: Path) -> None:
    # Circuits live in the state file, so the second CLI run remembers the first one's 429.
    cfg = config_file(tmp_path, p("rl", up.url("ratelimit")), p("backup", up.url("backup")))
    first = run("chat", "--json", "-p", "hi", config=cfg)
    assert first.returncode == 0, first.stderr
    trace = json.loads(first.stdout)["trace"]
    assert (trace[0]["reason"], trace[0]["status"]) == ("rate_limited", 429)
    second = run("chat", "-v", "-p", "hi", config=cfg)
    assert second.returncode == 0, second.stderr
    lines = second.stderr.splitlines()
    assert lines[0].startswith("Skipping rl: circuit_open — open after rate_limited, ")
    assert lines[0].endswith(" s left")
    left = int(lines[0].rsplit(", ", 1)[1].split()[0])
    assert 4 <= left <= 7  # Retry-After: 7
    assert lines[1].startswith("Fallback to backup, success!")
    assert len(up.bodies("ratelimit")) == 1  # the second run sent it nothing


def test_circuit_opens_across_runs_and_last_resort(up: Upstream, tmp_path: Path) -> None:
    cfg = config_file(
        tmp_path,
        p("flaky", up.url("switch")),
        p("dead", refused_url()),
        circuit={"failures": 2, "cooldown_s": 60},
    )
    up.switch = "server"
    for _ in range(2):
        assert run("chat", "-p", "hi", config=cfg).returncode == 1
    up.switch = "ok"
    result = run("chat", "-v", "-p", "hi", config=cfg)
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert lines[0].startswith("Skipping flaky: circuit_open — open after server_error")
    assert lines[1].startswith("Skipping dead: circuit_open — open after connect_failed")
    assert lines[2].startswith("Last resort: flaky… success!") or lines[2].startswith(
        "Last resort: flaky, success!"
    )
    assert result.stdout == "hello from ok\n"


def test_last_resort_and_all_failed_exit_1(up: Upstream, tmp_path: Path) -> None:
    cfg = config_file(
        tmp_path,
        p("a", up.url("auth"), api_key_env="CLI_KEY"),
        p("b", up.url("server")),
        p("sick", up.url("down-health")),
        health={"mode": "cached"},
    )
    result = run("chat", "-p", "hi", config=cfg)
    assert result.returncode == 1
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert lines[0] == "agent-reach: all providers failed"
    assert lines[1].startswith("  a: auth_failed (401,")
    assert ECHOED_KEY_PREFIX + "***" in lines[1]
    assert lines[2].startswith("  b: server_error (500,")
    assert lines[3].startswith("  sick: unhealthy")
    assert lines[4].startswith("  sick: server_error") or "[last resort]" in lines[4]
    assert "[last resort]" in lines[4]
    assert "Traceback" not in result.stderr
    no_secrets(result)


def test_json_output_is_response_plus_trace(up: Upstream, tmp_path: Path) -> None:
    cfg = config_file(
        tmp_path, p("dead", refused_url()), p("o", up.url("ollama", "ollama"), format="ollama")
    )
    result = run("chat", "--json", "-p", "hi", "--model", "qwen2:72b", config=cfg)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["provider"] == "o"
    assert_valid(COMPLETION, out["response"])
    assert [a["reason"] for a in out["trace"]] == ["connect_failed", "ok"]
    assert out["response"]["usage"]["total_tokens"] == 324


def test_stream_prints_tokens_and_fails_over_before_first_chunk(
    up: Upstream, tmp_path: Path
) -> None:
    cfg = config_file(tmp_path, p("bad", up.url("streamerr")), p("good", up.url("backup")))
    result = run("chat", "--stream", "-v", "-p", "hi", config=cfg)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "hello from ok\n"
    assert "Connecting to bad… server_error" in result.stderr
    json_result = run("chat", "--stream", "--json", "-p", "hi", config=cfg)
    assert json_result.returncode == 0
    chunks = [json.loads(line) for line in json_result.stdout.splitlines()]
    assert len(chunks) >= 3
    for chunk in chunks:
        assert_valid(CHUNK, chunk)


def test_stream_cut_mid_answer_is_visible(up: Upstream, tmp_path: Path) -> None:
    cfg = config_file(tmp_path, p("cut", up.url("streamcut")), p("good", up.url("backup")))
    result = run("chat", "--stream", "-p", "hi", config=cfg)
    assert result.returncode == 1
    assert result.stdout.startswith("partial answer")
    assert "cut failed mid-stream: server_error" in result.stderr
    assert "  cut: server_error" in result.stderr
    assert "Traceback" not in result.stderr


def test_debug_dumps_raw_answer_and_config_without_secrets(up: Upstream, tmp_path: Path) -> None:
    cfg = config_file(
        tmp_path,
        p("a", up.url("auth"), api_key_env="CLI_KEY", extra_body={"user": "x"}),
        p("b", up.url("backup")),
    )
    result = run("chat", "--debug", "-p", "hi", config=cfg)
    assert result.returncode == 0, result.stderr
    err = result.stderr
    assert "raw answer from a:" in err
    assert ECHOED_KEY_PREFIX + "***" in err  # the provider echoed the key; we show ***
    assert "config of a:" in err
    assert '"api_key_env": "CLI_KEY"' in err
    assert '"api_key": "***"' in err
    no_secrets(result)


def test_debug_mode_in_the_config_shows_what_broke_in_the_verbose_trace(
    up: Upstream, tmp_path: Path
) -> None:
    debug = {"debug_mode": True}
    cfg = config_file(
        tmp_path,
        p("html", up.url("html"), api_key_env="CLI_KEY", schema_compatibility=debug),
        p("down", up.url("server"), schema_compatibility=debug),  # not one of its reasons
        p("quiet", up.url("brokenjson")),  # no debug_mode
        p("b", up.url("backup")),
    )
    result = run("chat", "--verbose", "-p", "hi", config=cfg)
    assert result.returncode == 0, result.stderr
    err = result.stderr
    assert "raw answer from html:" in err
    assert "<html>" in err.lower()
    assert "config of html:" in err
    assert '"api_key": "***"' in err
    assert "raw answer from down" not in err
    assert "raw answer from quiet" not in err
    no_secrets(result)


def test_json_failure_has_no_secrets(up: Upstream, tmp_path: Path) -> None:
    cfg = config_file(tmp_path, p("a", up.url("auth"), api_key_env="CLI_KEY"))
    result = run("chat", "--json", "--debug", "--verbose", "-p", "hi", config=cfg)
    assert result.returncode == 1
    no_secrets(result)


@pytest.mark.parametrize(
    ("args", "stdin", "code", "message"),
    [
        (["chat"], "", 2, "the prompt is empty"),
        (["chat", "-p", "hi", "--route", "nowhere"], None, 2, "neither a route nor a provider"),
        (["chat", "-p", "hi", "--temperature", "9"], None, 2, "Invalid value"),
        (["nosuchcommand"], None, 2, "No such command"),
    ],
)
def test_usage_errors_exit_2(
    up: Upstream, tmp_path: Path, args: list[str], stdin: str | None, code: int, message: str
) -> None:
    cfg = config_file(tmp_path, p("a", up.url("ok")))
    result = run(*args, config=cfg, stdin=stdin)
    assert result.returncode == code
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_bad_config_exits_2_naming_file_provider_field(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("providers:\n  - name: p1\n    endpoint: http://h/x\n    timout: {read: 1}\n")
    for args in (["chat", "-p", "hi"], ["check"], ["config", "validate"]):
        result = run(*args, config=path)
        assert result.returncode == 2, args
        assert str(path) in result.stderr
        assert "provider 'p1'" in result.stderr
        assert "did you mean 'timeout'" in result.stderr
        assert "Traceback" not in result.stderr
    missing = run("chat", "-p", "hi", env={"AGENT_REACH_CONFIG": str(tmp_path / "none.yaml")})
    assert missing.returncode == 2
    assert "no config file" in missing.stderr


def test_config_validate_and_schema(tmp_path: Path) -> None:
    seed = Path(__file__).parents[2] / "examples" / "seed-config.yaml"
    result = run("config", "validate", str(seed))
    assert result.returncode == 0, result.stderr
    assert "ok, 3 provider(s)" in result.stdout
    schema = json.loads(run("config", "schema").stdout)
    assert "providers" in schema["properties"]
    from jsonschema import Draft202012Validator

    data = yaml.safe_load(seed.read_text())
    assert not list(Draft202012Validator(schema).iter_errors(data))


def test_check_says_a_circuit_is_open_and_the_provider_not_usable(
    up: Upstream, tmp_path: Path
) -> None:
    cfg = config_file(
        tmp_path,
        p("auth", up.url("auth"), health_check=""),  # no health check: a TCP connect only
        p("good", up.url("ok")),
        circuit={"auth_cooldown_s": 300},
    )
    assert (
        run("chat", "-p", "hi", config=cfg).returncode == 0
    )  # auth answers 401: its circuit opens
    rows = {r["provider"]: r for r in json.loads(run("check", "--json", config=cfg).stdout)}
    auth = rows["auth"]
    assert (auth["reachable"], auth["usable"], auth["health"]) == (True, False, "none")
    assert auth["circuit"]["state"] == "open"
    assert auth["circuit"]["cause"] == "auth_failed"
    assert re.fullmatch(
        r"a TCP connect only, its key not tried; circuit open after auth_failed, \d+ s left",
        auth["detail"],
    )
    assert (rows["good"]["usable"], rows["good"]["circuit"]["state"]) == (True, "closed")
    table = run("check", config=cfg)
    assert "circuit open after auth_failed" in table.stdout
    assert "1 of 2 provider(s) usable" in table.stderr


def test_check_says_no_ok_beside_an_open_circuit(up: Upstream, tmp_path: Path) -> None:
    """A provider whose health check answers but whose circuit is open: the table says it is
    skipped, not "ok" (a first day's stumble: "ok" beside an open circuit)."""
    cfg = config_file(
        tmp_path,
        p("down", up.url("server")),  # its health check (/models) answers; its chat is a 500
        p("good", up.url("ok")),
        circuit={"failures": 1, "cooldown_s": 300},
    )
    assert run("chat", "-p", "hi", config=cfg).returncode == 0
    rows = {r["provider"]: r for r in json.loads(run("check", "--json", config=cfg).stdout)}
    assert (rows["down"]["health"], rows["down"]["usable"]) == ("ok", False)
    table = run("check", config=cfg)
    line = next(x for x in table.stdout.splitlines() if "down" in x)
    assert "skipped: circuit open after server_error" in line, table.stdout
    assert "│ ok" not in line


def test_check_table_json_and_exit_codes(up: Upstream, tmp_path: Path) -> None:
    cfg = config_file(
        tmp_path,
        p("good", up.url("ok")),
        p("dead", refused_url()),
        p("sick", up.url("html-health")),
        p("nocheck", up.url("ok"), health_check=""),
        p("nokey", up.url("ok"), api_key_env="SURELY_NOT_SET_VAR"),
    )
    result = run("check", "--json", config=cfg)
    assert result.returncode == 0, result.stderr
    rows = {r["provider"]: r for r in json.loads(result.stdout)}
    for row in rows.values():
        assert set(row) == {
            "provider",
            "reachable",
            "usable",
            "health",
            "detail",
            "models",
            "latency_ms",
            "url",
            "status",
            "circuit",
            "via",
        }
        assert row["via"] is None  # direct: no proxy variable, no `proxy:`
        assert row["url"] is None or row["url"].startswith("http")
        assert row["status"] is None or isinstance(row["status"], int)
        assert isinstance(row["reachable"], bool)
        assert isinstance(row["usable"], bool)
        assert isinstance(row["health"], str)
        assert isinstance(row["detail"], str)
        assert isinstance(row["models"], list)
        assert row["latency_ms"] is None or isinstance(row["latency_ms"], int | float)
    good, dead, sick = rows["good"], rows["dead"], rows["sick"]
    assert (good["reachable"], good["usable"], good["health"], good["detail"]) == (
        True,
        True,
        "ok",
        "",
    )
    assert good["models"] == ["gpt-test", "m2"]
    assert good["latency_ms"] > 0
    assert (dead["reachable"], dead["usable"], dead["latency_ms"]) == (False, False, None)
    assert (dead["health"], dead["detail"]) == ("connect_failed", "connection refused")
    assert (sick["reachable"], sick["usable"], sick["health"]) == (True, False, "schema_mismatch")
    assert "text/html" in sick["detail"]
    assert (rows["nocheck"]["health"], rows["nocheck"]["usable"]) == ("none", True)
    assert rows["nocheck"]["detail"] == "a TCP connect only, its key not tried"
    assert (rows["nokey"]["health"], rows["nokey"]["detail"]) == (
        "auth_failed",
        "SURELY_NOT_SET_VAR is not set",
    )
    table = run("check", config=cfg)
    assert "connect_failed: connection refused" in table.stdout
    assert "no health check" in table.stdout
    model = run("check", "--json", "--model", "absent-model", config=cfg)
    rows = {r["provider"]: r for r in json.loads(model.stdout)}
    assert not rows["good"]["usable"]
    assert (rows["good"]["health"], rows["good"]["detail"]) == (
        "model_unavailable",
        "'absent-model' is not listed",
    )
    none_ok = config_file(tmp_path, p("dead", refused_url()))
    assert run("check", config=none_ok).returncode == 1


def test_demo_shows_a_real_failover() -> None:
    result = run("demo", env={"PATH": f"{Path(BIN).parent}:/usr/bin:/bin"}, timeout=60)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "Connecting to deepseek-official… connect_failed" in out
    assert "Fallback to zhipu-api… auth_failed (401," in out
    assert "Fallback to local-ollama, success!" in out
    assert "Quantum annealing" in out
    # The next command, as this shell can run it: agent-reach is on PATH here ...
    assert out.endswith(
        "Try it on your own providers: agent-reach chat --verbose --prompt 'Hello'\n"
    )
    # ... and not in a fresh shell after `make demo` (.venv/bin is not on its PATH).
    fresh = run("demo", env={"PATH": "/usr/bin:/bin"}, timeout=60)
    assert fresh.stdout.endswith(
        f"Try it on your own providers: {BIN} chat --verbose --prompt 'Hello'\n"
    )


def test_version_and_help() -> None:
    version = run("--version")
    assert version.returncode == 0
    assert version.stdout.startswith("agent-reach ")
    helptext = run("--help")
    for command in ("chat", "check", "config", "demo"):
        assert command in helptext.stdout


def test_help_does_not_load_the_http_stack() -> None:
    code = (
        "import sys; from agent_reach.cli import main\n"
        "heavy = [m for m in ('aiohttp', 'pydantic', 'yaml', 'rich', 'orjson') if m in sys.modules]\n"
        "print(','.join(heavy))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == ""


@pytest.mark.parametrize(
    ("fields", "meant"),
    [
        ({}, "http://127.0.0.1:8001/v1/chat/completions"),
        ({"format": "anthropic"}, "http://127.0.0.1:8001/v1/messages"),
    ],
)
def test_a_base_url_as_endpoint_is_a_config_error_naming_the_endpoint(
    tmp_path: Path, fields: dict[str, Any], meant: str
) -> None:
    cfg = config_file(tmp_path, p("local", "http://127.0.0.1:8001/v1", **fields))
    result = run("config", "validate", config=cfg)
    assert result.returncode == 2
    assert result.stderr == (
        f"agent-reach: config error: {cfg}: provider 'local' (providers[0]): endpoint"
        f" 'http://127.0.0.1:8001/v1' is a base URL; did you mean '{meant}'?\n"
    )


def test_embed_with_no_space_configured_says_how_to_configure_one(
    up: Upstream, tmp_path: Path
) -> None:
    """A first day's stumble: with no embedding space, `embed` said "none is configured" (and a
    chat request's `model_map` hint elsewhere); it says what to write, in both places."""
    cfg = config_file(tmp_path, p("good", up.url("ok")))
    for args in (("embed", "x"), ("embed", "-m", "text-embedding-3-small", "x")):
        done = run(*args, config=cfg)
        assert done.returncode == 2, done.stderr
        assert "embeddings: {spaces: {NAME: {dimensions: WIDTH}}}" in done.stderr
        assert "model_map" not in done.stderr
        assert "Traceback" not in done.stderr


def test_check_and_status_agree_about_a_used_up_budget(up: Upstream, tmp_path: Path) -> None:
    """A first day's stumble: `status` showed a budget used up while `check` called the
    provider usable; a request would skip it (`quota_exhausted`), and `check` now says so."""
    cfg = config_file(
        tmp_path,
        p("capped", up.url("ok"), metadata={"rate_limit": "1req/day"}),
        p("good", up.url("ok")),
    )
    assert run("chat", "-p", "hi", config=cfg).returncode == 0  # capped's one request today
    status = {r["provider"]: r for r in json.loads(run("status", "--json", config=cfg).stdout)}
    assert [q["ratio"] for q in status["capped"]["quota"]] == [1.0]
    rows = {r["provider"]: r for r in json.loads(run("check", "--json", config=cfg).stdout)}
    assert (rows["capped"]["usable"], rows["good"]["usable"]) == (False, True)
    assert "budget 1req/day used up (1/1)" in rows["capped"]["detail"]
    table = run("check", config=cfg)
    line = next(x for x in table.stdout.splitlines() if "capped" in x)
    assert "skipped: budget 1req/day used up" in line, table.stdout
