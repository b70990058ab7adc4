"""How long a provider said to wait (protocol §5): `Retry-After` (seconds or an HTTP date),
`retry-after-ms`, Anthropic's `anthropic-ratelimit-*-reset` of a limit used up, and a reset
time written in an error's message (Zhipu's, in Beijing time when it names no zone). Pure."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from email.utils import parsedate_to_datetime


def parse_retry_after(value: str | None, now: float) -> float | None:
    """Seconds to wait from a `Retry-After` value (delta-seconds or an HTTP date), or None."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - now)
    except (TypeError, ValueError, IndexError):
        return None


_RESET_AT = re.compile(r"(\d{4}-\d{2}-\d{2})[T ](\d{2}:\d{2}:\d{2})(?:\.\d+)?(Z|[+-]\d{2}:?\d{2})?")
# A reset time written without a zone (Zhipu's "您的限额将在 2026-08-25 07:41:44 重置") is
# Beijing time: the providers that write it so are in China (docs/decisions.md).
_UNZONED = timezone(timedelta(hours=8))


def _stamp(text: str) -> float | None:
    """The first RFC 3339 / ISO 8601 timestamp in `text`, as unix seconds."""
    found = _RESET_AT.search(text)
    if found is None:
        return None
    day, clock, zone = found.groups()
    try:
        when = datetime.fromisoformat(f"{day}T{clock}{(zone or '').replace('Z', '+00:00')}")
    except ValueError:
        return None
    return (when if when.tzinfo else when.replace(tzinfo=_UNZONED)).timestamp()


def _reset_at(value: str, now: float) -> float | None:
    """A reset header as unix seconds: epoch seconds, a delta in seconds, or a timestamp."""
    try:
        number = float(value)
    except ValueError:
        return _stamp(value)
    return number if number >= 1e9 else now + number


def stated_wait(headers: Mapping[str, str] | None, message: str | None, now: float) -> float | None:
    """Seconds until the provider said it takes requests again, or None when it said nothing:
    the longest of `Retry-After`, `retry-after-ms`, each `anthropic-ratelimit-*-reset` of a
    limit that is used up (its `-remaining` 0 or its `-status` rejected, when it says), and a
    reset time written in the error's `message` (pass it only for a quota or a rate limit)."""
    waits: list[float] = []
    for name, value in (headers or {}).items():
        key = name.lower()
        wait: float | None = None
        if key == "retry-after":
            wait = parse_retry_after(value, now)
        elif key == "retry-after-ms":
            wait = _seconds(value, 1000)
        elif key.startswith("anthropic-ratelimit-") and key.endswith("-reset"):
            limit = key.removesuffix("-reset")
            left = header(headers, limit + "-remaining")
            state = header(headers, limit + "-status")
            at = _reset_at(value, now)
            if at is not None and left in (None, "0") and state in (None, "rejected"):
                wait = max(0.0, at - now)
        if wait is not None:
            waits.append(wait)
    at = _stamp(message) if message else None
    if at is not None and at > now:
        waits.append(at - now)
    return max(waits) if waits else None


def _seconds(value: str, per_second: float) -> float | None:
    try:
        return max(0.0, float(value) / per_second)
    except ValueError:
        return None


def header(headers: Mapping[str, str] | None, lower: str) -> str | None:
    for name, value in (headers or {}).items():
        if name.lower() == lower:
            return value.strip()
    return None
