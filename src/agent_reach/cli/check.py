"""`agent-reach check`: every provider's health check at once, as a table."""

from __future__ import annotations

import sys
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import click

from . import expected_errors

if TYPE_CHECKING:
    from ..config import Config
    from ..health import CheckResult


@click.command()
@click.option("--model", "-m", help="Also require this model in each provider's model list.")
@click.option("--json", "as_json", is_flag=True, help="Print the rows as JSON.")
@click.pass_obj
@expected_errors
def check(obj: dict[str, Any], model: str | None, as_json: bool) -> None:
    """Run every provider's health check concurrently; exit 1 if none is usable."""
    import asyncio

    from ..config import load_config

    rows = asyncio.run(_check_all(load_config(obj["config_path"]), model))
    if as_json:
        from .render import print_json

        print_json([{**asdict(r), "models": r.models or []} for r in rows])
    else:
        _table(rows)
    usable = sum(r.usable for r in rows)
    if not as_json:
        click.echo(f"{usable} of {len(rows)} provider(s) usable", err=True)
    if not usable:
        sys.exit(1)


async def _check_all(cfg: Config, model: str | None) -> list[CheckResult]:
    import asyncio

    from ..router import Router
    from ..state import MemoryStore

    router = Router(cfg, store=MemoryStore())  # a check remembers nothing
    try:
        return list(await asyncio.gather(*(router.check(n, model) for n in router.providers)))
    finally:
        await router.aclose()


def _health_text(r: CheckResult) -> str:
    if r.health == "none":
        return "no health check"
    return f"{r.health}: {r.detail}" if r.detail else r.health


def _models(names: list[str] | None) -> str:
    if not names:
        return "-"
    return ", ".join(names[:3]) + (f" (+{len(names) - 3})" if len(names) > 3 else "")


def _table(rows: list[CheckResult]) -> None:
    from rich.markup import escape
    from rich.table import Table

    from .render import print_table

    table = Table("provider", "reachable", "health", "models", "latency")
    for r in rows:
        style = "green" if r.usable else "red"
        table.add_row(
            r.provider,
            "yes" if r.reachable else "no",
            f"[{style}]{escape(_health_text(r))}[/]",
            _models(r.models),
            "-" if r.latency_ms is None else f"{r.latency_ms:.0f} ms",
        )
    print_table(table)
