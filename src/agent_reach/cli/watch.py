"""What `run` tells the user while the program runs (protocol §11, `run`): only what is new.

One line when something changes: a request failed over past a provider for a reason not said
yet, or to another provider than the last failover; a provider went down (its reason and
detail) or came back; a model's output cap was learned; a request no provider answered (a run
of the same is one line and a count). Nothing for a request that met what was said already (a
provider known down passed over again), and a summary when the program ends. Each attempt's
detail (`connection refused`, `DNS lookup failed`, `DEEPSEEK_API_KEY is not set`) is said the
first time its provider meets it.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import IO

from ..core.events import AttemptEvent, CapEvent, CircuitEvent, Event, RequestEvent
from ..core.trace import Attempt
from .render import chain, short

Told = tuple[str, str, str]  # (provider, label, detail) of an attempt said already


class Watch:
    """An engine observer that tells the user, one `write` a line, what is new in what the
    program's requests met."""

    def __init__(self, write: Callable[[str], None]) -> None:
        self.write = write
        self.last = ""  # the last failed request's line, without its time
        self.again = 0  # how many failed requests since met the same, unsaid
        self.requests = 0
        self.failovers = 0
        self.failed = 0
        self.answered: Counter[str] = Counter()
        self.down: set[str] = set()
        self.told: set[Told] = set()
        self.details: dict[str, str] = {}  # each provider's last failure's detail
        self.answering: str | None = None  # who answered the last failover said

    def __call__(self, event: Event) -> None:
        if isinstance(event, AttemptEvent):
            if not event.attempt.ok and event.attempt.detail:
                self.details[event.attempt.who] = event.attempt.detail
        elif isinstance(event, RequestEvent):
            self._request(event)
        elif isinstance(event, CircuitEvent):
            self._circuit(event)
        elif isinstance(event, CapEvent):
            self.flush()
            self.write(
                f"{event.provider}: {event.model} takes at most {event.tokens} output tokens"
                f" (its refusal said so), kept for {event.keep_s:.0f} s"
            )

    def _request(self, event: RequestEvent) -> None:
        self.requests += 1
        took = f"{sum(a.ms for a in event.trace) / 1000:.1f} s"
        if event.provider is None:
            self.failed += 1
            self._say(f"{event.model or '-'}: no provider answered: ", event.trace, took)
            return
        self.answered[event.provider] += 1
        if len(event.trace) > 1:
            self.failovers += 1
            new = any(self._new(a) for a in event.trace if not a.ok)
            if new or event.provider != self.answering:
                self.answering = event.provider
                self.flush()
                self.last = ""
                self.write(f"{self._chain(event.trace)}, {took}")

    def _new(self, a: Attempt) -> bool:
        """Whether the user has not been told of attempt `a` yet: its provider down and passed
        over, or the same failure said before, is not news."""
        if a.label == "skip(circuit_open)" and a.who in self.down:
            return False
        return (a.who, a.label, a.detail or "") not in self.told

    def _chain(self, trace: Iterable[Attempt]) -> str:
        """`dead connect_failed (connection refused) → local ok`: each attempt, with its
        detail the first time it is said."""
        parts = []
        for a in trace:
            text = f"{a.who} {a.label}"
            if not a.ok and self._new(a):
                self.told.add((a.who, a.label, a.detail or ""))
                if a.detail:
                    text += f" ({short(a.detail, 80)})"
            parts.append(text)
        return " → ".join(parts)

    def _say(self, head: str, trace: tuple[Attempt, ...], took: str) -> None:
        """`head`, the attempts and `took` for a failed request, unless the last such line
        met the same (the agent retrying it): then a count, said with the next line."""
        same = head + chain(trace)
        if same == self.last:
            self.again += 1
            return
        self.flush()
        self.last = same
        self.write(f"{head}{self._chain(trace)}, {took}")

    def flush(self) -> None:
        """Say how many requests met the same as the last line, if any did."""
        if self.again:
            self.write(f"(and {self.again} more like it)")
            self.again = 0

    def _circuit(self, event: CircuitEvent) -> None:
        self.flush()
        name = event.provider if event.key is None else f"{event.provider}/{event.key}"
        if event.opened and name not in self.down:
            self.down.add(name)
            left = max(0.0, event.state.open_until - time.time())
            cause = str(event.state.cause)
            detail = self.details.get(name, "")
            self.told.add((name, cause, detail))  # the failure that opened it: said here
            why = f"{cause}: {short(detail, 80)}" if detail else cause
            self.write(f"{name} is down ({why}), skipped for {left:.0f} s")
        elif not event.opened and name in self.down:
            self.down.discard(name)
            self.write(f"{name} is back")

    def summary(self) -> str:
        """`3 requests, 2 failed over, 1 failed; answered by local (2)`."""
        self.flush()
        text = f"{self.requests} request{'' if self.requests == 1 else 's'}"
        text += f", {self.failovers} failed over, {self.failed} failed"
        if self.answered:
            used = ", ".join(f"{name} ({n})" for name, n in self.answered.most_common())
            text += f"; answered by {used}"
        return text


def writer(*streams: IO[str]) -> Callable[[str], None]:
    """Write `agent-reach: line` to each of `streams`, at once."""

    def write(line: str) -> None:
        for stream in streams:
            stream.write(f"agent-reach: {line}\n")
            stream.flush()

    return write
