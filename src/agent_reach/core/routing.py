"""The routing decision: which providers, in what order, which to skip, when to retry. Pure.

Theory of operation
-------------------
A request's way through the providers is decided here and carried out by `engine`, which does
all the I/O and reads all the clocks; nothing in this module sends a byte or reads the time.

1. `attempt_order` turns the request's `fallback_order` / `provider_route` and the config's
   `RouteTable` into an ordered tuple of provider names (protocol §3).
2. A `Walk` hands those names out one at a time. Before trying one, the engine gathers free
   facts about it (does it serve the model, is its key set, is its circuit open, what did its
   last health check say) and asks `precheck` / `health_verdict` whether to skip it (protocol §4
   step 1). A provider skipped for `circuit_open` or `unhealthy` is deferred: when the first
   pass ends without an answer, the `Walk` hands the deferred ones out again as last resort
   (protocol §4.2), so that remembered state alone never refuses a request. A provider whose
   usage limit is used up (`quota_exhausted_upstream`, `CircuitState.out`) is the exception:
   it said when it takes requests again, so no last resort reaches it before then.
3. After a failed try, `retry_delay` says whether to try the same provider again and after how
   long (its `retries`, backoff, `Retry-After`, the time left); else the walk moves on at once.

Given the same inputs these functions always give the same answer, so they are tested by
tables of cases with no sockets and no sleeps.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from .balance import DEFAULT, Signals, arranged
from .breaker import CircuitState, opened_detail
from .errors import RequestError, quoted
from .outcomes import Outcome
from .records import record
from .trace import EFFECTS, Reason

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Patterns(Generic[T]):
    """Names to values where a name may hold `*` wildcards, each standing for any run of
    characters (route names and `model_map` keys, protocol §3): a name given exactly wins,
    then the matching pattern with the most characters besides its `*`s (so `claude-*haiku*`
    before `claude-*` before `*`), then the first given."""

    exact: Mapping[str, T]
    wild: tuple[tuple[re.Pattern[str], str, T], ...] = ()

    @classmethod
    def of(cls, items: Mapping[str, T]) -> Patterns[T]:
        wild = [
            (re.compile(".*".join(map(re.escape, name.split("*")))), name, value)
            for name, value in items.items()
            if "*" in name
        ]
        wild.sort(key=lambda w: -(len(w[1]) - w[1].count("*")))  # stable: ties keep order
        return cls(items, tuple(wild))

    def find(self, name: str) -> tuple[str, T] | None:
        """(the name or pattern that matched, its value), or None."""
        value = self.exact.get(name)
        if value:
            return name, value
        for pattern, given, found in self.wild:
            if pattern.fullmatch(name):
                return given, found
        return None

    def get(self, name: str) -> T | None:
        found = self.find(name)
        return None if found is None else found[1]


@dataclass(frozen=True, slots=True)
class RouteTable:
    """The config's routes, resolved once at load: default order and named routes (a name
    with `*` is a pattern of model names, `Patterns`); `balanced`, the names of the orders
    (`DEFAULT` among them) that share traffic, each with its way (`weighted` by `weights`, or
    `latency`)."""

    default: tuple[str, ...]
    routes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    by_model: Patterns[tuple[str, ...]] = field(default_factory=lambda: Patterns({}))
    weights: Mapping[str, float] = field(default_factory=dict)
    balanced: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def build(
        cls,
        providers: Sequence[tuple[str, float]],
        fallback_order: Sequence[str] | None = None,
        routes: Mapping[str, Sequence[str]] | None = None,
        balanced: Mapping[str, str] | None = None,
    ) -> RouteTable:
        """`providers` as (name, fallback_weight) in file order."""
        if fallback_order:
            default = tuple(fallback_order)
        else:  # weight descending; `sorted` is stable, so ties keep file order
            default = tuple(n for n, _ in sorted(providers, key=lambda p: -p[1]))
        named = {k: tuple(v) for k, v in (routes or {}).items()}
        return cls(default, named, Patterns.of(named), dict(providers), dict(balanced or {}))

    def ordered(
        self, name: str, order: tuple[str, ...], signals: Signals | None
    ) -> tuple[str, ...]:
        """The order `name` gives one request: as written, or as its `balance` arranges it."""
        way = self.balanced.get(name)
        if signals is None or way is None:
            return order
        return arranged(way, order, self.weights, signals)

    def label(self, route: str, model: str | None) -> str:
        """The name of the route a request takes (`route`: its own, or "default"), for
        metrics, events and policies: a model alias names its route (protocol §3)."""
        found = self.by_model.find(model) if route == "default" and model else None
        return route if found is None else found[0]


def attempt_order(
    table: RouteTable,
    known: Container[str],
    *,
    fallback_order: Sequence[str] | None = None,
    provider_route: str | None = None,
    model: str | None = None,
    signals: Signals | None = None,
) -> tuple[str, ...]:
    """The providers to try for one request, in order (protocol §3): its `fallback_order`, its
    `provider_route`, a route named after its model (or a pattern it matches), the default;
    a balanced route's or default order drawn from `signals` (a client's own order never is).
    `RequestError` for a name that does not exist."""
    if fallback_order:
        unknown = [n for n in fallback_order if n not in known]
        if unknown:
            raise RequestError(
                f"fallback_order names unknown provider(s): {quoted(', '.join(unknown))}",
                param="fallback_order",
            )
        return tuple(dict.fromkeys(fallback_order))  # each provider at most once
    if provider_route:
        if provider_route in table.routes:
            return table.ordered(provider_route, table.routes[provider_route], signals)
        if provider_route in known:
            return (provider_route, *(n for n in table.default if n != provider_route))
        raise RequestError(
            f"provider_route {quoted(provider_route)} is neither a route nor a provider",
            status=404,
            param="provider_route",
        )
    found = table.by_model.find(model) if model else None
    name, order = (DEFAULT, table.default) if found is None else found
    return table.ordered(name, order, signals)


Pick = tuple[str, bool]  # a provider the walk hands out, and whether as a last resort


@record
class Expired:
    """The request's deadline is spent: these providers were not reached (each is recorded
    as `timeout`, detail "deadline")."""

    providers: tuple[str, ...]


class Walk:
    """Hands out one request's providers: the order first, then the deferred as last resort."""

    __slots__ = ("_deferred", "_last_resort", "_queue", "larger_than", "stopped")

    def __init__(self, order: Iterable[str]) -> None:
        self._queue = deque(order)
        self._deferred: list[str] = []
        self._last_resort = False
        self.stopped = False  # on a `content_blocked` refusal (protocol §5.1)
        self.larger_than: int | None = None  # a context window that was too small

    def next(self, left_s: float) -> Pick | Expired | None:
        """(provider, is_last_resort); `Expired` with every provider not reached when
        `left_s` (what is left of the deadline) is spent; None when all have had their turn."""
        if not self._queue and not self._last_resort:
            self._last_resort = True
            self._queue.extend(self._deferred)
        if not self._queue:
            return None
        if left_s <= 0:
            return Expired(tuple(self.drain()))
        return self._queue.popleft(), self._last_resort

    def prefer(self, provider: str) -> None:
        """Hand out `provider` first (a session's home), if it is in the order."""
        if provider in self._queue and self._queue[0] != provider:
            self._queue.remove(provider)
            self._queue.appendleft(provider)

    def defer(self, provider: str) -> None:
        """Remember a provider skipped for remembered state, to try it as last resort (once,
        however many of its keys were skipped)."""
        if not self._last_resort and provider not in self._deferred:
            self._deferred.append(provider)

    def refused(self, reason: Reason, window: int | None, stop_on_blocked: bool) -> str:
        """The request itself was refused (protocol §5.1): `content_blocked` stops the walk
        unless the policy is `failover`; after `context_exceeded` the walk goes on only to
        providers with a larger `context_window` than the refusing one's (`window`; when
        it is unknown, to all). What the trace should add to the refusal's detail."""
        if reason is Reason.CONTENT_BLOCKED:
            if stop_on_blocked:
                self.stopped = True
                self.drain()
                return " (the walk stops here: on_content_blocked is stop)"
            return " (on_content_blocked is failover)"
        if reason is Reason.CONTEXT_EXCEEDED and window is not None:
            self.larger_than = max(window, self.larger_than or 0)
        return ""

    def drain(self) -> list[str]:
        """Every provider not yet handed out."""
        rest = list(self._queue)
        if not self._last_resort:
            rest += [n for n in self._deferred if n not in rest]
        self._queue.clear()
        self._last_resort = True
        return rest


