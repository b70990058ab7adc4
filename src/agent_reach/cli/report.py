"""`agent-reach report`, `agent-reach status` and `agent-reach caps`: what the state store
remembers."""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Any

import click

from .exits import expected_errors, fail

if TYPE_CHECKING:
    from ..router import Router

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def seconds(text: str) -> float:
    """`90s`, `30m`, `24h`, `7d`, `2w` in seconds (click.BadParameter otherwise)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*", text)
    if not m:
        raise click.BadParameter(f"{text!r} is not a duration like 30m, 24h or 7d")
    return float(m.group(1)) * _UNITS[m.group(2)]


def _router(obj: dict[str, Any]) -> Router:
    from ..router import Router

    router = Router.from_config(obj["config_path"])
    if router.config.state.startswith("memory://"):
        click.echo(
            "agent-reach: note: state is memory://, which keeps nothing between processes",
            err=True,
        )
    return router


@click.command()
@click.option("--since", default="24h", show_default=True, help="How far back: 30m, 24h, 7d.")
@click.option("--provider", "only", help="Only this provider.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--html", "html_file", type=click.Path(dir_okay=False), help="Write an HTML page.")
@click.option(
    "--all", "everything", is_flag=True, help="Also providers of other configs in the store."
)
@click.pass_obj
@expected_errors
def report(
    obj: dict[str, Any],
    since: str,
    only: str | None,
    as_json: bool,
    html_file: str | None,
    everything: bool,
) -> None:
    """Per provider (per key of a pool): requests, success rate, failures, failovers, skips,
    latency against latency_p95_ms, quota."""
    import asyncio

    window = seconds(since)
    router = _router(obj)
    if only and only not in router.providers:
        fail(f"no provider named {only!r}", 2)
    built = asyncio.run(_build(router, window, everything))
    if only:  # a pool's seats too (`NAME/VARIABLE`)
        built.providers = [p for p in built.providers if p.name.split("/")[0] == only]
        built.series = {k: v for k, v in built.series.items() if k.split("/")[0] == only}
    if html_file:
        from pathlib import Path

        from ..observe.report import html

        Path(html_file).write_text(html(built), encoding="utf-8")
        click.echo(f"wrote {html_file}", err=True)
    if as_json:
        from .render import print_json

        print_json(built.to_dict())
    elif not html_file:
        _report_table(built, _source(router))


async def _build(router: Router, window: float, everything: bool) -> Any:
    from ..observe.report import build

    try:
        until = router.now()
        attempts = await router.attempt_log(until - window, everything)
        quota = {seat: await router.quota_use(seat) for seat in router.seats}
    finally:
        await router.aclose()
    declared: dict[str, float] = {}
    for seat in router.seats:  # a pool's seats: its provider's declared latency
        p95 = router.provider(seat.split("/")[0]).metadata.get("latency_p95_ms")
        if isinstance(p95, int | float):
            declared[seat] = float(p95)
    return build(
        attempts,
        since=until - window,
        until=until,
        providers=list(router.seats),
        declared=declared,
        quota=quota,
    )


def _source(router: Router) -> str:
    """The config file's name, as rows of other identities are labelled (`not in FILE`)."""
    return os.path.basename(router.config.source) if router.config.source else "this config"


