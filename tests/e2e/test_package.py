"""The distribution as users install it: `python -m build` makes an sdist and a wheel named
`agent-reach-router` (PyPI's `agent-reach` is another project), and `pipx install` of that wheel
into a fresh venv puts a working `agent-reach` on PATH: `--version` and the offline demo run."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from agent_reach.version import PROTOCOL_VERSION, __version__

ROOT = Path(__file__).parents[2]
DIST = "agent-reach-router"
STEM = f"agent_reach_router-{__version__}"


def run(*args: str | Path, env: dict[str, str] | None = None, timeout: float = 300) -> str:
    result = subprocess.run(
        [str(a) for a in args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
        cwd=ROOT,
    )
    assert result.returncode == 0, (args, result.stdout[-2000:], result.stderr[-2000:])
    return result.stdout


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    run(sys.executable, "-m", "build", "--outdir", out, ROOT)
    return out


def test_build_makes_an_sdist_and_a_wheel_under_the_new_name(dist: Path) -> None:
    assert sorted(p.name for p in dist.iterdir()) == [
        f"{STEM}-py3-none-any.whl",
        f"{STEM}.tar.gz",
    ]
    with zipfile.ZipFile(dist / f"{STEM}-py3-none-any.whl") as wheel:
        names = wheel.namelist()
        metadata = wheel.read(f"{STEM}.dist-info/METADATA").decode()
        entry_points = wheel.read(f"{STEM}.dist-info/entry_points.txt").decode()
    assert f"Name: {DIST}\n" in metadata
    assert "Provides-Extra: redis" in metadata
    assert "Provides-Extra: otel" in metadata
    assert "agent-reach = agent_reach.cli:main" in entry_points
    assert "agent_reach/py.typed" in names
    assert not [n for n in names if n.startswith(("tests/", "bench/"))]
    with tarfile.open(dist / f"{STEM}.tar.gz") as sdist:
        members = sdist.getnames()
    assert f"{STEM}/pyproject.toml" in members
    assert f"{STEM}/src/agent_reach/__init__.py" in members


def test_pipx_installs_the_wheel_with_the_command_on_path(dist: Path, tmp_path: Path) -> None:
    home, bin_dir = tmp_path / "pipx", tmp_path / "bin"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENT_REACH", "PIPX_"))}
    env.update(
        PIPX_HOME=str(home),
        PIPX_BIN_DIR=str(bin_dir),
        PIPX_MAN_DIR=str(tmp_path / "man"),
        HOME=str(tmp_path),
        # pipx's venv gets pip's settings (index, certificates) from this environment
        PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
    )
    wheel = dist / f"{STEM}-py3-none-any.whl"
    run(sys.executable, "-m", "pipx", "install", "--python", sys.executable, wheel, env=env)
    command = bin_dir / "agent-reach"
    assert command.exists(), sorted(p.name for p in bin_dir.iterdir())

    version = run("agent-reach", "--version", env=env)
    assert version.strip() == f"agent-reach {__version__} (protocol {PROTOCOL_VERSION})"

    # The venv pipx made holds the distribution under its new name, not the source tree.
    python = home / "venvs" / DIST / "bin" / "python"
    where = run(
        python,
        "-c",
        "import agent_reach, importlib.metadata as m;"
        f" print(m.version({DIST!r})); print(agent_reach.__file__)",
        env=env,
    ).split()
    assert where[0] == __version__
    assert where[1].startswith(str(home)), where

    demo = run("agent-reach", "demo", env=env, timeout=120)
    assert "Fallback to local-ollama, success!" in demo
    assert " chunks: " in demo  # the streamed request
