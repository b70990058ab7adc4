"""Budgets from `metadata.rate_limit` (protocol §12): parsing and windows. Pure.

`100req/day`, `60req/min`, `1000req/hour` count requests sent to the provider; `200000tok/day`
counts the tokens of its answers (`usage.total_tokens`). Several budgets may be given as a list
or comma-separated. A window is a calendar minute, hour or day in the config's `quota_tz`
(UTC by default); it is named by a key such as `day:2026-11-30`, so every process that shares
a store counts in the same window, and a new window starts from zero.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta, tzinfo
from typing import Any

from .trace import EFFECTS, Reason

_BUDGET = re.compile(r"^\s*(\d+)\s*(req|requests?|tok|tokens?)\s*/\s*(min|minute|hour|h|day|d)\s*$")
_WINDOWS = {"min": "min", "minute": "min", "hour": "hour", "h": "hour", "day": "day", "d": "day"}
_FORMAT = {"min": "%Y-%m-%dT%H:%M", "hour": "%Y-%m-%dT%H", "day": "%Y-%m-%d"}
_STEP = {"min": timedelta(minutes=1), "hour": timedelta(hours=1), "day": timedelta(days=1)}


@dataclass(frozen=True, slots=True)
class Budget:
    """One budget: `limit` requests (or tokens) per calendar `window`."""

    limit: int
    unit: str  # "req" or "tok"
    window: str  # "min", "hour" or "day"

    def __str__(self) -> str:
        return f"{self.limit}{self.unit}/{self.window}"

    def span(self, now: float, tz: tzinfo) -> tuple[str, float, float]:
        """The window that `now` (unix seconds) falls in: (its name, start, end)."""
        label = datetime.fromtimestamp(now, tz).strftime(_FORMAT[self.window])
        start = datetime.strptime(label, _FORMAT[self.window]).replace(tzinfo=tz)
        return f"{self.window}:{label}", start.timestamp(), (start + _STEP[self.window]).timestamp()


def parse(value: Any) -> tuple[Budget, ...]:
    """The budgets in a `rate_limit` value; ValueError names what is wrong."""
    items = value if isinstance(value, list) else str(value).split(",")
    budgets = []
    for item in items:
        m = _BUDGET.match(str(item))
        if not m:
            raise ValueError(
                f"rate_limit {item!r} is not like 100req/day, 60req/min or 200000tok/day"
            )
        unit = "req" if m.group(2).startswith("req") else "tok"
        budgets.append(Budget(int(m.group(1)), unit, _WINDOWS[m.group(3)]))
    return tuple(budgets)


class Windows:
    """The current window of each budget, worked out once and reused until the clock leaves
    it (the hot path only compares two numbers)."""

    def __init__(self, tz: tzinfo) -> None:
        self.tz = tz
        self._spans: dict[Budget, tuple[str, float, float]] = {}

    def current(self, budgets: tuple[Budget, ...], now: float) -> list[tuple[Budget, str, float]]:
        """(budget, its counter's key, the window's end) for each of `budgets` at `now`."""
        out = []
        for budget in budgets:
            span = self._spans.get(budget)
            if span is None or not span[1] <= now < span[2]:
                span = self._spans[budget] = budget.span(now, self.tz)
            out.append((budget, f"{span[0]}|{budget.unit}", span[2]))
        return out


def counts(reason: Reason) -> bool:
    """Whether an attempt that ended with `reason` counts against the provider's budgets: a
    request that was sent does (whatever came back); a refused connection sent nothing."""
    return EFFECTS[reason].budget


def spent(budget: Budget, response: Any) -> int:
    """What one answered request adds to `budget`: 1 request, or its `usage.total_tokens`."""
    if budget.unit == "req":
        return 1
    tokens = ((response if isinstance(response, dict) else {}).get("usage") or {}).get(
        "total_tokens"
    )
    return tokens if isinstance(tokens, int) else 0
