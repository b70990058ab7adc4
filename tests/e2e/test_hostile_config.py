"""Config files built to hurt (protocol §2.2): nesting thousands deep and YAML alias bombs are
config errors, exit 2 with one line, quickly; and a config error never shows what a `${VAR}`
held (a key with a typo around it), only the `${VAR}`."""

from __future__ import annotations

import os
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


def test_a_config_error_shows_the_variable_not_its_value(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("providers:\n  - {name: a, endpoint: 'htps://x.example/v1?key=${MY_KEY}'}\n")
    env = {**os.environ, "MY_KEY": "sk-secret-0a1b2c3d"}
    done = subprocess.run(
        [BIN, "config", "validate", str(path)], capture_output=True, text=True, env=env, check=False
    )
    assert done.returncode == 2
    assert "field 'endpoint'" in done.stderr
    assert "key=${MY_KEY}" in done.stderr
    assert "sk-secret-0a1b2c3d" not in done.stderr + done.stdout
