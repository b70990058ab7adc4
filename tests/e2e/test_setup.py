"""The READMEs' set-up as a newcomer runs it: `make demo` in a fresh clone, with a fresh HOME and
nothing installed but Python and pip (the venv, the package and the demo, in one command)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from ..readme import README, ROOT, code_blocks, section


def test_make_demo_in_a_fresh_clone_as_written(tmp_path: Path) -> None:
    block = next(
        b for lang, b in code_blocks(section(README.read_text(), "Set up")) if lang == "sh"
    )
    demo = block.splitlines()[0].split("#")[0].strip()
    assert demo == "make demo"
    clone, home = tmp_path / "agent-reach", tmp_path / "home"
    home.mkdir()
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    # pip's own settings (index, certificates) come from the environment, as on a user's machine
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENT_REACH", "VIRTUAL_ENV"))}
    env["HOME"] = str(home)
    done = subprocess.run(
        ["bash", "-c", demo],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    assert "Traceback" not in out
    lines = [line.strip() for line in done.stdout.splitlines()]
    assert "Connecting to deepseek-official… connect_failed" in "\n".join(lines)
    assert any(line.startswith("Fallback to local-ollama, success!") for line in lines), out
    assert (clone / ".venv" / "bin" / "agent-reach").exists()
