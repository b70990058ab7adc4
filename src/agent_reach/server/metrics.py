"""Prometheus metrics (protocol §12), fed by engine events: the hot path knows nothing of them.

An event only adds to plain counters of this process (a dict entry per metric and labels, the
latest value of a gauge, the durations in a list); they reach the Prometheus metrics when
`/metrics` is read (`render`), or every `FLUSH_AT` durations if it is not: updating the
metrics themselves per event would take a lock and a few calls each.
"""

from __future__ import annotations

import itertools
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from ..core.events import AttemptEvent, CircuitEvent, Event, QuotaEvent, RequestEvent
from ..core.trace import EFFECTS, Circuit

_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
FLUSH_AT = 10_000  # durations held before they are observed, /metrics read or not
Labels = tuple[Any, tuple[str, ...]]  # a metric and its label values


class Metrics:
    """The proxy's metrics in a registry of their own; call it with every engine event."""

    def __init__(self, providers: list[str]) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        self._counts: dict[Labels, int] = {}  # increments not yet added
        self._values: dict[Labels, float] = {}  # gauges' values not yet set
        self._seconds: list[tuple[str, float]] = []  # (provider, duration) not yet observed
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
        self.embeddings = Counter(
            "agent_reach_embedding_requests",
            "Embeddings requests by space and outcome (one that moved to a fallback space counts "
            "in each space it was walked in).",
            ["space", "outcome"],
            registry=r,
        )
        self.vectors = Counter(
            "agent_reach_embedding_vectors",
            "Vectors returned, by the space and the provider they came from.",
            ["space", "provider"],
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
        # A pool's keys (`keys`, protocol §2.3), by their variables' names, never the values.
        self.key_attempts = Counter(
            "agent_reach_key_attempts",
            "Attempts of a provider with a pool of keys, by key (its variable) and reason.",
            ["provider", "key", "reason"],
            registry=r,
        )
        self.key_circuit_open = Gauge(
            "agent_reach_key_circuit_open",
            "1 while the circuit of a key of a provider's pool is open.",
            ["provider", "key"],
            registry=r,
        )
        self.reloads = Counter(
            "agent_reach_config_reloads",
            "Config reloads (SIGHUP or serve --watch) by result: ok, or error (old config kept).",
            ["result"],
            registry=r,
        )
        for result in ("ok", "error"):
            self.reloads.labels(result)
        self.skipped_records = Counter(
            "agent_reach_state_skipped_records",
            "Records and messages of the shared state store it could not read, and skipped.",
            registry=r,
        )
        self._skipped = 0  # what the store had counted at the last render
        self.in_flight = Gauge(
            "agent_reach_requests_in_flight",
            "Requests under way (streams until their end), health probes and this scrape aside.",
            registry=r,
        )
        self._tracked: set[str] = set()
        self.track(providers)

    def track(self, providers: list[str]) -> None:
        """Show new providers' circuit gauges from the start (at 0 until one opens)."""
        for name in providers:
            if name not in self._tracked:
                self._tracked.add(name)
                self.circuit_open.labels(name).set(0)

    def _child(self, metric: Any, *labels: str) -> Any:
        """`metric.labels(*labels)`, looked up once."""
        key = (id(metric), labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def _count(self, metric: Any, *labels: str, by: int = 1) -> None:
        key = (metric, labels)
        self._counts[key] = self._counts.get(key, 0) + by

    def __call__(self, event: Event) -> None:
        if isinstance(event, AttemptEvent):
            a = event.attempt
            self._count(self.attempts, a.provider, str(a.reason))
            if a.key is not None:
                self._count(self.key_attempts, a.provider, a.key, str(a.reason))
            if a.sent:
                self._seconds.append((a.provider, a.ms / 1000))
                if len(self._seconds) >= FLUSH_AT:
                    self.flush()
            if a.ok:
                self._values[(self.provider_up, (a.provider,))] = 1
            elif EFFECTS[a.reason].circuit in (Circuit.COUNTS, Circuit.OPENS):
                self._values[(self.provider_up, (a.provider,))] = 0
        elif isinstance(event, RequestEvent):
            outcome = "ok" if event.provider else "failed"
            self._count(self.requests, event.route, outcome, event.api)
            if event.api == "embeddings":
                space = event.model or ""
                self._count(self.embeddings, space, outcome)
                if event.provider:
                    by = len(event.answer["data"])
                    self._count(self.vectors, space, event.provider, by=by)
            trace = event.trace
            for prev, nxt in itertools.pairwise(trace):
                if not prev.ok and prev.provider != nxt.provider:
                    self._count(self.failovers, prev.provider, nxt.provider, str(prev.reason))
        elif isinstance(event, CircuitEvent):
            gauge, labels = (
                (self.circuit_open, (event.provider,))
                if event.key is None
                else (self.key_circuit_open, (event.provider, event.key))
            )
            self._values[(gauge, labels)] = 1 if event.opened else 0
        elif isinstance(event, QuotaEvent):
            self._values[(self.quota_used, (event.provider,))] = min(event.ratio, 1.0)

    def flush(self) -> None:
        """Add what the events since the last flush counted to the Prometheus metrics."""
        counts, values, seconds = self._counts, self._values, self._seconds
        self._counts, self._values, self._seconds = {}, {}, []
        for (metric, labels), n in counts.items():
            self._child(metric, *labels).inc(n)
        for (metric, labels), value in values.items():
            self._child(metric, *labels).set(value)
        for provider, duration in seconds:
            self._child(self.attempt_seconds, provider).observe(duration)

    def render(self, skipped_records: int, in_flight: int) -> bytes:
        """The text exposition format; `skipped_records`: what the state store has counted
        (`Router.skipped_records`); `in_flight`: the requests under way now."""
        self.flush()
        self.in_flight.set(in_flight)
        if skipped_records > self._skipped:
            self.skipped_records.inc(skipped_records - self._skipped)
            self._skipped = skipped_records
        return generate_latest(self.registry)
