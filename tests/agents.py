"""The real coding agents (Codex CLI, Claude Code, Gemini CLI) from npm, for end-to-end tests."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / "tests" / ".agents" / "node_modules" / ".bin"
AGENT_CLIENT_KEY = "sk-agent-client-9f8e7d6c-SECRET"


# The newest Claude Code, beside the pinned one (scripts/ensure-agents.sh); `run` knows an
# agent by its program's name, so a test runs it through a link named `claude`.
NEWEST = {"claude-newest": BIN.parents[1] / "newest" / "node_modules" / ".bin" / "claude"}


def agent(name: str) -> Path:
    """The path of `codex`, `claude` or `gemini` (or `claude-newest`), installed at their
    pinned versions on first use."""
    subprocess.run([str(ROOT / "scripts" / "ensure-agents.sh")], check=True)
    path = NEWEST.get(name, BIN / name)
    if not path.exists():
        raise RuntimeError(f"{path} is missing after scripts/ensure-agents.sh")
    return path


def claude_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment Claude Code runs in, offline, with `extra` (`ANTHROPIC_BASE_URL` and
    `ANTHROPIC_API_KEY` to reach a proxy; `agent-reach run` sets those itself)."""
    return {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        **extra,
    }


def gemini_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment Gemini CLI runs in, offline, with `extra` (`GOOGLE_GEMINI_BASE_URL` and
    `GEMINI_API_KEY` to reach a proxy; `agent-reach run` sets those itself)."""
    return {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "GEMINI_CLI_TRUST_WORKSPACE": "true",  # headless in a folder it has never seen
        "NO_COLOR": "1",
        **extra,
    }


def answered_since(log: Path, path: str, seen: int, at_least: int = 2) -> list[str]:
    """Who answered each request on `path` the proxy's access `log` holds after its first
    `seen`: waited for until there are `at_least` of them (an agent's turn makes two, the tool
    call and its answer), 10 s at most."""
    deadline = time.monotonic() + 10
    while True:
        lines = [x for x in log.read_text().splitlines() if f" {path} 200 " in x]
        if len(lines) >= seen + at_least or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    return [m.group(1) for x in lines[seen:] if (m := re.search(r" provider=(\S+) ", x))]
