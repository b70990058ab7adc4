"""`agent-reach run` and `agent-reach setup` as a user runs them (subprocesses)."""

from __future__ import annotations

import contextlib
import json
import os
import pty
import re
import socket
import stat
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import yaml

from ..fakes.upstream import Upstream, proxy_config, refused_url

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


def test_run_on_a_busy_port_says_so_in_one_line(up: Upstream, tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"providers": [{"name": "ok", "endpoint": up.url("ok")}]}))
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = subprocess.run(
            [BIN, "--config", str(config), "run", "--port", str(port), "--", "true"],
            capture_output=True,
            text=True,
            check=False,
        )
    assert done.returncode == 2
    assert done.stderr == f"agent-reach: cannot serve on 127.0.0.1:{port}: Address already in use\n"


def setup_cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "CODEX_HOME": str(tmp_path / "cx")}
    return subprocess.run(
        [BIN, "setup", *args], env=env, capture_output=True, text=True, check=True, cwd=tmp_path
    )


def test_setup_prints_without_writing(tmp_path: Path) -> None:
    printed = setup_cli(tmp_path, "codex").stdout
    assert 'base_url = "http://127.0.0.1:8000/v1"' in printed
    assert 'wire_api = "responses"' in printed
    assert "supports_websockets = true" in printed  # the Responses WebSocket face
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
    assert settings["env"] == {
        "FOO": "1",
        "ANTHROPIC_BASE_URL": "http://127.0.0.1:8000",
        "CLAUDE_CODE_ENABLE_GATEWAY_MODEL_DISCOVERY": "1",
    }
    assert "AGENT_REACH_API_KEY" in settings["apiKeyHelper"]


# A program that sends `argv[1]` chat requests, half a second apart, then waits (10 s at most)
# for `argv[2]` to contain `argv[3]`: what `run` printed must be there while it still runs.
REQUESTS = textwrap.dedent(
    """
    import json, os, sys, time, urllib.error, urllib.request
    def call():
        req = urllib.request.Request(
            os.environ["OPENAI_BASE_URL"] + "/chat/completions",
            data=json.dumps({"model": "gpt-6.2-sol", "messages": [{"role": "user", "content": "hi"}]}).encode(),
            headers={"Content-Type": "application/json",
                     "Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]})
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return resp.status
        except urllib.error.HTTPError as exc:
            return exc.code
    for i in range(int(sys.argv[1])):
        print(call(), flush=True)
        time.sleep(0.5)
    for _ in range(100):
        if sys.argv[3] in open(sys.argv[2]).read():
            sys.exit(0)
        time.sleep(0.1)
    sys.exit(1)
    """
)


def run_requests(
    tmp_path: Path,
    providers: list[dict[str, object]],
    count: int,
    wait_for: str,
    *flags: str,
    circuit: dict[str, float] | None = None,
    pause: bool = True,
) -> tuple[subprocess.CompletedProcess[str], str]:
    """`agent-reach run [flags] -- python REQUESTS count stderr wait_for`: the run and its
    stderr (written to a file the program reads while it runs); `pause`: half a second
    between requests."""
    config = tmp_path / "c.yaml"
    circuit = circuit or {"failures": 1, "cooldown_s": 0.2, "auth_cooldown_s": 60}
    config.write_text(yaml.safe_dump(proxy_config(providers, circuit=circuit)))
    program = REQUESTS if pause else REQUESTS.replace("time.sleep(0.5)", "pass")
    (tmp_path / "requests.py").write_text(program)
    err = tmp_path / "run.err"
    program = [sys.executable, "requests.py", str(count), str(err), wait_for]
    with err.open("w") as stderr:
        done = subprocess.run(
            [BIN, "--config", str(config), "run", *flags, "--", *program],
            cwd=tmp_path,
            env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PROVIDER_KEY": "sk-x"},
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            timeout=60,
            check=False,
        )
    return done, err.read_text()


