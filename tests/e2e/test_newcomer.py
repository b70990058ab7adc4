"""What a new user tripped over (issue 11), each as the CLI subprocess a user runs, against
simulated providers on 127.0.0.1."""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import yaml

from agent_reach.version import PROTOCOL_VERSION, __version__

from ..fakes.upstream import Upstream, refused_url
from .test_cli import config_file, no_secrets, p, run

# -- 1. `--config` after the subcommand --------------------------------------------------------


def test_config_is_accepted_after_the_subcommand(up: Upstream, tmp_path: Path) -> None:
    good = config_file(tmp_path, p("a", up.url("ok")))
    chat = run("chat", "--config", str(good), "-p", "hi")
    assert chat.returncode == 0, chat.stderr
    assert chat.stdout == "hello from ok\n"
    for args in (
        ["check", "--config", str(good), "--json"],
        ["config", "validate", "--config", str(good)],
        ["config", "--config", str(good), "validate"],
        ["status", "--json", f"--config={good}"],
        ["drill", "--dry-run", "--config", str(good)],
    ):
        result = run(*args)
        assert result.returncode == 0, (args, result.stderr)
    bad = tmp_path / "missing.yaml"
    # given twice, the one after the subcommand wins; the variable is still read
    assert run("--config", str(bad), "chat", "--config", str(good), "-p", "hi").returncode == 0
    assert run("chat", "-p", "hi", env={"AGENT_REACH_CONFIG": str(good)}).returncode == 0
    missing = run("chat", "-p", "hi", "--config", str(bad))
    assert missing.returncode == 2
    assert f"no config file at {bad} (given with --config)" in missing.stderr


# -- 2. `--json` is JSON, whatever happens -----------------------------------------------------


def test_chat_json_when_every_provider_failed(up: Upstream, tmp_path: Path) -> None:
    cfg = config_file(tmp_path, p("dead", refused_url()), p("broken", up.url("server")))
    result = run("chat", "--json", "-p", "hi", config=cfg)
    assert result.returncode == 1
    out = json.loads(result.stdout)
    assert out["error"] == {
        "message": "all providers failed",
        "type": "all_providers_failed",
        "status": 502,
    }
    assert [(a["provider"], a["reason"], a["status"]) for a in out["attempts"]] == [
        ("dead", "connect_failed", None),
        ("broken", "server_error", 500),
    ]
    assert "agent-reach: all providers failed" in result.stderr  # people still read stderr

    streamed = run("chat", "--stream", "--json", "-p", "hi", config=cfg)
    assert streamed.returncode == 1
    (line,) = streamed.stdout.splitlines()  # NDJSON: the error is one line too
    assert json.loads(line)["error"]["type"] == "all_providers_failed"

    cut = config_file(tmp_path, p("cut", up.url("streamcut")))
    interrupted = run("chat", "--stream", "--json", "-p", "hi", config=cut)
    assert interrupted.returncode == 1
    *chunks, last = [json.loads(line) for line in interrupted.stdout.splitlines()]
    assert chunks
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert last["error"]["type"] == "stream_interrupted"
    assert [a["reason"] for a in last["attempts"]] == ["ok", "server_error"]


def test_json_errors_for_config_and_request_mistakes(up: Upstream, tmp_path: Path) -> None:
    cfg = config_file(tmp_path, p("a", up.url("ok")))
    for args, code, kind in [
        (
            ["chat", "--json", "-p", "hi", "--config", str(tmp_path / "none.yaml")],
            2,
            "config_error",
        ),
        (["check", "--json", "--config", str(tmp_path / "none.yaml")], 2, "config_error"),
        (["chat", "--json", "-p", "hi", "--route", "nowhere", "--config", str(cfg)], 2, None),
        (["chat", "--json", "--config", str(cfg)], 2, "usage_error"),
    ]:
        result = run(*args, stdin="")
        assert result.returncode == code, args
        error = json.loads(result.stdout)["error"]
        assert set(error) == {"message", "type", "status"}
        assert error["type"] == (kind or "invalid_request_error")
        assert error["message"] in result.stderr
        assert "Traceback" not in result.stderr


def _numbers(*values: Any) -> bool:
    return all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)


