"""Health checks (protocol §6): probing a provider's health URL and remembering the answer.

Modes: `per_request` checks before every attempt; `cached` reuses a result for `ttl_s`;
`background` is `cached` whose results the proxy refreshes on a timer; `off` never checks.
Concurrent requests that need the same check share one (single flight). Cached results are
kept in the state store as well, so a later CLI run (or another proxy sharing the store) skips
a provider found down within `ttl_s` without probing it again.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable
from dataclasses import dataclass, replace

from ..core.outcomes import Transport, classify
from ..core.routing import Health, model_listed
from ..core.trace import EFFECTS, Reason
from ..net.transport import CLIENT_ERRORS, past_deadline, transport_failure, whole_timeouts
from ..net.upstream import Client
from ..state import StateStore
from . import judge
from .prepared import PreparedProvider


@dataclass(frozen=True, slots=True)
class CheckResult:
    """One provider's health check as `check`, `init` and `probe` report it."""

    provider: str
    url: str | None  # its health URL, redacted; None: it has none (a TCP connect was tried)
    reachable: bool  # something answered at its endpoint or health URL
    usable: bool  # a request would be sent to it
    health: str  # "ok", "none" (no health check), else the reason it failed
    detail: str  # why, in words ("" when ok), keys redacted
    models: list[str] | None  # what its health check lists (None: it lists none)
    latency_ms: float | None  # of the health check or the TCP connect; None when unreachable
    status: int | None = None  # the HTTP status of a failed health check
    via: str | None = None  # the proxy it went through ("proxy host:port from VAR"), if any


async def check_provider(
    session: Client, prepared: PreparedProvider, model: str | None, now: float
) -> CheckResult:
    """Check one provider now, its health URL or (without one) a TCP connect to its
    endpoint; with `model`, its health check must list that model."""

    status: int | None = None

    def result(
        reachable: bool, health: str, detail: str, models: list[str] | None, ms: float
    ) -> CheckResult:
        usable = health in ("ok", "none") and reachable
        latency = round(ms, 1) if reachable else None
        shown = None if url is None else prepared.redact(url)  # a `${VAR}` key in its query
        return CheckResult(
            prepared.name, shown, reachable, usable, health, detail, models, latency, status, via
        )

    url = prepared.health_url
    proxy = prepared.proxy if url is None else prepared.health_proxy
    via = proxy.named if proxy else None
    if url is None:
        reachable, ms = await _connects(session, prepared)
        named = f" ({via})" if via else ""
        detail = "" if reachable else f"no TCP connection to its endpoint{named}"
        return result(reachable, "none", detail, None, ms)
    health = await run_check(session, prepared, now, prepared.connect_s + prepared.read_s)
    reached = not EFFECTS[health.outcome.reason].transport
    status = health.outcome.status
    listed = sorted(health.models) if health.models is not None else None
    if prepared.missing_key:
        return result(
            reached,
            str(Reason.AUTH_FAILED),
            f"{prepared.missing_key} is not set",
            listed,
            health.ms,
        )
    if not health.ok:
        detail = prepared.redact(health.outcome.detail)
        return result(reached, str(health.outcome.reason), detail, listed, health.ms)
    wanted = prepared.model_for(model) if model else ""
    if wanted and health.models is not None and not model_listed(wanted, health.models):
        return result(
            True, str(Reason.MODEL_UNAVAILABLE), f"{wanted!r} is not listed", listed, health.ms
        )
    return result(True, "ok", "", listed, health.ms)


async def _connects(session: Client, prepared: PreparedProvider) -> tuple[bool, float]:
    """A TCP connect to the endpoint, for providers without a health check (through its
    proxy: a CONNECT tunnel the proxy opens): (ok, ms)."""
    start = time.perf_counter()
    try:
        await session.reach(prepared.spec.endpoint, prepared.proxy, prepared.connect_s)
    except CLIENT_ERRORS:
        return False, (time.perf_counter() - start) * 1000
    return True, (time.perf_counter() - start) * 1000


