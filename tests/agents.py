"""The real coding agents (Codex CLI, Claude Code) from npm, for end-to-end tests."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / "tests" / ".agents" / "node_modules" / ".bin"


def agent(name: str) -> Path:
    """The path of `codex` or `claude`, installed at their pinned versions on first use."""
    subprocess.run([str(ROOT / "scripts" / "ensure-agents.sh")], check=True)
    path = BIN / name
    if not path.exists():
        raise RuntimeError(f"{path} is missing after scripts/ensure-agents.sh")
    return path