@dataclass(frozen=True, slots=True)
class Policy:
    """What a request's route (or the config, for requests on no named route) says about
    failures: blocked content, cut and stalled streams, silent streams and hedging (protocol
    §4.3, §5.1, §10)."""

    stop_on_blocked: bool = True  # `on_content_blocked: stop`
    continue_on_cut: bool = False
    first_token_ms: float | None = None
    hedge_after_ms: float | None = None
    stall_ms: float | None = None


@record
class Pass:
    """Why a provider is not tried this time; shown in the trace with its reason."""

    reason: Reason
    detail: str = ""

    @property
    def deferrable(self) -> bool:
        return EFFECTS[self.reason].deferred


def precheck(
    *,
    serves_model: bool,
    model: str | None,
    circuit: CircuitState,
    missing_key: str | None,
    now: float,
    exhausted: str | None = None,
) -> Pass | None:
    """The skip decisions that need no network (protocol §4 step 1), or None to go on.
    `exhausted` says which budget is used up, if one is."""
    if not serves_model:
        if not model:
            return Pass(Reason.MODEL_UNAVAILABLE, "no model given")
        return Pass(Reason.MODEL_UNAVAILABLE, f"does not serve model {quoted(model)}")
    if circuit.is_open(now):
        reason = Reason.QUOTA_EXHAUSTED_UPSTREAM if circuit.out else Reason.CIRCUIT_OPEN
        return Pass(reason, opened_detail(circuit, now))
    if exhausted:
        return Pass(Reason.QUOTA_EXHAUSTED, exhausted)
    if missing_key:
        return Pass(Reason.AUTH_FAILED, f"{missing_key} is not set")
    return None


