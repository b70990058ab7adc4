"""Health checks (spec §6): probing a provider's health URL and remembering the answer.

Modes: `per_request` probes before every attempt; `cached` reuses a result for `ttl_s`;
`background` is `cached` whose results the proxy refreshes on a timer; `off` never probes.
Concurrent requests that need the same probe share one (single flight). Cached results are
kept in the state store as well, so a later CLI run (or another proxy sharing the store) skips
a provider found down within `ttl_s` without probing it again.
"""

from __future__ import annotations

import asyncio
import functools
import time
from dataclasses import replace

import aiohttp

from .backend import Backend
from .outcomes import Transport, classify
from .routing import Health
from .state import StateStore
from .transport import CLIENT_ERRORS, kind_of, timeouts


async def probe(
    session: aiohttp.ClientSession, backend: Backend, now: float, remaining_s: float
) -> Health:
    """One health check of `backend`, bounded by its timeouts and the time left."""
    assert backend.health_url is not None
    start = time.perf_counter()
    limit = asyncio.timeout(remaining_s)
    try:
        async with (
            limit,
            session.request(
                backend.spec.health_method,
                backend.health_url,
                headers=backend.health_headers,
                timeout=timeouts(backend.connect_s, backend.read_s, remaining_s),
                allow_redirects=False,
            ) as resp,
        ):
            raw = await resp.read()
            status, content_type = resp.status, resp.content_type
    except CLIENT_ERRORS as exc:
        kind, text = (Transport.DEADLINE, "") if limit.expired() else kind_of(exc)
        outcome = classify(transport=kind, transport_detail=text)
        return Health(False, now, outcome, ms=(time.perf_counter() - start) * 1000)
    ms = (time.perf_counter() - start) * 1000
    return backend.judge_health(status=status, content_type=content_type, raw=raw, now=now, ms=ms)


class HealthMonitor:
    """The latest health result of every provider (by its `state_key`), refreshed as the
    mode says."""

    def __init__(self, mode: str, ttl_s: float, store: StateStore) -> None:
        self.mode = mode
        self.ttl_s = ttl_s
        self.store = store
        self.results: dict[str, Health] = {}
        self._inflight: dict[str, asyncio.Task[Health]] = {}

    def enabled(self, backend: Backend) -> bool:
        return self.mode != "off" and backend.health_url is not None

    async def check(
        self,
        session: aiohttp.ClientSession,
        backend: Backend,
        now: float,
        remaining_s: float,
    ) -> tuple[Health, bool] | None:
        """(result, probed for this request), or None when the provider has no health check."""
        if not self.enabled(backend):
            return None
        if self.mode != "per_request":
            cached = self.results.get(backend.state_key)
            if cached is None or now - cached.checked_at >= self.ttl_s:
                kept = await self.store.health(backend.state_key)  # another run may have checked
                if kept is not None and (cached is None or kept.checked_at > cached.checked_at):
                    self.results[backend.state_key] = cached = kept
            if cached is not None and now - cached.checked_at < self.ttl_s:
                return cached, False
        return await self.refresh(session, backend, now, remaining_s), True

    async def refresh(
        self, session: aiohttp.ClientSession, backend: Backend, now: float, remaining_s: float
    ) -> Health:
        """Probe now (joining a probe already in flight) and remember the result."""
        task = self._inflight.get(backend.state_key)
        if task is None:
            task = asyncio.ensure_future(self._probe(session, backend, now, remaining_s))
            self._inflight[backend.state_key] = task
            task.add_done_callback(functools.partial(self._forget, backend.state_key))
        return await asyncio.shield(task)

    async def _probe(
        self, session: aiohttp.ClientSession, backend: Backend, now: float, remaining_s: float
    ) -> Health:
        result = await probe(session, backend, now, remaining_s)
        detail = backend.redact(result.outcome.detail)  # it is kept on disk: never a key
        if detail != result.outcome.detail:
            result = replace(result, outcome=replace(result.outcome, detail=detail))
        self.results[backend.state_key] = result
        if self.mode != "per_request":
            await self.store.set_health(backend.state_key, result, self.ttl_s)
        return result

    def _forget(self, name: str, _task: asyncio.Task[Health]) -> None:
        self._inflight.pop(name, None)