def test_run_shows_failovers_providers_going_down_and_back_and_a_summary(
    up: Upstream, tmp_path: Path
) -> None:
    providers = [
        up.provider("flaky"),
        up.provider("auth"),
        up.provider("ok"),
    ]
    done, err = run_requests(tmp_path, providers, 3, "flaky is back")
    assert done.returncode == 0, err
    assert done.stdout.split() == ["200", "200", "200"]
    # flaky answers 500, ok, 500; its circuit opens at once and closes after 0.2 s.
    expected = [
        "flaky is down (server_error: internal error), skipped for 0 s",
        "auth is down (auth_failed: Incorrect API key provided: ***), skipped for 60 s",
        "flaky server_error → auth auth_failed → ok ok, T s",  # their details: said above
        "flaky is back",  # the second request: flaky's trial answered (no failover, no line)
        "flaky is down (server_error: internal error), skipped for 0 s",
        # the third request failed over as the first: nothing new to say but that line
        "3 requests, 2 failed over, 0 failed; answered by ok (2), flaky (1)",
    ]
    assert re.sub(r"\d+\.\d s", "T s", err) == "".join(f"agent-reach: {x}\n" for x in expected)


def test_a_session_with_a_dead_first_provider_says_each_thing_once(
    up: Upstream, tmp_path: Path
) -> None:
    """Issue 50, item 6: 20 requests past a dead provider, one whose key is not set and one
    whose host does not resolve: a line for each as it goes down (with its detail), one for
    the first failover, the summary; nothing for the 19 requests that met the same."""
    providers = [
        {"name": "dead", "endpoint": refused_url()},
        {"name": "nokey", "endpoint": up.url("ok"), "api_key_env": "NOT_SET_KEY"},
        {"name": "nodns", "endpoint": "http://no-such-host.invalid/v1/chat/completions"},
        up.provider("ok"),
    ]
    done, err = run_requests(
        tmp_path, providers, 20, "agent-reach", circuit={"failures": 1}, pause=False
    )
    assert done.stdout.split() == ["200"] * 20
    # (the seconds left are read when the line is written: 29 on a busy machine)
    said = re.sub(r"skipped for (29|30) s", "skipped for 30 s", err)
    assert re.sub(r"\d+\.\d s", "T s", said).splitlines() == [
        "agent-reach: dead is down (connect_failed: connection refused), skipped for 30 s",
        "agent-reach: nodns is down (connect_failed: DNS lookup failed), skipped for 30 s",
        "agent-reach: dead connect_failed → nokey skip(auth_failed) (NOT_SET_KEY is not set)"
        " → nodns connect_failed → ok ok, T s",
        "agent-reach: 20 requests, 20 failed over, 0 failed; answered by ok (20)",
    ]


def test_run_says_why_when_every_provider_fails_while_the_program_runs(
    tmp_path: Path,
) -> None:
    providers = [{"name": "dead", "endpoint": refused_url()}]
    done, err = run_requests(tmp_path, providers, 1, "no provider answered")
    # The program saw the line on run's stderr before it ended (it waits for it, else exits 1).
    assert done.returncode == 0, err
    assert done.stdout.split() == ["502"]
    assert re.sub(r"\d+\.\d s", "T s", err) == (
        "agent-reach: dead is down (connect_failed: connection refused), skipped for 0 s\n"
        "agent-reach: gpt-6.2-sol: no provider answered: dead connect_failed, T s\n"
        "agent-reach: 1 request, 0 failed over, 1 failed\n"
    )


def test_an_agent_retrying_the_same_failure_gets_one_line_and_a_count(tmp_path: Path) -> None:
    providers = [{"name": "dead", "endpoint": refused_url()}]
    done, err = run_requests(tmp_path, providers, 4, "no provider answered")
    assert done.returncode == 0, err
    assert re.sub(r"\d+\.\d s", "T s", err) == (
        "agent-reach: dead is down (connect_failed: connection refused), skipped for 0 s\n"
        "agent-reach: gpt-6.2-sol: no provider answered: dead connect_failed, T s\n"
        "agent-reach: (and 3 more like it)\n"
        "agent-reach: 4 requests, 0 failed over, 4 failed\n"
    )


def test_run_quiet_prints_nothing_and_log_gets_the_access_lines(
    up: Upstream, tmp_path: Path
) -> None:
    providers = [{"name": "dead", "endpoint": refused_url()}, up.provider("ok")]
    log = tmp_path / "proxy.log"
    done, err = run_requests(tmp_path, providers, 1, "", "--quiet", "--log", str(log))
    assert done.returncode == 0, err
    assert err == ""
    written = log.read_text()
    assert (
        " POST /v1/chat/completions 200 model=gpt-6.2-sol provider=ok provider_model=gpt-6.2-sol "
        in written
    )
    assert "agent-reach: dead connect_failed → ok ok, " in written  # its detail: the line before
    assert "agent-reach: 1 request, 1 failed over, 0 failed; answered by ok (1)" in written


