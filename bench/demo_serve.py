"""`agent-reach demo --serve`: from the command to its simulated providers answering, and from
Ctrl-C (SIGINT) to its exit (median of N runs). The goal: up in under 2 s.

    .venv/bin/python bench/demo_serve.py [--runs 10]

"Up" is the first chat completion answered by its working model, asked for as soon as the
command has printed the model's URL.
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

BIN = str(Path(sys.executable).parent / "agent-reach")


def once(home: str) -> tuple[float, float]:
    """(seconds until a chat request is answered, seconds from SIGINT to exit)."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        [BIN, "demo", "--serve"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={"HOME": home, "PATH": "/usr/bin:/bin"},
    )
    assert proc.stdout is not None
    while (line := proc.stdout.readline()) and "local-model" not in line:
        pass
    match = re.search(r"(http://127\.0\.0\.1:\d+/v1)", line)
    assert match, line
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
    request = urllib.request.Request(
        match[1] + "/chat/completions", body, {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as resp:
        json.loads(resp.read())
    up = time.perf_counter() - start
    stop = time.perf_counter()
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=10)
    assert proc.returncode == 0
    return up, time.perf_counter() - stop


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as home:
        runs = [once(home) for _ in range(args.runs)]
    up = statistics.median(r[0] for r in runs)
    down = statistics.median(r[1] for r in runs)
    print(f"demo --serve, median of {args.runs} runs: up and answering in {up:.2f} s (goal < 2 s),")
    print(f"stopped {down:.2f} s after SIGINT, exit 0")


if __name__ == "__main__":
    main()
