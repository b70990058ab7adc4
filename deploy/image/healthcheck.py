"""The image's HEALTHCHECK: GET /healthz of the `agent-reach serve` running in this container.

Exits 0 when it answers 200 within 3 s, else 1 with the reason on stderr. The address and port
are the last `--host` and `--port` on the server's command line, read from /proc (the check
runs beside it, in the same container): the image passes `--host 0.0.0.0 --port 8000`, and
arguments given after the image name (`podman run IMAGE --port 9000`) come later and win.
Kubernetes does not run this (the chart's probes call /healthz and /readyz themselves).
"""

from __future__ import annotations

import sys
import urllib.request
from pathlib import Path

DEFAULT_PORT = "8000"


def serve_argv() -> list[str]:
    """The command line of the oldest `agent-reach serve` process, or [] if none is seen."""
    pids = sorted(
        (p for p in Path("/proc").iterdir() if p.name.isdigit()), key=lambda p: int(p.name)
    )
    for pid in pids:
        try:
            argv = [a.decode(errors="replace") for a in (pid / "cmdline").read_bytes().split(b"\0")]
        except OSError:
            continue
        if "serve" in argv and any(a.endswith("agent-reach") for a in argv):
            return argv
    return []


def option(argv: list[str], name: str, default: str) -> str:
    """The last value of `--name VALUE` or `--name=VALUE` in argv."""
    value = default
    for i, word in enumerate(argv):
        if word == name and i + 1 < len(argv):
            value = argv[i + 1]
        elif word.startswith(name + "="):
            value = word.split("=", 1)[1]
    return value


def healthz_url(argv: list[str]) -> str:
    host = option(argv, "--host", "127.0.0.1")
    port = option(argv, "--port", DEFAULT_PORT)
    host = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}.get(host, host)
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}/healthz"


def main() -> int:
    url = healthz_url(serve_argv())
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via a proxy
    try:
        with opener.open(url, timeout=3) as response:
            status = response.status
    except OSError as exc:
        print(f"unhealthy: {url}: {exc}", file=sys.stderr)
        return 1
    if status != 200:
        print(f"unhealthy: {url}: HTTP {status}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
