"""`agent-reach run` and `agent-reach setup` as a user runs them (subprocesses)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import yaml

from ..upstream import Upstream

BIN = str(Path(sys.executable).parent / "agent-reach")

# What the program under `run` checks: its environment, and the proxy with and without its key.
PROGRAM = textwrap.dedent(
    """
    import json, os, sys, urllib.error, urllib.request
    env = {k: os.environ.get(k) for k in (
        "OPENAI_BASE_URL", "OPENAI_API_KEY", "ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN", "UPSTREAM_KEY", "PROXY_KEYS", "UNRELATED")}
    def call(key):
        req = urllib.request.Request(
            env["OPENAI_BASE_URL"] + "/chat/completions",
            data=json.dumps({"model": "gpt-test", "messages": [{"role": "user", "content": "hi"}]}).encode(),
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"})
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return resp.status, json.loads(resp.read())["choices"][0]["message"]["content"]
        except urllib.error.HTTPError as exc:
            return exc.code, None
    out = {"env": env, "with_key": call(env["OPENAI_API_KEY"]), "without": call("guess")}
    open(sys.argv[1], "w").write(json.dumps(out))
    sys.exit(3)
    """
)


def test_run_points_the_program_at_a_one_time_proxy(up: Upstream, tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    providers = [{"name": "ok", "endpoint": up.url("ok"), "api_key_env": "UPSTREAM_KEY"}]
    server = {"api_keys_env": "PROXY_KEYS"}
    config.write_text(
        yaml.safe_dump({"state": "memory://", "providers": providers, "server": server})
    )
    (tmp_path / "program.py").write_text(PROGRAM)
    report = tmp_path / "report.json"
    result = subprocess.run(
        [BIN, "--config", str(config), "run", "--", sys.executable, "program.py", str(report)],
        cwd=tmp_path,
        env={
            "PATH": "/usr/bin:/bin",
            "HOME": str(tmp_path),
            "ANTHROPIC_AUTH_TOKEN": "old",
            "UPSTREAM_KEY": "sk-upstream-secret",
            "PROXY_KEYS": "client-1",
            "UNRELATED": "kept",
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 3, result.stderr  # the program's own status
    seen = json.loads(report.read_text())
    env = seen["env"]
    key = env["OPENAI_API_KEY"]
    assert len(key) >= 24
    assert env["ANTHROPIC_API_KEY"] == key
    assert env["ANTHROPIC_AUTH_TOKEN"] is None
    assert env["UPSTREAM_KEY"] is None  # a provider's key stays with the proxy
    assert env["PROXY_KEYS"] is None  # and so do its client keys
    assert env["UNRELATED"] == "kept"
    assert env["OPENAI_BASE_URL"] == env["ANTHROPIC_BASE_URL"] + "/v1"
    assert env["ANTHROPIC_BASE_URL"].startswith("http://127.0.0.1:")
    assert seen["with_key"] == [200, "hello from ok"]
    assert seen["without"] == [401, None]
    assert key not in result.stdout + result.stderr
    assert "Traceback" not in result.stderr


def test_run_refuses_unknown_routes_and_commands(up: Upstream, tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"providers": [{"name": "ok", "endpoint": up.url("ok")}]}))
    base = [BIN, "--config", str(config), "run"]
    bad_route = subprocess.run(
        [*base, "--route", "nope", "--", "true"], capture_output=True, text=True, check=False
    )
    assert bad_route.returncode == 2
    assert "no route or provider named 'nope'" in bad_route.stderr
    missing = subprocess.run(
        [*base, "--", "no-such-program-xyz"], capture_output=True, text=True, check=False
    )
    assert missing.returncode == 127
    assert "command not found" in missing.stderr


def setup_cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "CODEX_HOME": str(tmp_path / "cx")}
    return subprocess.run(
        [BIN, "setup", *args], env=env, capture_output=True, text=True, check=True, cwd=tmp_path
    )


def test_setup_prints_without_writing(tmp_path: Path) -> None:
    printed = setup_cli(tmp_path, "codex").stdout
    assert 'base_url = "http://127.0.0.1:8000/v1"' in printed
    assert 'wire_api = "responses"' in printed
    assert not (tmp_path / "cx").exists()
    claude = setup_cli(tmp_path, "claude", "--base-url", "http://10.0.0.5:9000/v1").stdout
    assert '"ANTHROPIC_BASE_URL": "http://10.0.0.5:9000"' in claude
    assert not (tmp_path / ".claude").exists()


def test_setup_write_keeps_the_users_settings(tmp_path: Path) -> None:
    cx = tmp_path / "cx"
    cx.mkdir()
    original = 'model = "o3"\nmodel_provider = "openai"\n\n[tui]\nnotifications = true\n'
    (cx / "config.toml").write_text(original)
    setup_cli(tmp_path, "codex", "--write", "--base-url", "http://127.0.0.1:9001")
    setup_cli(tmp_path, "codex", "--write", "--base-url", "http://127.0.0.1:9002")  # idempotent
    config = tomllib.loads((cx / "config.toml").read_text())
    assert config["model"] == "o3"
    assert config["tui"] == {"notifications": True}
    assert config["model_provider"] == "agent_reach"
    assert config["model_providers"]["agent_reach"]["base_url"] == "http://127.0.0.1:9002/v1"
    assert (cx / "config.toml.bak").exists()
    claude = tmp_path / ".claude"
    claude.mkdir()
    (claude / "settings.json").write_text('{"theme": "dark", "env": {"FOO": "1"}}')
    setup_cli(tmp_path, "claude", "--write")
    settings = json.loads((claude / "settings.json").read_text())
    assert settings["theme"] == "dark"
    assert settings["env"] == {"FOO": "1", "ANTHROPIC_BASE_URL": "http://127.0.0.1:8000"}
    assert "AGENT_REACH_API_KEY" in settings["apiKeyHelper"]


def test_setup_write_keeps_tokens_private(tmp_path: Path) -> None:
    cx = tmp_path / "cx"
    cx.mkdir()
    (cx / "config.toml").write_text('model = "o3"\n[auth]\ntoken = "sk-secret"\n')
    (cx / "config.toml").chmod(0o600)
    (cx / "config.toml.bak").write_text("an older backup\n")
    (cx / "config.toml.bak").chmod(0o644)
    setup_cli(tmp_path, "codex", "--write")
    assert mode(cx / "config.toml") == 0o600
    assert mode(cx / "config.toml.bak") == 0o600  # the source's mode, not the umask's
    assert "sk-secret" in (cx / "config.toml.bak").read_text()
    setup_cli(tmp_path, "claude", "--write")  # ~/.claude does not exist yet
    settings = tmp_path / ".claude" / "settings.json"
    settings.write_text('{"env": {"ANTHROPIC_API_KEY": "sk-ant-real", "FOO": "1"}}')
    said = setup_cli(tmp_path, "claude", "--write").stdout
    assert "removed env.ANTHROPIC_API_KEY" in said
    assert json.loads(settings.read_text())["env"] == {
        "FOO": "1",
        "ANTHROPIC_BASE_URL": "http://127.0.0.1:8000",
    }
    assert "sk-ant-real" not in said
    assert mode(tmp_path / ".claude") == 0o700
    assert mode(tmp_path / ".claude" / "settings.json") == 0o600


def mode(path: Path) -> int:
    return path.stat().st_mode & 0o777
