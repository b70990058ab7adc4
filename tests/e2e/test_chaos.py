"""A short `make chaos`: random provider failures behind the proxy, the invariants hold."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

CHAOS = Path(__file__).parents[2] / "bench" / "chaos.py"


@pytest.mark.slow
def test_short_chaos_drill() -> None:
    done = subprocess.run(
        [sys.executable, str(CHAOS), "--seconds", "8", "--concurrency", "6", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    result = json.loads(done.stdout)
    assert done.returncode == 0, result
    assert all(result["checks"].values())
    assert result["requests"] > 100
    assert result["covered_requests"] > 50
    assert result["success_rate_while_one_healthy"] == 1.0
    assert result["silent_truncations"] == 0
    assert result["over_deadline"] == 0
    assert result["unhandled_in_log"] == 0
    assert result["switches"] >= 8
