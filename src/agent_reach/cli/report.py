"""`agent-reach report` and `agent-reach status`: what the state store remembers."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import click

from . import expected_errors, fail

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
    """Per provider: requests, success rate, failures, failovers, skips, latency against
    latency_p95_ms, quota."""
    import asyncio

    window = seconds(since)
    router = _router(obj)
    if only and only not in router.providers:
        fail(f"no provider named {only!r}", 2)
    built = asyncio.run(_build(router, window, everything))
    if only:
        built.providers = [p for p in built.providers if p.name == only]
        built.series = {k: v for k, v in built.series.items() if k == only}
    if html_file:
        from pathlib import Path

        from ..report import html

        Path(html_file).write_text(html(built), encoding="utf-8")
        click.echo(f"wrote {html_file}", err=True)
    if as_json:
        from .render import print_json

        print_json(built.to_dict())
    elif not html_file:
        _report_table(built)


async def _build(router: Router, window: float, everything: bool) -> Any:
    from ..report import build

    try:
        until = router.now()
        attempts = await router.attempt_log(until - window, everything)
        quota = {name: await router.quota_use(name) for name in router.providers}
    finally:
        await router.aclose()
    declared = {
        p.name: float(p.metadata["latency_p95_ms"])
        for p in router.config.providers
        if isinstance(p.metadata.get("latency_p95_ms"), int | float)
    }
    return build(
        attempts,
        since=until - window,
        until=until,
        providers=list(router.providers),
        declared=declared,
        quota=quota,
    )


def _report_table(built: Any) -> None:
    from rich.table import Table

    from ..report import cell
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
        table.add_row(
            p.name,
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

    rows = asyncio.run(_status(_router(obj), everything))
    if as_json:
        from .render import print_json

        print_json(rows)
        return
    from rich.table import Table

    from .render import print_table

    table = Table("provider", "fingerprint", "circuit", "failures", "cause", "quota")
    for r in rows:
        c = r.get("circuit") or {"state": "–", "failures": "–", "cause": None}
        state = c["state"] if c["state"] != "open" else f"[red]open {c['open_for_s']:.0f} s[/]"
        if c.get("note"):
            state = f"[red]{c['note']}[/]"
        quota = "; ".join(_quota_cell(q) for q in r.get("quota", ())) or "–"
        name = r["provider"] if r["in_config"] else f"[dim]{r['provider']} (other config)[/]"
        fp = r["fingerprint"] or "(old)"
        table.add_row(name, fp, state, str(c["failures"]), c["cause"] or "–", quota)
    print_table(table)


def _quota_cell(q: dict[str, Any]) -> str:
    if "budget" in q:
        return f"{q['budget']}: {q['used']}/{q['limit']}"
    return f"{q['window']}: {q['used']}"


async def _status(router: Router, everything: bool) -> list[dict[str, Any]]:
    try:
        return await router.status(everything)
    finally:
        await router.aclose()
