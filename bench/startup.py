"""CLI start-up time: `agent-reach --version` and `--help` against a bare `python -c pass`,
measured in one run (median of N runs each, interleaved).

    .venv/bin/python bench/startup.py [--runs 20]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

BIN = str(Path(sys.executable).parent / "agent-reach")
COMMANDS = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "agent-reach --version": [BIN, "--version"],
    "agent-reach --help": [BIN, "--help"],
    "agent-reach config schema": [BIN, "config", "schema"],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for _ in range(args.runs):
        for name, cmd in COMMANDS.items():
            start = time.perf_counter()
            subprocess.run(cmd, check=True, capture_output=True)
            times[name].append((time.perf_counter() - start) * 1000)
    base = statistics.median(times["python -c pass"])
    print(f"start-up, median of {args.runs} runs")
    for name, values in times.items():
        med = statistics.median(values)
        print(f"{name:<28} {med:7.1f} ms  ({med / base:.1f}x bare python)")


if __name__ == "__main__":
    main()
