"""Recent per-provider outcomes and latencies, and the latest failovers, for
`/agent-reach/v1/status` (and the status page), fed by events."""

from __future__ import annotations

import itertools
import time
from collections import deque
from typing import Any

from ..core.events import AttemptEvent, Event, RequestEvent


class RecentAttempts:
    """The last `window` attempts that reached each provider: (ok, ms)."""

    def __init__(self, window: int = 1000, failovers: int = 20) -> None:
        self.window = window
        self.by_provider: dict[str, deque[tuple[bool, float]]] = {}
        self.failovers: deque[dict[str, Any]] = deque(maxlen=failovers)

    def __call__(self, event: Event) -> None:
        if isinstance(event, RequestEvent):
            tried = [a for a in event.trace if a.sent]  # a skip is no failover
            for prev, nxt in itertools.pairwise(tried):
                if not prev.ok and prev.provider != nxt.provider:
                    self.failovers.appendleft(
                        {
                            "at": round(time.time(), 3),
                            "route": event.route,
                            "from": prev.provider,
                            "to": nxt.provider,
                            "reason": str(prev.reason),
                        }
                    )
        elif isinstance(event, AttemptEvent) and event.attempt.sent:
            a = event.attempt
            ring = self.by_provider.get(a.provider)
            if ring is None:
                ring = self.by_provider[a.provider] = deque(maxlen=self.window)
            ring.append((a.ok, a.ms))

    def summary(self, provider: str) -> dict[str, Any]:
        ring = self.by_provider.get(provider) or ()
        if not ring:
            return {"attempts": 0, "success_rate": None, "latency_ms": None}
        ok = [ms for good, ms in ring if good]
        return {
            "attempts": len(ring),
            "success_rate": round(len(ok) / len(ring), 4),
            "latency_ms": _percentiles(ok) if ok else None,
        }


def _percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)

    return {"p50": at(0.50), "p95": at(0.95), "p99": at(0.99)}