def _report_table(built: Any, source: str) -> None:
    from rich.table import Table

    from ..observe.report import cell
    from .render import print_table

    table = Table(
        "provider",
        "requests",
        "success",
        "failures",
        "failovers",
        "skips",
        "p50 ms",
        "p95 ms",
        "p99 ms",
        "declared p95",
        "quota",
    )
    for p in built.providers:
        rate = "–" if p.success_rate is None else f"{p.success_rate:.1%}"
        p95 = (
            "–"
            if p.p95_ms is None
            else (f"[red]{p.p95_ms} breach[/]" if p.breach else str(p.p95_ms))
        )
        quota = "; ".join(f"{q['budget']}: {q['used']}/{q['limit']}" for q in p.quota) or "–"
        name = f"[dim]{p.name} (not in {source})[/]" if "@" in p.name else p.name
        table.add_row(
            name,
            str(p.requests),
            rate,
            str(p.failures),
            str(p.failovers),
            str(p.skips),
            cell(p.p50_ms),
            p95,
            cell(p.p99_ms),
            cell(p.declared_p95_ms),
            quota,
        )
    print_table(table)
    click.echo(f"{built.answered} of {built.requests} requests answered", err=True)


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the view as JSON.")
@click.option(
    "--all", "everything", is_flag=True, help="Also what the store holds for other configs."
)
@click.pass_obj
@expected_errors
def status(obj: dict[str, Any], as_json: bool, everything: bool) -> None:
    """The live view from the state store: circuits, cooldowns, quota use per provider."""
    import asyncio

    router = _router(obj)
    source = _source(router)
    rows = asyncio.run(_status(router, everything))
    if as_json:
        from .render import print_json

        print_json(rows)
        return
    from rich.table import Table

    from .render import print_table

    table = Table("provider", "fingerprint", "circuit", "failures", "cause", "quota", "caps")
    for r in rows:
        name = r["provider"] if r["in_config"] else f"[dim]{r['provider']} (not in {source})[/]"
        learned = "; ".join(f"{k['model']}: {k['tokens']}" for k in r.get("learned_caps", ()))
        table.add_row(name, *_state_cells(r), learned or "–")
        for k in r.get("keys", ()):  # a pool's keys, by their variables
            unset = "" if k["set"] else " [red](not set)[/]"
            table.add_row(f"  {r['provider']}/{k['env']}{unset}", *_state_cells(k), "")
    print_table(table)
    for r in rows:
        if r.get("note"):
            click.echo(f"{r['provider']}: {r['note']}", err=True)


def _state_cells(r: dict[str, Any]) -> tuple[str, ...]:
    """A provider's or a key's fingerprint, circuit, failures, cause and quota cells."""
    c = r.get("circuit") or {"state": "–", "failures": "–", "cause": None}
    state = c["state"] if c["state"] != "open" else f"[red]open {c['open_for_s']:.0f} s[/]"
    if c.get("note"):
        state = f"[red]{c['note']}[/]"
    quota = "; ".join(_quota_cell(q) for q in r.get("quota", ())) or "–"
    return r["fingerprint"] or "(old)", state, str(c["failures"]), c["cause"] or "–", quota


@click.command()
@click.option("--forget", is_flag=True, help="Forget them (in every process sharing the store).")
@click.option("--provider", "only", help="Only this provider's.")
@click.option("--json", "as_json", is_flag=True, help="Print them as JSON.")
@click.pass_obj
@expected_errors
def caps(obj: dict[str, Any], forget: bool, only: str | None, as_json: bool) -> None:
    """The output caps learned from providers' refusals (kept a day each), or --forget them."""
    import asyncio

    router = _router(obj)
    if forget:
        count = asyncio.run(_forget(router, only))
        if as_json:
            from .render import print_json

            print_json({"forgotten": count})
        else:
            click.echo(f"forgot {count} learned output cap{'' if count == 1 else 's'}", err=True)
        return
    rows = asyncio.run(_caps(router))
    rows = [r for r in rows if only is None or r["provider"] == only]
    if as_json:
        from .render import print_json

        print_json([{k: v for k, v in r.items() if k != "key"} for r in rows])
        return
    if not rows:
        click.echo("no learned output caps", err=True)
        return
    from rich.table import Table

    from .render import print_table

    table = Table("provider", "fingerprint", "model", "tokens", "expires in")
    source = _source(router)
    for r in rows:
        name = r["provider"] if r["in_config"] else f"[dim]{r['provider']} (not in {source})[/]"
        left = f"{r['expires_in_s'] / 3600:.1f} h"
        table.add_row(name, r["fingerprint"] or "(old)", r["model"], str(r["tokens"]), left)
    print_table(table)


async def _caps(router: Router) -> list[dict[str, Any]]:
    try:
        return await router.learned_caps()
    finally:
        await router.aclose()


async def _forget(router: Router, only: str | None) -> int:
    try:
        return await router.forget_caps(only)
    finally:
        await router.aclose()


def _quota_cell(q: dict[str, Any]) -> str:
    if "budget" in q:
        return f"{q['budget']}: {q['used']}/{q['limit']}"
    return f"{q['window']}: {q['used']}"


async def _status(router: Router, everything: bool) -> list[dict[str, Any]]:
    try:
        return await router.status(everything)
    finally:
        await router.aclose()
