"""Prometheus metrics (protocol §12), fed by engine events: the hot path knows nothing of them."""

from __future__ import annotations

import itertools
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from ..events import AttemptEvent, CircuitEvent, Event, QuotaEvent, RequestEvent
from ..trace import CIRCUIT_FAILURES, Reason

_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_SKIPS = frozenset({Reason.CIRCUIT_OPEN, Reason.UNHEALTHY, Reason.QUOTA_EXHAUSTED})


class Metrics:
    """The proxy's metrics in a registry of their own; call it with every engine event."""

    def __init__(self, providers: list[str]) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        r = self.registry
        self.requests = Counter(
            "agent_reach_requests",
            "Requests by route, outcome and the API they arrived in.",
            ["route", "outcome", "api"],
            registry=r,
        )
        self.attempts = Counter(
            "agent_reach_attempts",
            "Attempts by provider and reason.",
            ["provider", "reason"],
            registry=r,
        )
        self.attempt_seconds = Histogram(
            "agent_reach_attempt_seconds",
            "Duration of attempts that reached a provider.",
            ["provider"],
            buckets=_BUCKETS,
            registry=r,
        )
        self.failovers = Counter(
            "agent_reach_failovers",
            "Moves from one provider to the next, with the reason.",
            ["from_provider", "to_provider", "reason"],
            registry=r,
        )
        self.provider_up, self.circuit_open, self.quota_used = (
            Gauge(name, doc, ["provider"], registry=r)
            for name, doc in (
                ("agent_reach_provider_up", "1 if the provider's last attempt succeeded, else 0."),
                ("agent_reach_circuit_open", "1 while the provider's circuit is open."),
                ("agent_reach_quota_used_ratio", "Share of the provider's tightest budget used."),
            )
        )
        self.reloads = Counter(
            "agent_reach_config_reloads",
            "Config reloads (SIGHUP or serve --watch) by result: ok, or error (old config kept).",
            ["result"],
            registry=r,
        )
        for result in ("ok", "error"):
            self.reloads.labels(result)
        self._tracked: set[str] = set()
        self.track(providers)

    def track(self, providers: list[str]) -> None:
        """Show new providers' circuit gauges from the start (at 0 until one opens)."""
        for name in providers:
            if name not in self._tracked:
                self._tracked.add(name)
                self.circuit_open.labels(name).set(0)

    def _child(self, metric: Any, *labels: str) -> Any:
        """`metric.labels(*labels)`, looked up once: the hot path only increments."""
        key = (id(metric), labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def __call__(self, event: Event) -> None:
        if isinstance(event, AttemptEvent):
            a = event.attempt
            self._child(self.attempts, a.provider, a.reason.value).inc()
            if a.ms and a.reason not in _SKIPS:
                self._child(self.attempt_seconds, a.provider).observe(a.ms / 1000)
            if a.ok:
                self._child(self.provider_up, a.provider).set(1)
            elif a.reason in CIRCUIT_FAILURES or a.reason is Reason.AUTH_FAILED:
                self._child(self.provider_up, a.provider).set(0)
        elif isinstance(event, RequestEvent):
            outcome = "ok" if event.provider else "failed"
            self._child(self.requests, event.route, outcome, event.api).inc()
            trace = event.trace
            for prev, nxt in itertools.pairwise(trace):
                if not prev.ok and prev.provider != nxt.provider:
                    self.failovers.labels(prev.provider, nxt.provider, prev.reason.value).inc()
        elif isinstance(event, CircuitEvent):
            self.circuit_open.labels(event.provider).set(1 if event.opened else 0)
        elif isinstance(event, QuotaEvent):
            self._child(self.quota_used, event.provider).set(min(event.ratio, 1.0))

    def render(self) -> bytes:
        """The text exposition format."""
        return generate_latest(self.registry)
