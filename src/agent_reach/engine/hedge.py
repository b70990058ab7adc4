"""Hedging (protocol §4.3): when a provider has not answered after `hedge_after_ms`, the next one
starts too; the first valid answer wins and the other try is cancelled with `HEDGE_LOST`, so
its attempt can say it lost the race rather than failed."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from ..core.routing import Pick
from .live import LiveStream

T = TypeVar("T")

HEDGE_LOST = "agent-reach: hedge lost"


async def race(
    turn: Callable[[Pick], Awaitable[T | None]],
    first: Pick,
    hedge_s: float,
    second: Callable[[], Pick | None],
) -> tuple[T | None, str]:
    """Run `turn(first)`; when it has not finished after `hedge_s`, also `turn(second())` (if
    the walk has a next provider). The first payload and who gave it; (None, first) when none
    did. A second stream that also started is closed."""
    tasks = {asyncio.ensure_future(turn(first)): first[0]}
    done, _ = await asyncio.wait(tasks, timeout=hedge_s)
    if not done and (pick := second()) is not None:
        tasks[asyncio.ensure_future(turn(pick))] = pick[0]
    winner: tuple[T, str] | None = None
    try:
        while tasks and winner is None:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                provider, payload = tasks.pop(task), task.result()
                if payload is not None and winner is None:
                    winner = (payload, provider)
                elif isinstance(payload, LiveStream):
                    await payload.aclose()
    finally:
        for task in tasks:
            task.cancel(HEDGE_LOST)
        for late in await asyncio.gather(*tasks, return_exceptions=True):
            if isinstance(late, LiveStream):
                await late.aclose()
    return winner if winner is not None else (None, first[0])
