"""`agent-reach drill` against loopback providers."""

from __future__ import annotations

import json
from pathlib import Path

from ..fakes.upstream import Upstream
from .test_cli import config_file, p, run


def test_drill_with_redundant_routes_exits_0(up: Upstream, tmp_path: Path) -> None:
    cfg = config_file(
        tmp_path,
        p("a", up.url("ok")),
        p("b", up.url("backup")),
        routes={"main": ["b", "a"]},
    )
    result = run("drill", "--json", config=cfg)
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    got = {(r["down"], r["route"]): r["answered_by"] for r in rows}
    assert got == {
        ("-", "default"): "a",
        ("-", "main"): "b",
        ("a", "default"): "b",
        ("a", "main"): "b",
        ("b", "default"): "a",
        ("b", "main"): "a",
    }
    assert all(r["ms"] > 0 for r in rows)
    table = run("drill", config=cfg)
    assert table.returncode == 0
    assert "answered by" in table.stdout


def test_drill_names_a_single_point_of_failure(up: Upstream, tmp_path: Path) -> None:
    cfg = config_file(
        tmp_path,
        p("a", up.url("ok")),
        p("broken", up.url("server")),
        p("b", up.url("backup")),
        routes={"fragile": ["a", "broken"], "solo": ["b"]},
    )
    result = run("drill", config=cfg)
    assert result.returncode == 1
    err = result.stderr
    assert "single point of failure: without a, route fragile has no answer" in err
    assert "single point of failure: without b, route solo has no answer" in err
    assert "without broken" not in err


def test_drill_dry_run_sends_nothing(up: Upstream, tmp_path: Path) -> None:
    cfg = config_file(
        tmp_path, p("a", up.url("ok")), p("b", up.url("backup")), routes={"main": ["b", "a"]}
    )
    result = run("drill", "--dry-run", config=cfg)
    assert result.returncode == 0
    assert result.stdout.splitlines() == ["default: a → b", "main: b → a"]
    as_json = run("drill", "--dry-run", "--json", config=cfg)
    assert json.loads(as_json.stdout) == {"default": ["a", "b"], "main": ["b", "a"]}
    assert up.received == []


def test_a_drill_leaves_the_state_store_as_it_was(up: Upstream, tmp_path: Path) -> None:
    cfg = config_file(
        tmp_path,
        p("broken", up.url("server")),
        p("a", up.url("ok")),
        circuit={"failures": 1, "cooldown_s": 300},
    )
    assert run("drill", config=cfg).returncode == 1  # broken never answers: a route without it
    report = json.loads(run("report", "--json", config=cfg).stdout)
    assert [r["requests"] for r in report["providers"]] == [0, 0]
    status = json.loads(run("status", "--json", config=cfg).stdout)
    assert [r["circuit"]["state"] for r in status] == ["closed", "closed"]
