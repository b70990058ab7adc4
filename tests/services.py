"""Real services the tests need, started on free loopback ports (installed by `.ci/run`)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from agent_reach.net.ports import free_port


@dataclass
class RedisServer:
    """A `redis-server` on 127.0.0.1 with nothing on disk; `kill` and `start` for chaos."""

    workdir: Path
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    password: str | None = None  # `--requirepass`

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (.ci/run installs it with apt-get)")
        self.port = self.port or free_port()
        self.proc = subprocess.Popen(
            [
                binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.workdir),
                *(("--requirepass", self.password) if self.password else ()),
            ],
            stdout=subprocess.DEVNULL,
        )
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith((b"+PONG", b"-NOAUTH")):
                        return
            except OSError:
                time.sleep(0.02)
        raise RuntimeError("redis-server did not start")

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(10)
            self.proc = None

    def flush(self) -> None:
        with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
            s.sendall(b"FLUSHALL\r\n")
            s.recv(16)


def chromium_flags(tmp_path: Path, budget_ms: int) -> list[str]:
    """Headless Chromium's command line, its profile under `tmp_path`, pages given
    `budget_ms` of virtual time to run their scripts."""
    chromium = shutil.which("chromium")
    assert chromium, "chromium is not installed (scripts/ensure-services.sh installs it)"
    return [
        chromium,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'chromium'}",
        f"--virtual-time-budget={budget_ms}",
    ]


def dumped_dom(tmp_path: Path, url: str, budget_ms: int = 4500) -> str:
    """The DOM of `url` once its scripts have had `budget_ms` of virtual time (headless
    Chromium's `--dump-dom`)."""
    return subprocess.run(
        [*chromium_flags(tmp_path, budget_ms), "--dump-dom", url],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
