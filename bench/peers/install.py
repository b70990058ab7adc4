"""The peers' installs, into bench/.peers/ (git-ignored): LiteLLM in its own venv, Portkey with
npm, nginx from Debian, matplotlib in a venv of its own for the chart; what each is (`versions`).
One that cannot be installed is left out, and the results say why."""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from common import HERE, ensure_apt

from .base import CONFIGS, INSTALLS, run_logged, tail

LITELLM_SPEC = "litellm[proxy]==1.108.7"
PLOT_SPEC = "matplotlib"
BIFROST = (
    "its npm package (@maximhq/bifrost) only downloads a Go binary at first run, and this "
    "machine reaches no host but the package registries"
)


# -- installs ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Install:
    ok: bool
    detail: str  # the version installed, or why it could not be
    seconds: float = 0.0
    path: str = ""  # the program, where there is one


def install_venv(name: str, spec: str, dist: str, logs: Path) -> Install:
    """A venv under bench/.peers/NAME with `spec` installed (kept across runs)."""
    start = time.monotonic()
    venv, log = INSTALLS / name, logs / f"install-{name}.log"
    stamp = venv / ".bench-installed"
    python = venv / "bin" / "python"
    if not (stamp.exists() and stamp.read_text() == spec and python.exists()):
        shutil.rmtree(venv, ignore_errors=True)
        ok = run_logged([sys.executable, "-m", "venv", str(venv)], log, 120) and run_logged(
            [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", spec],
            log,
            300,
        )
        if not ok:
            return Install(False, f"pip install {spec!r} failed: {tail(log)}")
        stamp.write_text(spec)
    version = subprocess.run(
        [str(python), "-c", f"import importlib.metadata as m; print(m.version({dist!r}))"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    return Install(bool(version), version or f"{dist} not importable", time.monotonic() - start)


def install_portkey(logs: Path) -> Install:
    """@portkey-ai/gateway with npm under bench/.peers/portkey (kept across runs)."""
    start = time.monotonic()
    folder, log = INSTALLS / "portkey", logs / "install-portkey.log"
    if not (shutil.which("node") and shutil.which("npm")):
        return Install(False, "node and npm are needed and not found")
    package = (CONFIGS / "portkey-package.json").read_text()
    server = folder / "node_modules" / "@portkey-ai" / "gateway" / "build" / "start-server.js"
    if not (server.exists() and (folder / "package.json").read_text() == package):
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        (folder / "package.json").write_text(package)
        if not run_logged(["npm", "install", "--no-audit", "--no-fund"], log, 180, cwd=folder):
            return Install(False, f"npm install failed: {tail(log)}")
    modules = folder / "node_modules"
    gateway = json.loads((modules / "@portkey-ai/gateway/package.json").read_text())["version"]
    hono = json.loads((modules / "@hono/node-server/package.json").read_text())["version"]
    return Install(True, f"{gateway} (@hono/node-server {hono})", time.monotonic() - start)


def need_nginx(logs: Path) -> Install:
    """nginx (`install_nginx`), or the run stops saying why there is none."""
    nginx = install_nginx(logs)
    if not nginx.ok:
        raise SystemExit(f"no nginx: {nginx.detail}")
    return nginx


def install_nginx(logs: Path) -> Install:
    start = time.monotonic()
    with (logs / "install-nginx.log").open("w") as log:
        nginx = ensure_apt("nginx", "nginx", log)
    if not nginx:
        return Install(False, "nginx is not installed and apt-get could not install it")
    out = subprocess.run([nginx, "-v"], capture_output=True, text=True, check=False)
    return Install(True, (out.stderr or out.stdout).strip(), time.monotonic() - start, nginx)


PEERS = ("nginx", "LiteLLM", "Portkey")  # beside agent-reach, which is always measured


def install_all(logs: Path, peers: tuple[str, ...] = PEERS) -> dict[str, Install]:
    """Everything the run needs that is not in agent-reach's venv, side by side: nginx (the
    upstream) always, the other `peers`, and matplotlib for the full run's chart."""
    jobs: dict[str, Callable[[], Install]] = {"nginx": lambda: install_nginx(logs)}
    if "LiteLLM" in peers:
        jobs["LiteLLM"] = lambda: install_venv("litellm", LITELLM_SPEC, "litellm", logs)
    if "Portkey" in peers:
        jobs["Portkey"] = lambda: install_portkey(logs)
    if peers == PEERS:
        jobs["matplotlib"] = lambda: install_venv("plot", PLOT_SPEC, "matplotlib", logs)
    with ThreadPoolExecutor(len(jobs)) as pool:
        futures = {name: pool.submit(job) for name, job in jobs.items()}
    done: dict[str, Install] = {}
    for name, future in futures.items():
        try:
            done[name] = future.result()
        except Exception as exc:
            done[name] = Install(False, f"{type(exc).__name__}: {exc}")
    return done


def versions(installs: dict[str, Install]) -> dict[str, str]:
    from agent_reach import __version__

    def output(cmd: list[str], cwd: Path | None = None) -> str:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run(
                cmd, capture_output=True, text=True, check=False, timeout=30, cwd=cwd
            )
            return (out.stdout or out.stderr).strip()
        return ""

    # read-only git: which agent-reach was measured, and whether src/ had uncommitted changes
    commit = output(["git", "rev-parse", "--short", "HEAD"], HERE.parent)
    dirty = output(["git", "diff", "--stat", "HEAD", "--", "src"], HERE.parent)
    source = (
        f" (commit {commit}{', src/ with uncommitted changes' if dirty else ''})" if commit else ""
    )
    wrk = re.search(r"wrk (\S+)", output(["wrk", "-v"]))
    return {
        "agent-reach": __version__ + source,
        **{
            label: installs[name].detail if installs[name].ok else "unavailable"
            for name, label in (("LiteLLM", "LiteLLM"), ("Portkey", "Portkey gateway"))
            if name in installs
        },
        "nginx": installs["nginx"].detail.removeprefix("nginx version: nginx/"),
        "wrk": wrk.group(1) if wrk else "unavailable",
        "node": output(["node", "--version"]) or "unavailable",
    }
