"""Remembered state belongs to a provider's identity (protocol §12): CLI runs on the default
state file, two configs that reuse a name, a fixed key, and a state file from before."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Any

import yaml

from ..fakes.upstream import KEYED_GOOD, Upstream
from .test_cli import BIN

BAD = "sk-keyed-bad-0a1b2c3d"


def write(path: Path, *providers: dict[str, Any]) -> Path:
    data = {
        "version": "0.3.2",
        "health": {"mode": "off"},  # no `state:`: the default file under HOME
        "circuit": {"auth_cooldown_s": 300},
        "providers": list(providers),
    }
    path.write_text(yaml.safe_dump(data))
    return path


def cli(home: Path, cfg: Path, *args: str, key: str = BAD) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_REACH")}
    env.update({"HOME": str(home), "ZHIPU_KEY": key})
    return subprocess.run(
        [BIN, "--config", str(cfg), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
        check=False,
    )


def reasons(home: Path, cfg: Path, key: str = BAD) -> list[str]:
    result = cli(home, cfg, "chat", "--json", "--model", "m", "-p", "hi", key=key)
    assert result.returncode == 0, result.stderr
    return [f"{a['provider']}:{a['reason']}" for a in json.loads(result.stdout)["trace"]]


def test_a_name_at_two_endpoints_and_a_fixed_key(up: Upstream, tmp_path: Path) -> None:
    zhipu = {"name": "zhipu-api", "api_key_env": "ZHIPU_KEY"}
    backup = {"name": "backup", "endpoint": up.url("backup")}
    one = write(tmp_path / "one.yaml", {**zhipu, "endpoint": up.url("keyed")}, backup)
    two = write(tmp_path / "two.yaml", {**zhipu, "endpoint": up.url("ok")}, backup)

    assert reasons(tmp_path, one) == ["zhipu-api:auth_failed", "backup:ok"]
    assert reasons(tmp_path, one) == ["zhipu-api:circuit_open", "backup:ok"]
    assert (tmp_path / ".agent-reach" / "state.db").exists()  # the default state file
    # the same name at another endpoint is another provider: its circuit is its own
    assert reasons(tmp_path, two) == ["zhipu-api:ok"]
    # the key fixed: the next run tries it at once
    assert reasons(tmp_path, one, key=KEYED_GOOD) == ["zhipu-api:ok"]

    # `status` shows this config's providers; `--all` also the identity of the bad key
    shown = json.loads(cli(tmp_path, one, "status", "--json", key=KEYED_GOOD).stdout)
    assert [(r["provider"], r["circuit"]["state"]) for r in shown] == [
        ("zhipu-api", "closed"),
        ("backup", "closed"),
    ]
    result = cli(tmp_path, one, "status", "--all", "--json", key=KEYED_GOOD)
    everything = json.loads(result.stdout)
    others = [r for r in everything if not r["in_config"]]
    assert [(r["provider"], r["circuit"]["state"]) for r in others] == [("zhipu-api", "open")]
    assert others[0]["fingerprint"] != shown[0]["fingerprint"]
    assert (
        "zhipu-api (not in one.yaml)"
        in cli(tmp_path, one, "status", "--all", key=KEYED_GOOD).stdout
    )
    for secret in (BAD, KEYED_GOOD):
        assert secret not in result.stdout
        assert secret not in (tmp_path / ".agent-reach" / "state.db").read_bytes().decode("latin-1")

    # the report counts this identity's attempts; --all adds the other identities' lines
    mine = json.loads(cli(tmp_path, one, "report", "--json", key=KEYED_GOOD).stdout)
    rows = {r["name"]: r for r in mine["providers"]}
    assert (rows["zhipu-api"]["requests"], rows["zhipu-api"]["ok"]) == (1, 1)
    full = json.loads(cli(tmp_path, one, "report", "--all", "--json", key=KEYED_GOOD).stdout)
    names = sorted(r["name"] for r in full["providers"])
    assert names[:2] == ["backup", "zhipu-api"]
    assert len(names) == 4  # plus the bad key's and the other endpoint's identities
    assert all(n.startswith("zhipu-api@") for n in names[2:])
    table = cli(tmp_path, one, "report", "--all", key=KEYED_GOOD).stdout
    assert table.count("(not in one.yaml)") == 2  # the other identities, labelled


def test_a_state_file_from_before_identities_keeps_working(up: Upstream, tmp_path: Path) -> None:
    cfg = write(tmp_path / "c.yaml", {"name": "a", "endpoint": up.url("ok")})
    db = tmp_path / ".agent-reach" / "state.db"
    db.parent.mkdir()
    conn = sqlite3.connect(db)
    conn.executescript(
        """
        CREATE TABLE circuits (provider TEXT PRIMARY KEY, failures INTEGER NOT NULL,
            open_until REAL NOT NULL, trial INTEGER NOT NULL, cause TEXT NOT NULL);
        CREATE TABLE attempts (ts REAL NOT NULL, request TEXT NOT NULL, route TEXT NOT NULL,
            provider TEXT NOT NULL, reason TEXT NOT NULL, status INTEGER, ms REAL NOT NULL,
            last_resort INTEGER NOT NULL);
        """
    )
    conn.execute("INSERT INTO circuits VALUES ('a', 3, ?, 0, 'server_error')", (time.time() + 600,))
    conn.execute(
        "INSERT INTO attempts VALUES (?, 'r0', 'default', 'a', 'ok', 200, 5.0, 0)", (time.time(),)
    )
    conn.commit()
    conn.close()
    # the old circuit, keyed by name alone, is dropped: `a` is tried
    assert reasons(tmp_path, cfg) == ["a:ok"]
    # the old attempt-log line still counts for the provider of that name
    report = json.loads(cli(tmp_path, cfg, "report", "--json").stdout)
    assert report["providers"][0]["requests"] == 2
    conn = sqlite3.connect(db)
    assert [r[0] for r in conn.execute("SELECT provider FROM breakers")] == []
    conn.close()


def test_status_and_report_without_the_key_show_what_the_proxy_recorded(
    up: Upstream, tmp_path: Path
) -> None:
    zhipu = {"name": "zhipu-api", "api_key_env": "ZHIPU_KEY", "endpoint": up.url("keyed")}
    cfg = write(tmp_path / "c.yaml", zhipu, {"name": "backup", "endpoint": up.url("backup")})
    assert reasons(tmp_path, cfg) == ["zhipu-api:auth_failed", "backup:ok"]  # with the key
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_REACH")}
    env["HOME"] = str(tmp_path)  # another shell: ZHIPU_KEY is not set in it

    def here(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [BIN, "--config", str(cfg), *args], capture_output=True, text=True, env=env, check=False
        )

    shown = {r["provider"]: r for r in json.loads(here("status", "--json").stdout)}
    zhipu_row = shown["zhipu-api"]
    assert (zhipu_row["circuit"]["state"], zhipu_row["circuit"]["cause"]) == ("open", "auth_failed")
    assert zhipu_row["note"] == "ZHIPU_KEY not set here; showing what the proxy recorded"
    assert "note" not in shown["backup"]
    everything = json.loads(here("status", "--all", "--json").stdout)
    assert [r["provider"] for r in everything if not r["in_config"]] == []  # not shown twice
    table = here("status")
    assert "zhipu-api: ZHIPU_KEY not set here; showing what the proxy recorded" in table.stderr
    rows = {r["name"]: r for r in json.loads(here("report", "--json").stdout)["providers"]}
    assert rows["zhipu-api"]["requests"] == 1  # the attempt made with the key, counted here
    # With the key set again, nothing is borrowed: its own identity is the one recorded.
    mine = json.loads(cli(tmp_path, cfg, "status", "--json").stdout)
    assert all("note" not in r for r in mine)
