"""Session affinity (protocol §3.1): a session's later turns try its home first, so that they
reach the provider (and key) whose prompt cache holds their prefix. Affinity only orders: a
home that fails is failed over as any provider, and does not move; it is first again on the
next turn. `move_after` turns in a row answered elsewhere move it (that cache is now the warmer
one).

A home is a seat (`PreparedProvider.seat`: `provider` or `provider/KEY_VAR`), kept by the
session's key (`ChatRequest.affinity`, already scoped by the client key) in `Homes`: this
process's (`MemoryHomes`), or the state store's for a fleet. Pure but for the store.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Home:
    """A session's home seat, and how many turns in a row were answered elsewhere."""

    seat: str
    away: int = 0

    @property
    def provider(self) -> str:
        return self.seat.split("/", 1)[0]  # a provider's name never holds a `/`


class Homes(Protocol):
    """Where homes are kept: by session key, expiring `ttl_s` after their last `set`."""

    async def get(self, key: str, now: float) -> Home | None: ...

    async def set(self, key: str, home: Home, now: float, ttl_s: float) -> None: ...

    async def forget(self, key: str) -> None: ...


class MemoryHomes:
    """This process's homes: at most `limit`, the least recently used forgotten first."""

    def __init__(self, limit: int) -> None:
        self._homes: OrderedDict[str, tuple[Home, float]] = OrderedDict()
        self._limit = limit

    async def get(self, key: str, now: float) -> Home | None:
        found = self._homes.get(key)
        if found is None:
            return None
        if found[1] <= now:
            del self._homes[key]
            return None
        self._homes.move_to_end(key)
        return found[0]

    async def set(self, key: str, home: Home, now: float, ttl_s: float) -> None:
        self._homes[key] = (home, now + ttl_s)
        self._homes.move_to_end(key)
        while len(self._homes) > self._limit:
            self._homes.popitem(last=False)

    async def forget(self, key: str) -> None:
        self._homes.pop(key, None)


def first(order: tuple[str, ...], home: Home | None) -> tuple[str, ...]:
    """`order` with the home's provider first, when it is in it."""
    if home is None or home.provider not in order or order[0] == home.provider:
        return order
    return (home.provider, *(n for n in order if n != home.provider))


def after(home: Home | None, answered: str, move_after: int) -> Home | None:
    """The session's home once seat `answered` has answered a turn, or None when it is
    unchanged: the first turn's seat; home again (its count of turns away reset); another
    seat one turn more, until `move_after` of them in a row move the home there."""
    if home is None:
        return Home(answered)
    if answered == home.seat:
        return Home(answered) if home.away else None
    if home.away + 1 >= move_after:
        return Home(answered)
    return Home(home.seat, home.away + 1)
