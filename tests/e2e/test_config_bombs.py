"""Config files built to hurt (protocol §2.2): nesting thousands deep and YAML alias bombs are
config errors, exit 2 with one line, quickly; a proxy being reloaded with one keeps serving."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

BIN = str(Path(sys.executable).parent / "agent-reach")
PROVIDERS = "providers:\n  - {name: a, endpoint: 'http://127.0.0.1:9/v1/chat/completions'}\n"


def alias_bomb(levels: int = 9) -> str:
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for n in range(1, levels + 1):
        refs = ",".join([f"*a{n - 1}"] * 10)
        lines.append(f"a{n}: &a{n} [{refs}]")
    return "defaults:\n  metadata:\n    x:\n" + "".join(f"      {line}\n" for line in lines)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("defaults:\n  extra_body: " + "[" * 5000 + "]" * 5000 + "\n", "nested deeper than"),
        ("defaults:\n  extra_body: {x: " + "[" * 250 + "]" * 250 + "}\n", "nested deeper than"),
        (alias_bomb(), "YAML aliases"),
    ],
)
def test_a_hostile_config_is_a_one_line_config_error(tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(text + PROVIDERS)
    started = time.monotonic()
    done = subprocess.run(
        [BIN, "config", "validate", str(path)], capture_output=True, text=True, check=False
    )
    assert time.monotonic() - started < 5
    assert done.returncode == 2, done
    assert says in done.stderr
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
