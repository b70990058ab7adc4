"""How a balanced order shares traffic (protocol §3 `balance`). Pure.

`weighted` draws each request's order by weight; `latency` puts the fastest of late first, by
what `Latencies` heard of the engine's own attempts; `least_busy` the one with the fewest
requests in flight (`Signals.busy`: this process's and, on Redis, the fleet's). Either way the
order is only the order: a failed try moves to the next provider as in any other.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from .events import AttemptEvent, Event

Draw = Callable[[], float]  # a uniform draw from [0, 1)
DEFAULT = "default"  # the default order's name, for `balance`
RECENT = 16  # a provider's latency is the median of its last so many good attempts


class Latencies(dict[str, float]):
    """Each provider's recent time to its answer's first token (a whole answer's, unstreamed),
    in ms: the median of its last `RECENT` good attempts, heard as an engine observer. A median,
    not an average: a few requests that ask for a long answer (a client's choice) cannot move
    every other client's traffic; only most of a provider's recent requests can."""

    def __init__(self) -> None:
        super().__init__()
        self._recent: dict[str, deque[float]] = {}

    def __call__(self, event: Event) -> None:
        if not isinstance(event, AttemptEvent) or not (event.attempt.ok and event.attempt.sent):
            return
        a = event.attempt
        recent = self._recent.get(a.provider)
        if recent is None:
            recent = self._recent[a.provider] = deque(maxlen=RECENT)
        recent.append(a.ms)
        self[a.provider] = statistics.median(recent)


@dataclass(frozen=True, slots=True)
class Signals:
    """What a balanced order is drawn from: `draw` for `weighted`, `latency` for `latency`,
    `busy` (requests in flight by provider) for `least_busy`."""

    draw: Draw
    latency: Mapping[str, float]
    busy: Mapping[str, float]


def weighted(order: tuple[str, ...], weights: Mapping[str, float], draw: Draw) -> tuple[str, ...]:
    """`order` drawn anew for one request: each provider comes first with a chance in
    proportion to its weight, and so on down the order (each keyed `u ** (1 / weight)`, the
    largest first: Efraimidis and Spirakis' weighted sampling); a provider of weight 0 stays
    behind the others, in its place."""
    keyed = []
    for i, name in enumerate(order):
        weight = weights.get(name, 1.0)
        keyed.append((-(draw() ** (1.0 / weight)) if weight > 0 else 1.0, i, name))
    return tuple(name for _, _, name in sorted(keyed))


def arranged(
    way: str, order: tuple[str, ...], weights: Mapping[str, float], signals: Signals
) -> tuple[str, ...]:
    """`order` as `way` (`weighted`, `latency` or `least_busy`) arranges it for one request: by
    weight, fastest first (a provider not yet measured before the rest, so that it is), or
    least busy first (ties as written)."""
    if way == "latency":
        return tuple(sorted(order, key=lambda n: signals.latency.get(n, 0.0)))
    if way == "least_busy":
        return tuple(sorted(order, key=lambda n: signals.busy.get(n, 0.0)))
    return weighted(order, weights, signals.draw)
