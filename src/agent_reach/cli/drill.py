"""`agent-reach drill`: what happens to each route when one provider is down."""

from __future__ import annotations

import sys
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import click

from .exits import expected_errors

if TYPE_CHECKING:
    from ..router import Router

PROBE = "Reply with the single word OK."


@dataclass(frozen=True)
class Row:
    down: str  # the provider forced down ("-" for the baseline)
    route: str
    chain: list[str]  # what is left of the route
    answered_by: str | None
    ms: float | None
    detail: str


@click.command()
@click.option("--model", "-m", help="Model to ask for (default: each provider's first model).")
@click.option("--dry-run", is_flag=True, help="Print each route's fallback chain; send nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the rows as JSON.")
@click.pass_obj
@expected_errors
def drill(obj: dict[str, Any], model: str | None, dry_run: bool, as_json: bool) -> None:
    """For each provider in turn, force it down and send one real request per route.

    Exit 1 when some route has no answer, or losing a single provider leaves one without.
    """
    import asyncio

    from ..config import load_config
    from ..router import Router
    from ..state import MemoryStore

    # Its own memory: a drill's requests neither count in `report` nor move real circuits.
    router = Router(load_config(obj["config_path"]), store=MemoryStore())
    routes = {"default": router.default_order, **router.routes}
    if dry_run:
        if as_json:
            from .render import print_json

            print_json({name: list(chain) for name, chain in routes.items()})
            return
        for name, chain in routes.items():
            click.echo(f"{name}: {' → '.join(chain)}")
        return
    rows = asyncio.run(_drill(router, routes, model))
    if as_json:
        from .render import print_json

        print_json([asdict(r) for r in rows])
    else:
        _table(rows)
    dead = {r.route: r.detail for r in rows if r.answered_by is None and r.down == "-"}
    for route, why in dead.items():
        click.echo(
            f"agent-reach: route {route} has no answer even with nothing forced down ({why})",
            err=True,
        )
    broken = [r for r in rows if r.answered_by is None and r.down != "-" and r.route not in dead]
    for r in broken:
        click.echo(
            f"agent-reach: single point of failure: without {r.down}, route {r.route} "
            "has no answer",
            err=True,
        )
    if dead or broken:
        sys.exit(1)


async def _drill(
    router: Router, routes: dict[str, tuple[str, ...]], model: str | None
) -> list[Row]:
    from ..core.errors import AllProvidersFailed

    rows = []
    try:
        for down in ("-", *router.providers):
            for route, chain in routes.items():
                if down != "-" and down not in chain:
                    continue
                left = [n for n in chain if n != down]
                request: dict[str, Any] = {
                    "messages": [{"role": "user", "content": PROBE}],
                    "max_tokens": 8,
                    "agent_reach": {"fallback_order": left},
                }
                if model:
                    request["model"] = model
                if not left:
                    rows.append(Row(down, route, left, None, None, "no provider left"))
                    continue
                start = time.perf_counter()
                try:
                    result = await router.achat(request)
                except AllProvidersFailed as exc:
                    why = ", ".join(f"{a.provider}: {a.reason}" for a in exc.attempts)
                    rows.append(Row(down, route, left, None, None, why))
                    continue
                ms = round((time.perf_counter() - start) * 1000, 1)
                rows.append(Row(down, route, left, result.provider, ms, "ok"))
    finally:
        await router.aclose()
    return rows


def _table(rows: list[Row]) -> None:
    from rich.markup import escape
    from rich.table import Table

    from .render import print_table

    table = Table("down", "route", "remaining chain", "answered by", "ms", "result")
    for r in rows:
        who = r.answered_by or "[red]nobody[/]"
        table.add_row(
            r.down,
            r.route,
            " → ".join(r.chain) or "–",
            who,
            "–" if r.ms is None else f"{r.ms:.0f}",
            escape(r.detail),
        )
    print_table(table)
