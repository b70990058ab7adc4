"""`agent-reach check`: every provider's health check at once, as a table."""

from __future__ import annotations

import sys
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import click

from .exits import expected_errors

if TYPE_CHECKING:
    from ..config import Config
    from ..engine.health import CheckResult


@click.command()
@click.option("--model", "-m", help="Also require this model in each provider's model list.")
@click.option("--json", "as_json", is_flag=True, help="Print the rows as JSON.")
@click.pass_obj
@expected_errors
def check(obj: dict[str, Any], model: str | None, as_json: bool) -> None:
    """Run every provider's health check concurrently; exit 1 if none is usable."""
    import asyncio

    from ..config import load_config

    cfg = load_config(obj["config_path"])
    checked, remembered = asyncio.run(_check_all(cfg, model))
    rows = [_with_circuit(r, remembered.get(r.provider, {})) for r in checked]
    if as_json:
        from .render import print_json

        print_json([{**asdict(r), "models": r.models or [], "circuit": c} for r, c in rows])
    else:
        _table([r for r, _ in rows])
    usable = sum(r.usable for r, _ in rows)
    if not as_json:
        click.echo(f"{usable} of {len(rows)} provider(s) usable", err=True)
    if not usable:
        sys.exit(1)


async def _check_all(
    cfg: Config, model: str | None
) -> tuple[list[CheckResult], dict[str, dict[str, Any]]]:
    """Each provider's check, and its status row as the config's state store remembers it
    (its circuit, and its budgets' use)."""
    import asyncio

    from ..router import Router
    from ..state import MemoryStore

    router = Router(cfg, store=MemoryStore())  # a check remembers nothing
    remembered = Router(cfg)  # what the proxy and earlier runs left in the store, read only
    try:
        checked = await asyncio.gather(*(router.check(n, model) for n in router.providers))
        rows = {row["provider"]: row for row in await remembered.status()}
    finally:
        await router.aclose()
        await remembered.aclose()
    return list(checked), rows


def _with_circuit(r: CheckResult, row: dict[str, Any]) -> tuple[CheckResult, dict[str, Any] | None]:
    """`r` as its status `row` leaves it: not usable (a request would skip it) when its circuit
    is open or one of its budgets is used up, and why (as `status` says it); and for a
    provider without a health check, that its key was not tried."""
    from dataclasses import replace

    if r.health == "none" and r.reachable and not r.detail:
        r = replace(r, detail="a TCP connect only, its key not tried")
    circuit = row.get("circuit")
    why = [
        f"budget {q['budget']} used up ({q['used']}/{q['limit']})"
        for q in row.get("quota", ())
        if q["ratio"] >= 1
    ]
    if circuit is not None and circuit["state"] == "open":
        why.insert(0, f"circuit open after {circuit['cause']}, {circuit['open_for_s']:.0f} s left")
    if not why:
        return r, circuit
    detail = "; ".join([r.detail, *why] if r.detail else why)
    return replace(r, usable=False, detail=detail), circuit


def _health_text(r: CheckResult) -> str:
    if not r.usable and r.health == "ok":  # its check answered, but a request would skip it
        text = f"skipped: {r.detail} (its health check answered)"
    elif r.health == "none":
        text = f"no health check: {r.detail}" if r.detail else "no health check"
    else:
        text = f"{r.health}: {r.detail}" if r.detail else r.health
    return f"{text}, via {r.via}" if r.via and r.via not in text else text


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