def test_every_json_flag_prints_typed_json(up: Upstream, tmp_path: Path) -> None:
    cfg = config_file(
        tmp_path,
        p("flaky", up.url("server")),
        p("ok", up.url("ok")),
        circuit={"failures": 1, "cooldown_s": 60},
        routes={"main": ["flaky", "ok"]},
    )
    for _ in range(2):
        assert run("chat", "-p", "hi", config=cfg).returncode == 0

    providers = json.loads(run("providers", "--json").stdout)
    assert all(isinstance(e["models"], list) and isinstance(e["name"], str) for e in providers)

    status = {r["provider"]: r for r in json.loads(run("status", "--json", config=cfg).stdout)}
    circuit = status["flaky"]["circuit"]
    assert (circuit["state"], circuit["failures"], circuit["cause"]) == ("open", 1, "server_error")
    assert _numbers(circuit["open_for_s"])
    assert status["ok"]["circuit"]["cause"] is None

    report = json.loads(run("report", "--json", config=cfg).stdout)
    assert (report["requests"], report["answered"]) == (2, 2)
    assert _numbers(report["since"], report["until"], report["chart_since"], report["chart_until"])
    for row in report["providers"]:
        assert _numbers(row["requests"], row["failures"], row["failovers"], row["skips"])
        assert row["success_rate"] is None or _numbers(row["success_rate"])

    drill = run("drill", "--json", config=cfg)
    assert drill.returncode == 1  # without ok, nothing answers: the README promises exit 1
    rows = json.loads(drill.stdout)
    assert all(isinstance(r["chain"], list) for r in rows)
    assert all(r["ms"] is None or _numbers(r["ms"]) for r in rows)

    validate = json.loads(run("config", "validate", "--json", config=cfg).stdout)
    assert validate["default_order"] == ["flaky", "ok"]
    assert validate["routes"] == {"main": ["flaky", "ok"]}

    probe = json.loads(run("probe", up.url("ok"), "--json").stdout)
    assert probe["usable"] is True
    assert isinstance(probe["tries"], list)

    init = run("init", "--json", "--path", str(tmp_path / "new.yaml"), env={"OLLAMA_HOST": "x:1"})
    assert init.returncode == 1  # nothing usable here: written false, and still JSON
    written = json.loads(init.stdout)
    assert written["written"] is False
    assert all(isinstance(c["kept"], bool) for c in written["providers"])


# -- 3. a mistake in `defaults:` is the defaults' ----------------------------------------------


def test_a_typo_in_defaults_is_reported_once_as_defaults(tmp_path: Path) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "version": "0.3.2",
                "defaults": {"timeout": {"conect": 100}},
                "providers": [
                    {"name": n, "endpoint": f"http://127.0.0.1:9/{n}"} for n in ("a", "b", "c")
                ],
            }
        )
    )
    for args in (["config", "validate"], ["chat", "-p", "hi"]):
        result = run(*args, config=cfg)
        assert result.returncode == 2
        (line,) = result.stderr.splitlines()
        assert line == (
            f"agent-reach: config error: {cfg}: defaults, field 'timeout.conect': "
            "unknown field (did you mean 'connect'?)"
        )


# -- 5. plain words, never a library's class name ----------------------------------------------

CLASS_NAME = re.compile(r"\b(?:[A-Z][a-z0-9]+){2,}\b|\b\w+(?:Error|Exception)\b")


def test_no_library_class_name_reaches_the_user(up: Upstream, tmp_path: Path) -> None:
    cfg = config_file(
        tmp_path,
        p("cut", up.url("cutbody")),
        p("dead", refused_url()),
        p("slow", up.url("hang"), timeout={"connect": 500, "read": 200}),
        p("broken", up.url("brokenjson")),
        p("streamcut", up.url("streamcut")),
    )
    outputs = []
    plain = run("chat", "--json", "-v", "-p", "hi", config=cfg)
    assert plain.returncode == 1
    attempts = {a["provider"]: a for a in json.loads(plain.stdout)["attempts"]}
    assert (attempts["cut"]["reason"], attempts["cut"]["detail"]) == (
        "server_error",
        "connection closed mid-answer",
    )
    outputs.append(plain)
    streamed = run("chat", "--stream", "-p", "hi", "--route", "streamcut", config=cfg)
    assert streamed.returncode == 1
    assert "after the first chunk: connection closed mid-answer" in streamed.stderr
    outputs.append(streamed)
    for result in outputs:
        text = result.stdout + result.stderr
        assert not CLASS_NAME.findall(text), CLASS_NAME.findall(text)


# -- 6. remembered health ----------------------------------------------------------------------


def test_health_results_are_remembered_between_cli_runs(up: Upstream, tmp_path: Path) -> None:
    cfg = config_file(
        tmp_path,
        p("dead", refused_url()),
        p("sick", up.url("html-health")),
        p("ok", up.url("ok"), health_check=""),
        health={"mode": "cached", "ttl_s": 3},
    )
    first = run("chat", "-v", "-p", "hi", config=cfg)
    assert first.returncode == 0, first.stderr
    assert first.stderr.splitlines()[0].startswith("Connecting to dead… connect_failed")
    assert up.health_hits == ["html-health"]

    second = run("chat", "-v", "-p", "hi", config=cfg)
    assert second.returncode == 0, second.stderr
    lines = second.stderr.splitlines()
    assert re.fullmatch(
        r"Skipping dead: unhealthy — health check failed \d s ago: connect_failed "
        r"\(connection refused\)",
        lines[0],
    )
    assert lines[1].startswith("Skipping sick: unhealthy — health check failed ")
    assert lines[2].startswith("Fallback to ok, success!")
    assert up.health_hits == ["html-health"]  # no second health check went out

    time.sleep(3.1)  # past ttl_s: checked again
    third = run("chat", "-v", "-p", "hi", config=cfg)
    assert third.stderr.splitlines()[0].startswith("Connecting to dead… connect_failed")
    assert up.health_hits == ["html-health", "html-health"]