async def run_check(
    session: Client, prepared: PreparedProvider, now: float, remaining_s: float
) -> Health:
    """One health check of `prepared`, bounded by its timeouts and the time left."""
    assert prepared.health_url is not None
    start = time.perf_counter()
    try:
        resp, raw = await session.fetch(
            prepared.spec.health_method,
            prepared.health_url,
            b"",
            prepared.health_headers,
            whole_timeouts(prepared.connect_s, prepared.read_s, remaining_s),
            prepared.tls,
            prepared.health_proxy,
        )
        status, content_type = resp.status, resp.content_type
    except CLIENT_ERRORS as exc:
        outcome = transport_failure(exc, past_deadline(exc), prepared.health_proxy)
        return Health(False, now, outcome, ms=(time.perf_counter() - start) * 1000)
    ms = (time.perf_counter() - start) * 1000
    result = judge.health(
        prepared, status=status, content_type=content_type, raw=raw, now=now, ms=ms
    )
    detail = prepared.redact(result.outcome.detail)  # it is shown and kept: never a key
    if detail == result.outcome.detail:
        return result
    return replace(result, outcome=replace(result.outcome, detail=detail))


class HealthMonitor:
    """The latest health result of every provider (by its `state_key`), refreshed as the
    mode says."""

    def __init__(self, mode: str, ttl_s: float, store: StateStore) -> None:
        self.mode = mode
        self.ttl_s = ttl_s
        self.store = store
        self.results: dict[str, Health] = {}
        self._inflight: dict[str, asyncio.Task[Health]] = {}

    def enabled(self, prepared: PreparedProvider) -> bool:
        return self.mode != "off" and prepared.health_url is not None

    async def consult(
        self,
        session: Client,
        prepared: PreparedProvider,
        now: float,
        remaining_s: float,
    ) -> tuple[Health, bool]:
        """(result, checked for this request) of an `enabled` provider's health check: a
        recent one (here or in the store), or one run now, bounded by `remaining_s`."""
        if self.mode != "per_request":
            cached = self.results.get(prepared.state_key)
            if cached is None or now - cached.checked_at >= self.ttl_s:
                kept = await self.store.health(prepared.state_key)  # another run may have checked
                if kept is not None and (cached is None or kept.checked_at > cached.checked_at):
                    self.results[prepared.state_key] = cached = kept
            if cached is not None and now - cached.checked_at < self.ttl_s:
                return cached, False
        return await self.refresh(session, prepared, now, remaining_s), True

    async def refresh(
        self,
        session: Client,
        prepared: PreparedProvider,
        now: float,
        remaining_s: float,
    ) -> Health:
        """Check now and remember the result. The check has the provider's own timeouts; a
        request waits for it no longer than its `remaining_s` (then: a `timeout`, "deadline"),
        so a short deadline of one client's makes no result for everyone."""
        task = self._inflight.get(prepared.state_key)
        if task is None:
            check = run_check(session, prepared, now, prepared.connect_s + prepared.read_s)
            task = asyncio.ensure_future(self._remember(prepared, check))
            self._inflight[prepared.state_key] = task
            task.add_done_callback(functools.partial(self._forget, prepared.state_key))
        try:
            return await asyncio.wait_for(asyncio.shield(task), max(remaining_s, 0.0))
        except TimeoutError:
            outcome = classify(transport=Transport.DEADLINE)
            return Health(False, now, outcome, ms=max(remaining_s, 0.0) * 1000)

    async def _remember(self, prepared: PreparedProvider, check: Awaitable[Health]) -> Health:
        result = await check
        self.results[prepared.state_key] = result
        if self.mode != "per_request":
            await self.store.set_health(prepared.state_key, result, self.ttl_s)
        return result

    def _forget(self, name: str, _task: asyncio.Task[Health]) -> None:
        self._inflight.pop(name, None)
