"""What the parts of the peers' run share: where installs and configs are, the keys, the CPUs,
the upstream's 500, how much of everything (`Settings`), and running a logged command."""

from __future__ import annotations

import contextlib
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

from common import HERE

INSTALLS = HERE / ".peers"  # git-ignored
CONFIGS = HERE / "peers"
PROXY_KEY = "sk-bench-proxy"  # what clients present to a proxy
UPSTREAM_KEY = "sk-bench-upstream"  # what a proxy presents to the upstream
PROXY_CPU, LOAD_CPU = 0, 1


@dataclass(frozen=True)
class Settings:
    """How much of everything: the full run, or `--quick` to try the script out."""

    latency_requests: int = 2000
    load_seconds: float = 5.0
    failover_requests: int = 500
    streams: int = 40
    cold_runs: int = 3
    rss_requests: int = 100_000
    rss_max_s: float = 75.0
    phase_max_s: float = 90.0

    @classmethod
    def quick(cls) -> Settings:
        return cls(200, 1.0, 50, 5, 1, 5_000, 5.0, 20.0)


def run_logged(cmd: list[str], log: Path, timeout: float, cwd: Path | None = None) -> bool:
    with log.open("ab") as out:
        try:
            return (
                subprocess.run(
                    cmd, stdout=out, stderr=out, cwd=cwd, timeout=timeout, check=False
                ).returncode
                == 0
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            out.write(f"\n{cmd[0]}: {exc}\n".encode())
            return False


def tail(log: Path, lines: int = 3) -> str:
    with contextlib.suppress(OSError):
        text = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
        return " | ".join(text[-lines:])[-300:]
    return ""


ERROR_500 = json.dumps({"error": {"message": "bench: upstream failure", "type": "server_error"}})


# Issue 13, item 6: agent-reach's hop against nginx's, as ratios: (what, agent-reach's figure,
# nginx's figure, the ratio's limit, at least?). Failover figures are added p50 over the backup
# alone, through the same proxy.
AR, NGINX = "agent-reach", "nginx"
