"""The README as a newcomer uses it: its commands, run in order as written, against
`examples/config.yaml` with its endpoints on local servers (one refusing connections, one
answering 401, one working Ollama), and its step-mode curl flow against a running proxy.

The commands come from the README itself (its command-line table and the `$ agent-reach …`
lines of its examples), so a command added there is run here too."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent_reach.net.ports import free_port

from ..fakes.upstream import Upstream, refused_url
from ..readme import README, ROOT, cli_table_commands, code_blocks, section, shown_commands
from .test_cli import BIN
from .test_proxy import start, stop

KEYS = {"DEEPSEEK_API_KEY": "sk-walk-deepseek-0a1b2c3d", "ZHIPU_API_KEY": "sk-walk-zhipu-4e5f6a7b"}
# What the README promises for each command when a provider works: 0; and 1 only where it
# says so (`check`, `drill`, `probe`: nothing usable, a single point of failure).
MAY_EXIT_1 = ("check", "drill", "probe")


def examples_config(endpoints: dict[str, str]) -> dict[str, Any]:
    """`examples/config.yaml` as shipped, with these providers' endpoints replaced."""
    data = yaml.safe_load((ROOT / "examples" / "config.yaml").read_text())
    for provider in data["providers"]:
        provider["endpoint"] = endpoints.get(provider["name"], provider["endpoint"])
    return data