@dataclass(frozen=True, slots=True)
class Health:
    """The result of a provider's health check (protocol §6)."""

    ok: bool
    checked_at: float
    outcome: Outcome  # why it failed; `ok` when it passed
    models: frozenset[str] | None = None  # the models it listed, if its body lists any
    ms: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """The JSON form kept in the state store."""
        o = self.outcome
        return {
            "ok": self.ok,
            "checked_at": self.checked_at,
            "reason": str(o.reason),
            "status": o.status,
            "detail": o.detail,
            "models": None if self.models is None else sorted(self.models),
            "ms": self.ms,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Health:
        """The inverse of `to_dict`."""
        models = data.get("models")
        return cls(
            bool(data["ok"]),
            float(data["checked_at"]),
            Outcome(Reason(data["reason"]), data.get("status"), str(data.get("detail", ""))),
            None if models is None else frozenset(models),
            float(data.get("ms", 0.0)),
        )


def model_listed(model: str, models: frozenset[str]) -> bool:
    """Whether a health check's model list has `model` (Ollama's `:latest` tag is implied)."""
    if model in models:
        return True
    if ":" not in model:
        return f"{model}:latest" in models
    return model.endswith(":latest") and model[: -len(":latest")] in models


def health_verdict(health: Health, *, model: str, checked_now: bool, now: float) -> Outcome | None:
    """What a health result means for this attempt: None to go on, else a failed `Outcome`.

    A transport or auth failure of a check made for this request is that request's failure;
    any other failure (or an old one) is an `unhealthy` skip; a passing check whose model
    list lacks the model is a `model_unavailable` skip.
    """
    if not health.ok:
        if checked_now and _as_attempt(health.outcome.reason):
            return health.outcome
        age = "" if checked_now else f" {max(0.0, now - health.checked_at):.0f} s ago"
        why = f"{health.outcome.reason} ({health.outcome.detail})"
        return Outcome(Reason.UNHEALTHY, health.outcome.status, f"health check failed{age}: {why}")
    if model and health.models is not None and not model_listed(model, health.models):
        return Outcome(
            Reason.MODEL_UNAVAILABLE, None, f"health check does not list {quoted(model)}"
        )
    return None


def _as_attempt(reason: Reason) -> bool:
    """Whether a failed health check says as much as a failed request would (its provider
    could not be reached, or refused the key): the attempt's own reason when the check ran
    for this request."""
    return EFFECTS[reason].transport or reason is Reason.AUTH_FAILED


# With `retries` unset: one try more, for a failure the provider's answer calls passing (a
# 5xx, a 429) whose wait is this short at most; a dead or slow provider is not waited for.
QUICK_RETRY_S = 2.0


def retry_delay(
    outcome: Outcome, *, tries: int, retries: int | None, remaining_s: float
) -> float | None:
    """Seconds to wait before trying the same provider again, or None to move on.

    Only transient reasons are retried, `retries` times at most, with exponential backoff
    (0.1 s, 0.2 s, … capped at 2 s) or the provider's `Retry-After`, and only if the wait
    leaves time before the deadline. `retries` None (unset): once, for a 5xx or a 429 whose
    wait is `QUICK_RETRY_S` at most.
    """
    quick = retries is None
    effect = EFFECTS[outcome.reason]
    if tries >= (1 if retries is None else retries) or not (
        effect.quick if quick else effect.retried
    ):
        return None
    delay = outcome.retry_after if outcome.retry_after is not None else min(0.1 * 2**tries, 2.0)
    if quick and delay > QUICK_RETRY_S:
        return None
    return delay if delay < remaining_s else None
