"""Session affinity (protocol §3.1): a session's later turns try its home first, so that they
reach the provider (and key) whose prompt cache holds their prefix. Affinity only orders: a
home that fails is failed over as any provider, and does not move; it is first again on the
next turn (`Walk.prefer`). `affinity_move_after` turns in a row answered elsewhere move it
(that cache is now the warmer one).

A home is a seat (`PreparedProvider.seat`: `provider` or `provider/KEY_VAR`), kept by the
session's key (`ChatRequest.affinity`, already scoped by the client key) in `state.homes`:
the state store's, for every process sharing it. Pure.
"""

from __future__ import annotations

from ..state.homes import Home


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
