"""`agent-reach demo --serve` (issue 20, item 4): simulated providers that stay up until Ctrl-C
(a dead one, a 401 one, a chat model that drives a tool turn), the config it writes and the
commands it prints, run as printed with the real Codex CLI and Claude Code; `init` and
`examples/agents.yaml` against the same providers with no edit."""

from __future__ import annotations

import json
import re
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from ..agents import BIN as AGENTS_BIN
from ..agents import agent
from ..readme import README, ROOT, code_blocks, section

pytestmark = pytest.mark.agents

CLI = str(Path(sys.executable).parent / "agent-reach")
ANSWER = "The command printed: agent-reach-demo"
FAILOVERS = [
    "agent-reach: zhipu-api is down (auth_failed: Incorrect API key provided), skipped for 300 s",
    "agent-reach: deepseek-official connect_failed (connection refused) → zhipu-api auth_failed"
    " → local-model ok",
]


@dataclass
class Demo:
    proc: subprocess.Popen[str]
    lines: list[str]  # what it printed before it was ready
    env: dict[str, str]  # a fresh HOME, the agents on PATH, offline

    def printed(self, starts: str) -> str:
        return next(line.strip() for line in self.lines if line.strip().startswith(starts))

    @property
    def ollama_host(self) -> str:
        return re.search(r"OLLAMA_HOST=(\S+)", self.printed("OLLAMA_HOST="))[1]  # type: ignore[index]

    def shell(self, line: str, cwd: Path, **extra: str) -> subprocess.CompletedProcess[str]:
        """`line` as a user types it (`agent-reach` and the agents found on PATH)."""
        return subprocess.run(
            ["bash", "-c", line],
            cwd=cwd,
            env={**self.env, **extra},
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )


