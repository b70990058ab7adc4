"""The attempt log (protocol §12): an observer of engine events that hands each attempt to the
state store, by provider identity, where it is written in batches (what `report` reads)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ..core.events import AttemptEvent, Event
from .store import LoggedAttempt, StateStore


class AttemptLog:
    """Call it with engine events; `keys` maps a provider's name (a seat's of a pool of keys,
    `deepseek/KEY_2`) to its identity."""

    def __init__(
        self, store: StateStore, keys: Mapping[str, str], clock: Callable[[], float]
    ) -> None:
        self.store = store
        self.keys = keys
        self.clock = clock

    def __call__(self, event: Event) -> None:
        if isinstance(event, AttemptEvent):
            a = event.attempt
            self.store.record(
                LoggedAttempt(
                    self.clock(),
                    event.request,
                    event.route,
                    self.keys[a.who],
                    str(a.reason),
                    a.status,
                    a.ms,
                    a.sent,
                    a.last_resort,
                )
            )
