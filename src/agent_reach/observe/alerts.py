"""Alerts (protocol §12): engine events become messages to log, webhook and email sinks.

Events: `quota_threshold` (a budget reached the sink's `threshold`), `quota_exhausted`,
`circuit_opened`, `circuit_closed`, `all_providers_failed`. Each is sent at most once per
provider (per route, for `all_providers_failed`) per window: the budget's window for quota
events, `repeat_after_s` for the others. The store de-duplicates (`claim`), so several
processes sharing a store send one alert between them. Delivery runs in the background with
bounded retries; a failing sink is logged and never touches routing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import smtplib
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.message import EmailMessage
from typing import Any

import orjson

from ..config import Config, EmailAlert, LogAlert, WebhookAlert
from ..core.events import CircuitEvent, Event, QuotaEvent, RequestEvent
from ..state import StateStore

log = logging.getLogger("agent_reach.alerts")
Sink = LogAlert | WebhookAlert | EmailAlert
WEBHOOK_TRIES = 3


@dataclass(frozen=True, slots=True)
class Alert:
    """One alert, as every sink receives it."""

    event: str
    provider: str
    message: str
    at: float
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": "agent-reach",
            "host": socket.gethostname(),
            "event": self.event,
            "provider": self.provider,
            "message": self.message,
            "at": datetime.fromtimestamp(self.at, UTC).isoformat(timespec="seconds"),
            **self.details,
        }


class Alerts:
    """An engine observer that sends alerts; `drain` waits for deliveries in flight."""

    def __init__(
        self,
        config: Config,
        store: StateStore,
        clock: Callable[[], float],
        environ: dict[str, str] | os._Environ[str],
    ) -> None:
        self.sinks: list[Sink] = list(config.alerts)
        self.store = store
        self.clock = clock
        self.tz = config.tz
        self.environ = environ
        self.pending: set[asyncio.Task[None]] = set()
        self._sent: set[str] = set()  # claims this process already made

    def __call__(self, event: Event) -> None:
        if isinstance(event, QuotaEvent):
            self._quota(event)
        elif isinstance(event, CircuitEvent):
            name = "circuit_opened" if event.opened else "circuit_closed"
            why = f" after {event.state.cause}" if event.opened and event.state.cause else ""
            self._fire(name, event.provider, f"{event.provider}: circuit {name[8:]}{why}", {})
        elif isinstance(event, RequestEvent) and event.provider is None:
            reasons = ", ".join(f"{a.provider}: {a.reason}" for a in event.trace)
            details = {"route": event.route, "attempts": [a.to_dict() for a in event.trace]}
            message = f"route {event.route}: all providers failed ({reasons})"
            self._fire("all_providers_failed", event.route, message, details)

    def _quota(self, event: QuotaEvent) -> None:
        budget = event.budget
        details = {
            "budget": str(budget),
            "window": event.key.rpartition("|")[0],
            "used": event.used,
            "limit": budget.limit,
            "ratio": round(event.ratio, 4),
        }
        until = budget.span(event.now, self.tz)[2]
        for i, sink in enumerate(self.sinks):
            if event.used >= budget.limit:
                message = f"{event.provider}: {budget} is used up ({event.used}/{budget.limit})"
                self._fire(
                    "quota_exhausted", event.provider, message, details, [i], until, event.key
                )
            if event.ratio >= sink.threshold:
                share = f"{event.ratio:.0%} of {budget} used ({event.used}/{budget.limit})"
                message = f"{event.provider}: {share}"
                self._fire(
                    "quota_threshold", event.provider, message, details, [i], until, event.key
                )

    def _fire(
        self,
        name: str,
        provider: str,
        message: str,
        details: dict[str, Any],
        sinks: list[int] | None = None,
        until: float | None = None,
        window: str = "",
    ) -> None:
        now = self.clock()
        for i in range(len(self.sinks)) if sinks is None else sinks:
            sink = self.sinks[i]
            if sink.events is not None and name not in sink.events:
                continue
            key = f"alert|{i}|{name}|{provider}|{window}"
            if window and key in self._sent:
                continue  # this process already holds the claim for this window
            expires = until if until is not None else now + sink.repeat_after_s
            alert = Alert(name, provider, message, now, details)
            task = asyncio.get_running_loop().create_task(self._deliver(sink, key, expires, alert))
            self.pending.add(task)
            task.add_done_callback(self.pending.discard)

    async def _deliver(self, sink: Sink, key: str, until: float, alert: Alert) -> None:
        try:
            if not await self.store.claim(key, until, alert.at):
                return
            self._sent.add(key)
            if isinstance(sink, LogAlert):
                log.warning("agent-reach alert: %s", alert.message)
            elif isinstance(sink, WebhookAlert):
                await self._webhook(sink, alert)
            else:
                await asyncio.to_thread(self._email, sink, alert)
        except Exception as exc:  # a sink never breaks anything else
            log.warning("agent-reach: %s alert %s failed: %s", sink.type, alert.event, exc)

    async def _webhook(self, sink: WebhookAlert, alert: Alert) -> None:
        from ..net.transport import CLIENT_ERRORS, describe, new_session
        from ..net.upstream import Timeouts

        body = orjson.dumps(alert.to_dict())
        limit_s = sink.timeout_ms / 1000
        error = ""
        session = new_session()
        try:
            for attempt in range(WEBHOOK_TRIES):
                try:
                    resp, _ = await session.fetch(
                        "POST",
                        sink.url,
                        body,
                        {"Content-Type": "application/json"},
                        Timeouts(limit_s, limit_s, limit_s),
                    )
                    if resp.status < 300:
                        return
                    error = f"HTTP {resp.status}"
                    if resp.status < 500:
                        break  # the receiver refused it: trying again will not help
                except CLIENT_ERRORS as exc:
                    error = describe(exc) or "timed out"
                if attempt + 1 < WEBHOOK_TRIES:
                    await asyncio.sleep(0.5 * 2**attempt)
        finally:
            await session.close()
        raise RuntimeError(f"webhook at {sink.origin}: {error}")

    def _email(self, sink: EmailAlert, alert: Alert) -> None:
        msg = EmailMessage()
        msg["Subject"] = f"[agent-reach] {alert.event}: {alert.provider}"
        msg["From"] = sink.from_
        msg["To"] = ", ".join(sink.to) if isinstance(sink.to, list) else sink.to
        msg.set_content(
            f"{alert.message}\n\n"
            + orjson.dumps(alert.to_dict(), option=orjson.OPT_INDENT_2).decode()
        )
        with smtplib.SMTP(sink.smtp_host, sink.smtp_port, timeout=10) as smtp:
            if sink.starttls:
                smtp.starttls(context=ssl.create_default_context())
            user = self.environ.get(sink.username_env, "") if sink.username_env else ""
            password = self.environ.get(sink.password_env, "") if sink.password_env else ""
            if user:
                smtp.login(user, password)
            smtp.send_message(msg)

    async def drain(self, timeout: float = 10.0) -> None:
        """Wait (a bounded time) for deliveries in flight."""
        if self.pending:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*self.pending), timeout)