def test_setup_undo_puts_back_the_users_file_byte_for_byte(tmp_path: Path) -> None:
    cx = tmp_path / "cx"
    cx.mkdir()
    original = b'# mine\r\nmodel = "o3"   \r\n\r\n[tui]\r\nnotifications = true'  # CRLF, no EOL
    (cx / "config.toml").write_bytes(original)
    setup_cli(tmp_path, "codex", "--write", "--base-url", "http://127.0.0.1:9001")
    setup_cli(tmp_path, "codex", "--write", "--base-url", "http://127.0.0.1:9002")
    assert b"9002" in (cx / "config.toml").read_bytes()
    undone = setup_cli(tmp_path, "codex", "--undo")
    assert (cx / "config.toml").read_bytes() == original  # the first write's original
    assert "restored" in undone.stdout
    assert sorted(p.name for p in cx.iterdir()) == ["config.toml"]
    # A file that --write created is removed again.
    setup_cli(tmp_path, "claude", "--write")
    assert (tmp_path / ".claude" / "settings.json").exists()
    setup_cli(tmp_path, "claude", "--undo")
    assert list((tmp_path / ".claude").iterdir()) == []
    again = subprocess.run(
        [BIN, "setup", "claude", "--undo"],
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert again.returncode == 1
    assert "nothing to undo" in again.stderr


def test_a_full_screen_agent_gets_its_lines_in_a_file_and_the_summary_at_exit(
    up: Upstream, tmp_path: Path
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "claude"  # `claude` without -p: the full-screen UI, as run sees it
    program = REQUESTS.replace("sys.argv[1]", "'1'").replace("sys.argv[2]", "sys.argv[-2]")
    fake.write_text(f"#!{sys.executable}\n" + program.replace("sys.argv[3]", "sys.argv[-1]"))
    fake.chmod(0o755)
    config = tmp_path / "c.yaml"
    providers = [{"name": "dead", "endpoint": refused_url()}, up.provider("ok")]
    config.write_text(yaml.safe_dump(proxy_config(providers)))
    primary, secondary = pty.openpty()
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path), "PROVIDER_KEY": "sk-x"}
    log = tmp_path / ".agent-reach" / "run.log"
    # the fake waits (10 s at most) for its failover line in the log: written while it runs
    done = subprocess.run(
        [BIN, "--config", str(config), "run", "--", "claude", str(log), "dead connect_failed"],
        stderr=secondary,
        stdout=subprocess.PIPE,
        env=env,
        timeout=60,
        check=False,
    )
    os.close(secondary)
    screen = b""
    with contextlib.suppress(OSError):
        while chunk := os.read(primary, 65536):
            screen += chunk
    os.close(primary)
    assert done.returncode == 0, screen
    shown = screen.decode().replace("\r\n", "\n")
    assert shown.startswith(
        f"agent-reach: claude draws over this terminal: what its requests meet goes to {log}"
        " (tail -f it); a summary follows when it exits\n"
    )
    assert "connect_failed" not in shown
    assert shown.endswith("agent-reach: 1 request, 1 failed over, 0 failed; answered by ok (1)\n")
    written = log.read_text()
    assert "agent-reach: dead connect_failed (connection refused) → ok ok, " in written
    assert " POST /v1/chat/completions 200 " in written  # and the proxy's access lines
    assert stat.S_IMODE(log.parent.stat().st_mode) == 0o700  # run made the folder
    assert stat.S_IMODE(log.stat().st_mode) == 0o600


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
        "CLAUDE_CODE_ENABLE_GATEWAY_MODEL_DISCOVERY": "1",
    }
    assert "sk-ant-real" not in said
    assert mode(tmp_path / ".claude") == 0o700
    assert mode(tmp_path / ".claude" / "settings.json") == 0o600


def mode(path: Path) -> int:
    return path.stat().st_mode & 0o777
