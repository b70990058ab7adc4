"""The layout `state/redis.py` keeps in Redis (protocol §12.1): keys, channel, messages, scripts.

Keys (all under `agent-reach:`), each with a TTL so nothing grows without bound:
- `circuit:{key}`        a hash, the fields of `CircuitState.to_dict` (failures, open_until,
                         trial, cause) as text; expires an hour after it would close; a closed
                         circuit is deleted.
- `health:{key}`         the latest health check result (JSON), expiring after `health.ttl_s`.
- `fails:{key}`          the fleet's count of consecutive failures (INCR), reset by a success,
                         expiring an hour after the last failure.
- `usage:{key}|{window}` a budget counter (INCRBY), expiring when its window ends.
- `cap:{key}|{model}`    an output cap learned from a provider's refusal, `tokens until`,
                         expiring at `until` (a day after it was learned).
- `claim:{key}`          SET NX PX: the first instance to claim an alert sends it.
- `response:{id}`        a stored Responses-API response (JSON), expiring after
                         `server.responses_ttl_s`.
- `responses`            a sorted set of the stored responses' ids by when they were stored,
                         and `responses:meta` a hash id → `size|expiry|owner`: what eviction
                         reads.
- `attempts`             a stream (XADD, trimmed to the retention with MINID and ~100k
                         entries), read by `agent-reach report`.
Channel `agent-reach:circuits`: every circuit change is published (`instance|key|` and the
circuit's `to_dict` as JSON); each instance applies its peers' at once, and the periodic
re-read of the cached view stays as the fallback for what a dropped subscription missed.

Each reader below is the inverse of a writer, and gives None for a record or message it cannot
read (written by hand, by another program, by an older version): the store skips and counts it,
and reads on.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Mapping
from typing import Any, ParamSpec, TypeVar
from urllib.parse import urlsplit, urlunsplit

from ..core.breaker import CircuitState
from ..core.routing import Health
from .store import LearnedCap, LoggedAttempt

P = ParamSpec("P")
T = TypeVar("T")


def _none_if_unreadable(read: Callable[P, T]) -> Callable[P, T | None]:
    """`read`, giving None for a value it cannot read rather than raising."""

    @functools.wraps(read)
    def reader(*args: P.args, **kwargs: P.kwargs) -> T | None:
        try:
            return read(*args, **kwargs)
        except (ValueError, KeyError, TypeError, AttributeError):
            return None

    return reader


PREFIX = "agent-reach:"
CHANNEL = f"{PREFIX}circuits"

# The half-open trial, claimed atomically: won when the circuit is still cooled down (its
# `open_until` passed and nobody leased it since); the lease (its `fields`, from ARGV[5] on) is
# written and published.
CLAIM_TRIAL = """
local ends = tonumber(redis.call('HGET', KEYS[1], 'open_until') or '0')
if ends > tonumber(ARGV[1]) then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV, 5))
redis.call('EXPIRE', KEYS[1], ARGV[2])
redis.call('PUBLISH', ARGV[3], ARGV[4])
return 1
"""


def message(instance: str, key: str, state: CircuitState) -> str:
    """A circuit change as published on `CHANNEL`."""
    return f"{instance}|{key}|{json.dumps(state.to_dict())}"


@_none_if_unreadable
def parse(message: str) -> tuple[str, str, CircuitState]:
    """(instance, key, state) of a published circuit change."""
    instance, key, state = message.split("|", 2)
    return instance, key, CircuitState.from_dict(json.loads(state))


def fields(state: CircuitState) -> dict[str, str]:
    """A circuit as the fields of its `circuit:` hash (`to_dict`'s, as text)."""
    return {name: _text(value) for name, value in state.to_dict().items()}


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return str(int(value))
    return repr(value) if isinstance(value, float) else str(value)


@_none_if_unreadable
def circuit_of(found: Mapping[str, str]) -> CircuitState:
    """The circuit of a `circuit:` hash (`fields`)."""
    return CircuitState.from_dict(found)


@_none_if_unreadable
def count_of(value: str) -> int:
    """A `fails:` or `usage:` counter."""
    return int(value)


@_none_if_unreadable
def health_of(value: str) -> Health:
    """A `health:` key's value (`Health.to_dict` as JSON)."""
    return Health.from_dict(json.loads(value))


def cap_value(cap: LearnedCap) -> str:
    """A learned cap as its `cap:` key's value."""
    return f"{cap.tokens} {cap.until!r}"


@_none_if_unreadable
def cap_of(value: str) -> LearnedCap:
    """The learned cap of a `cap:` key's value (an older version's plain number is none)."""
    tokens, _, until = value.partition(" ")
    return LearnedCap(int(tokens), float(until))


def attempt_fields(r: LoggedAttempt) -> dict[str, Any]:
    """An attempt-log line as the fields of its `attempts` stream entry."""
    return {
        "ts": r.ts,
        "request": r.request,
        "route": r.route,
        "provider": r.provider,
        "reason": r.reason,
        "status": "" if r.status is None else r.status,
        "ms": r.ms,
        "sent": int(r.sent),
        "last_resort": int(r.last_resort),
    }


@_none_if_unreadable
def attempt_of(f: Mapping[str, str]) -> LoggedAttempt:
    """The attempt-log line of an `attempts` stream entry (`attempt_fields`)."""
    return LoggedAttempt(
        float(f["ts"]),
        f["request"],
        f["route"],
        f["provider"],
        f["reason"],
        int(f["status"]) if f["status"] else None,
        float(f["ms"]),
        f.get("sent", "1") == "1",  # an older version's line: taken as sent
        f["last_resort"] == "1",
    )


def meta_value(size: int, expires: float, owner: str) -> str:
    """A stored response's entry in `responses:meta`."""
    return f"{size}|{expires}|{owner}"


@_none_if_unreadable
def meta_of(value: str) -> tuple[int, float, str]:
    """(size, expiry, owner) of a `responses:meta` entry (`meta_value`)."""
    size, until, owner = value.split("|", 2)
    return int(size), float(until), owner


def glob_escaped(text: str) -> str:
    """`text` matched literally in a SCAN pattern."""
    return re.sub(r"([*?\[\]\\])", r"\\\1", text)


def public_url(url: str) -> str:
    """The URL without its password, for log lines."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))