# -- 7. report: failures, failovers and skips apart --------------------------------------------


def test_report_tells_failovers_from_skips(up: Upstream, tmp_path: Path) -> None:
    cfg = config_file(
        tmp_path,
        p("flaky", up.url("server")),
        p("ok", up.url("ok")),
        circuit={"failures": 2, "cooldown_s": 300},
    )
    for _ in range(5):
        assert run("chat", "-p", "hi", config=cfg).returncode == 0
    report = json.loads(run("report", "--json", config=cfg).stdout)
    rows = {r["name"]: r for r in report["providers"]}
    flaky = rows["flaky"]
    assert (report["requests"], report["answered"]) == (5, 5)
    assert (flaky["requests"], flaky["failures"], flaky["failovers"], flaky["skips"]) == (
        2,
        2,
        2,
        3,
    )
    assert flaky["skipped"] == {"circuit_open": 3}
    assert (rows["ok"]["requests"], rows["ok"]["failures"], rows["ok"]["skips"]) == (5, 0, 0)
    header = run("report", config=cfg).stdout.splitlines()[1]
    assert re.search(r"requests.+failures.+failovers.+skips", header), header


def test_a_last_failure_is_not_a_failover(up: Upstream, tmp_path: Path) -> None:
    cfg = config_file(
        tmp_path, p("ok", up.url("ok")), p("broken", up.url("server")), routes={"alone": ["broken"]}
    )
    assert run("chat", "-p", "hi", "--route", "broken", config=cfg).returncode == 0  # → ok
    assert run("chat", "-p", "hi", "--route", "alone", config=cfg).returncode == 1  # no one left
    report = json.loads(run("report", "--json", config=cfg).stdout)
    broken = next(r for r in report["providers"] if r["name"] == "broken")
    assert (broken["requests"], broken["failures"], broken["failovers"]) == (2, 2, 1)


# -- 8. probe --write comes last ---------------------------------------------------------------


def test_probe_write_appends_at_the_end_of_the_order(up: Upstream, tmp_path: Path) -> None:
    cfg = config_file(
        tmp_path,
        p("first", up.url("ok")),
        p("second", up.url("backup"), fallback_weight=0.5),
        defaults={"fallback_weight": 2.0},
    )
    written = run("probe", up.url("ok"), "--write", "newer", config=cfg)
    assert written.returncode == 0, written.stdout + written.stderr
    order = json.loads(run("config", "validate", "--json", config=cfg).stdout)["default_order"]
    assert order == ["first", "second", "newer"]
    entry = yaml.safe_load(cfg.read_text())["providers"][-1]
    assert entry["fallback_weight"] == 0.4
    chosen = run("probe", up.url("ok"), "--write", "preferred", "--weight", "3", config=cfg)
    assert chosen.returncode == 0, chosen.stdout + chosen.stderr
    order = json.loads(run("config", "validate", "--json", config=cfg).stdout)["default_order"]
    assert order == ["preferred", "first", "second", "newer"]


# -- 9. drill: a route that never answers ------------------------------------------------------


def test_drill_says_when_a_route_has_no_answer_at_all(up: Upstream, tmp_path: Path) -> None:
    cfg = config_file(
        tmp_path,
        p("a", up.url("ok")),
        p("b", up.url("backup")),
        p("broken", up.url("server")),
        p("dead", refused_url()),
        routes={"doomed": ["broken", "dead"], "fine": ["a", "b"]},
    )
    result = run("drill", config=cfg)
    assert result.returncode == 1
    err = result.stderr.splitlines()
    assert err == [
        "agent-reach: route doomed has no answer even with nothing forced down "
        "(broken: server_error, dead: connect_failed)"
    ]


# -- 10. --version -----------------------------------------------------------------------------


def test_version_names_the_protocol() -> None:
    result = run("--version")
    assert result.returncode == 0
    assert result.stdout == f"agent-reach {__version__} (protocol {PROTOCOL_VERSION})\n"
    assert run("-V").stdout == result.stdout


def test_outputs_never_show_the_key(up: Upstream, tmp_path: Path) -> None:
    cfg = config_file(tmp_path, p("a", up.url("auth"), api_key_env="CLI_KEY"))
    for args in (["chat", "--json", "-p", "hi"], ["check", "--json"]):
        result: subprocess.CompletedProcess[str] = run(*args, config=cfg)
        json.loads(result.stdout)
        no_secrets(result)