class Newcomer:
    """A fresh HOME with the starter config in its default place, keys in the environment and
    `$OLLAMA_HOST` at a local Ollama, running commands the way a shell would."""

    def __init__(self, home: Path, up: Upstream) -> None:
        self.home, self.up = home, up
        self.config = home / ".agent-reach" / "config.yaml"
        self.config.parent.mkdir(parents=True)
        self.config.write_text(
            yaml.safe_dump(
                examples_config({"deepseek-official": refused_url(), "zhipu-api": up.url("auth")}),
                sort_keys=False,
            )
        )
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_REACH")}
        self.env.update(KEYS, HOME=str(home))
        self.env["OLLAMA_HOST"] = f"http://127.0.0.1:{up.port}/s/ollama-readme"
        self.bin_dir = str(Path(BIN).parent)
        self.env["PATH"] = f"{self.bin_dir}{os.pathsep}{self.env.get('PATH', '')}"

    def fill(self, command: str) -> tuple[list[str], str | None]:
        """The README's command with its placeholders filled in: (argv, stdin)."""
        stdin = None
        if " | " in command:  # echo "Hello" | agent-reach …
            feed, command = (part.strip() for part in command.split(" | ", 1))
            stdin = shlex.split(feed)[1] + "\n"
        words = [w.strip("[]") for w in shlex.split(command)]
        values = {
            "--host": "127.0.0.1",
            "--port": str(free_port()),
            "--workers": "2",
            "--log-level": "info",
            "--path": str(self.home / "init.yaml"),
            "--model": "deepseek-chat",
            "--format": "openai",
            "--api-key-env": "DEEPSEEK_API_KEY",
            "--write": "probed",
            "--weight": "0.5",
            "--provider": "local-ollama",
            "--html": str(self.home / "report.html"),
            "--route": "deepseek",
            "--base-url": f"http://127.0.0.1:{free_port()}/v1",
            "--log": str(self.home / "run.log"),
            "--shutdown-timeout": "5",
            "--drain-delay": "0",
        }
        argv: list[str] = []
        for i, word in enumerate(words):
            if word == "TEXT…":  # agent-reach embed [TEXT…]
                argv.append("Hello")
                continue
            if not word or word.endswith("…"):  # [ARGS…]
                continue
            if "|" in word:  # codex|claude: one of them
                argv.append(word.split("|")[0])
            elif re.fullmatch(r"[A-Z][A-Z_]*", word):
                before = words[i - 1] if i else ""
                if word == "SPACE":
                    argv.append("bge-m3")  # examples/config.yaml's embedding space
                elif before in values:
                    argv.append(values[before])
                elif word == "URL":
                    argv.append(self.up.url("ok"))
                elif word == "PATH":
                    argv.append(str(self.config))
                elif word == "COMMAND":
                    argv += [
                        sys.executable,
                        "-c",
                        "import os; print(os.environ['OPENAI_BASE_URL'])",
                    ]
                else:
                    pytest.fail(
                        f"the walkthrough does not know what to put for {word} in {command!r}"
                    )
            else:
                argv.append(word)
        assert argv[0] == "agent-reach", command
        return [BIN, *argv[1:]], stdin

    def run(self, command: str) -> subprocess.CompletedProcess[str]:
        argv, stdin = self.fill(command)
        if argv[1:2] == ["serve"]:
            return self.serve(argv)
        if argv[1:2] == ["demo"] and "--serve" in argv:
            return self.demo_serve(argv)
        if "--write" in argv and "--undo" in argv:  # setup: write, then undo what it wrote
            written = self.run_argv([a for a in argv if a != "--undo"], stdin)
            if written.returncode:
                return written
            argv = [a for a in argv if a != "--write"]
        return self.run_argv(argv, stdin)

    def run_argv(self, argv: list[str], stdin: str | None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            argv, input=stdin, capture_output=True, text=True, env=self.env, timeout=60, check=False
        )

    def demo_serve(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        """Start the simulated providers, read what they print up to the `init` line, stop
        them with Ctrl-C (SIGINT)."""
        proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=self.env
        )
        assert proc.stdout is not None
        printed = []
        while not printed or "OLLAMA_HOST=" not in printed[-1]:
            printed.append(proc.stdout.readline())
            assert printed[-1], proc.communicate()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)
        return subprocess.CompletedProcess(argv, proc.returncode, "".join(printed) + out, err)

    def serve(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        """Start the proxy, wait until it answers, send it one chat request, stop it."""
        port = argv[argv.index("--port") + 1]
        proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=self.env
        )
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(f"{base}/healthz", timeout=1) as resp:
                    assert resp.status == 200
                break
            except OSError:
                assert proc.poll() is None, proc.communicate()
                assert time.monotonic() < deadline, "serve did not answer /healthz"
                time.sleep(0.1)
        body = json.dumps({"messages": [{"role": "user", "content": "Hi"}]}).encode()
        request = urllib.request.Request(
            f"{base}/v1/chat/completions", body, {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=10) as resp:
            assert json.loads(resp.read())["object"] == "chat.completion"
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
        return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def test_the_readme_commands_run_as_written(up: Upstream, tmp_path: Path) -> None:
    text = README.read_text()
    newcomer = Newcomer(tmp_path / "home", up)
    shown = shown_commands(text)
    commands = [command for command, _ in shown] + cli_table_commands(text)
    assert len(commands) >= 20
    results = []
    for command in commands:
        result = newcomer.run(command)
        results.append(result)
        everything = result.stdout + result.stderr
        where = f"{command!r} (exit {result.returncode}):\n{everything}"
        assert "Traceback" not in everything, where
        for key in KEYS.values():
            assert key not in everything, where
        name = result.args[1] if len(result.args) > 1 else ""
        allowed = {0, 1} if name in MAY_EXIT_1 else {0}
        assert result.returncode in allowed, where
        if "--json" in result.args:
            lines = result.stdout.splitlines() if "--stream" in result.args else [result.stdout]
            assert result.stdout.strip(), where
            for line in lines:
                json.loads(line)  # anything else fails here

    # The first example's trace is the one the README prints (times and texts aside).
    expected = shown[0][1].splitlines()[:3]
    want = [re.split(r" \(|, success", line)[0] for line in expected]
    got = [re.split(r" \(|, success", line)[0] for line in results[0].stderr.splitlines()]
    assert got == want, results[0].stderr


def _readme_json(text: str) -> Any:
    """A JSON answer as the README prints it, with its `…` elisions turned into wildcards."""
    text = text.replace("[…]", '"<any>"')
    text = re.sub(r'"([^"]*)…"', r'"<prefix>\1"', text)
    return json.loads(text)


def _matches(shown: Any, got: Any, where: str = "") -> None:
    if shown == "<any>":
        return
    if isinstance(shown, str) and shown.startswith("<prefix>"):
        assert isinstance(got, str), where
        assert got.startswith(shown.removeprefix("<prefix>")), where
    elif isinstance(shown, dict):
        assert isinstance(got, dict), where
        for key, value in shown.items():
            assert key in got, f"{where}.{key} missing from {got}"
            _matches(value, got[key], f"{where}.{key}")
    elif isinstance(shown, int | float) and not isinstance(shown, bool):
        assert isinstance(got, int | float), where  # an example's number: any number
    else:
        assert got == shown, f"{where}: README {shown!r}, got {got!r}"


def test_the_readme_step_mode_flow_reproduces(up: Upstream, tmp_path: Path) -> None:
    (block,) = [
        b
        for lang, b in code_blocks(section((ROOT / "docs" / "proxy.md").read_text(), "Step mode"))
        if lang == "sh"
    ]
    steps = re.split(r"^\$ ", block, flags=re.M)[1:]
    assert len(steps) == 2
    config = examples_config({"deepseek-official": up.url("ok"), "zhipu-api": up.url("ok")})
    env = {"ZHIPU_API_KEY": KEYS["ZHIPU_API_KEY"], "DEEPSEEK_API_KEY": ""}
    env["OLLAMA_HOST"] = f"http://127.0.0.1:{up.port}/s/ollama-readme"
    proxy = start(config, tmp_path, up, env=env)
    try:
        for step in steps:
            command, _, shown = step.partition("}'\n")
            words = shlex.split(command.replace("\\\n", " ") + "}'")
            url = next(w for w in words if "localhost:8000" in w)
            url = "http://" + url.replace("localhost:8000", f"127.0.0.1:{proxy.port}")
            body = words[words.index("-d") + 1].encode()
            headers = dict(words[i + 1].split(": ", 1) for i, w in enumerate(words) if w == "-H")
            request = urllib.request.Request(url, body, headers, method="POST")
            with urllib.request.urlopen(request, timeout=10) as resp:
                got = json.loads(resp.read())
            _matches(_readme_json(shown), got, url)
    finally:
        assert stop(proxy) == 0
    # the first step sent nothing (no key); the second asked Zhipu's first model
    assert [b["model"] for b in up.bodies("ok")] == ["glm-4-flash"]