def _env(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    (home / ".codex").mkdir(parents=True)
    agent("codex")  # installed at the pinned versions
    path = f"{Path(CLI).parent}:{AGENTS_BIN}:/usr/bin:/bin"
    return {
        "PATH": path,
        "HOME": str(home),
        "CODEX_HOME": str(home / ".codex"),
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[Demo]:
    env = _env(tmp_path)
    proc = subprocess.Popen(
        [CLI, "demo", "--serve"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    lines = []
    while not lines or not lines[-1].lstrip().startswith("OLLAMA_HOST="):
        line = proc.stdout.readline()
        assert line, proc.stderr.read() if proc.stderr else ""
        lines.append(line)
    yield Demo(proc, lines, env)
    if proc.poll() is None:
        proc.kill()
    proc.communicate()  # and close its pipes


def agent_lines(done: subprocess.CompletedProcess[str]) -> list[str]:
    """`run`'s lines on stderr, without their timings."""
    return [
        re.sub(r", \d+\.\d s$", "", x)
        for x in done.stderr.splitlines()
        if x.startswith("agent-reach:")
    ]


def test_the_printed_commands_complete_a_tool_turn_and_ctrl_c_stops_it(
    demo: Demo, tmp_path: Path
) -> None:
    config = Path(demo.env["HOME"]) / ".agent-reach" / "demo.yaml"
    assert f"config: {config}\n" in demo.lines
    assert stat.S_IMODE(config.parent.stat().st_mode) == 0o700  # it made the folder
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    work = tmp_path / "work"
    work.mkdir()
    codex, claude, gemini = [x.strip() for x in demo.lines if " run -- " in x]
    assert " run -- codex exec " in codex
    assert " run -- claude -p " in claude
    assert " run -- gemini --skip-trust --yolo -p " in gemini
    for line in (codex, claude, gemini):
        done = demo.shell(line, work)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
        assert ANSWER in done.stdout
        lines = agent_lines(done)
        assert lines[:2] == FAILOVERS, done.stderr[-3000:]
        assert re.fullmatch(
            r"agent-reach: \d requests, \d failed over, 0 failed; answered by local-model \(\d\)",
            lines[-1],
        )
    demo.proc.send_signal(signal.SIGINT)
    out, err = demo.proc.communicate(timeout=10)
    assert demo.proc.returncode == 0, err
    assert out.endswith("agent-reach demo: stopped\n")
    assert "Traceback" not in err
    assert re.fullmatch(r"ready in \d\.\d\d s\n", err)


def test_the_printed_embed_line_embeds_offline(demo: Demo, tmp_path: Path) -> None:
    """`demo --serve` serves an embedding space too (a first day's stumble: nothing let a
    newcomer try embeddings offline): its printed `embed` line prints a unit vector of the
    space's width, the same for the same text."""
    line = next(x.strip() for x in demo.lines if " embed -m demo-embed " in x)
    work = tmp_path / "work"
    work.mkdir()
    first, again = demo.shell(line, work), demo.shell(line, work)
    assert first.returncode == 0, first.stderr
    vector = json.loads(first.stdout)
    assert len(vector) == 64
    assert abs(sum(v * v for v in vector) - 1.0) < 1e-3
    assert first.stdout == again.stdout


def test_init_and_examples_agents_yaml_serve_the_agents_with_no_edit(
    demo: Demo, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    host = demo.ollama_host
    init = demo.shell(demo.printed("OLLAMA_HOST="), work)
    assert init.returncode == 0, init.stderr
    assert "ollama: kept (Ollama answers at" in init.stdout
    prompt = '"Run echo in the shell and tell me what it printed."'
    runs = [
        f"agent-reach run -- codex exec --skip-git-repo-check {prompt}",
        f'agent-reach run -- claude -p {prompt} --allowedTools "Bash(echo:*)"',
    ]
    examples = f"agent-reach --config {ROOT / 'examples' / 'agents.yaml'} run -- "
    runs += [r.replace("agent-reach run -- ", examples) for r in runs]
    for line in runs:
        done = demo.shell(line, work, OLLAMA_HOST=host)
        assert done.returncode == 0, line + "\n" + done.stdout[-2000:] + done.stderr[-3000:]
        assert ANSWER in done.stdout, line
        assert "0 failed; answered by" in agent_lines(done)[-1]
    demo.proc.send_signal(signal.SIGINT)
    demo.proc.communicate(timeout=10)
    assert demo.proc.returncode == 0


def test_the_readme_quick_start_as_written(tmp_path: Path) -> None:
    text = section(README.read_text(), "Quick start with Codex CLI")
    start, tries, own = [body for lang, body in code_blocks(text) if lang == "sh"]
    env = _env(tmp_path)
    work = tmp_path / "work"  # a git repository, as where one runs an agent
    work.mkdir()
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    activate = f". {ROOT / '.venv' / 'bin' / 'activate'}"

    def shell(script: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", "-c", script.replace(". .venv/bin/activate", activate)],
            cwd=work,
            env={**env, **extra},
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
        )

    assert start.splitlines() == [". .venv/bin/activate", "agent-reach demo --serve"]
    proc = subprocess.Popen(
        ["bash", "-c", f"{activate}\nexec {start.splitlines()[1]}"],  # so SIGINT reaches it
        cwd=work,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        printed = []
        while not printed or not printed[-1].lstrip().startswith("OLLAMA_HOST="):
            printed.append(proc.stdout.readline())
            assert printed[-1], "demo --serve ended"
        host = re.search(r"OLLAMA_HOST=(\S+)", printed[-1])[1]  # type: ignore[index]
        for line in tries.splitlines():
            done = shell(f"{activate}\n{line}")
            assert done.returncode == 0, line + "\n" + done.stderr[-3000:]
            assert ANSWER in done.stdout, line
            assert agent_lines(done)[:2] == FAILOVERS, done.stderr[-3000:]
        # Own keys: the key is made up (its provider cannot be reached offline) and init also
        # keeps the Ollama that OLLAMA_HOST points at: the simulated model.
        done = shell(f"{activate}\n{own}", OLLAMA_HOST=host)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
        assert "deepseek: kept (DEEPSEEK_API_KEY is set)" in done.stdout
        assert done.stdout.count("The command printed") == 2, done.stdout
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=10)
    assert proc.returncode == 0
