"""`agent-reach check`: every provider's health check at once, as a table."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click

from . import expected_errors

if TYPE_CHECKING:
    import aiohttp

    from ..backend import Backend
    from ..config import Config


@dataclass(frozen=True)
class Row:
    provider: str
    reachable: str
    health: str
    models: str
    latency: str
    usable: bool


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
    rows = asyncio.run(_check_all(cfg, model))
    if as_json:
        from .render import print_json

        print_json([r.__dict__ for r in rows])
    else:
        _table(rows)
    usable = sum(r.usable for r in rows)
    if not as_json:
        click.echo(f"{usable} of {len(rows)} provider(s) usable", err=True)
    if not usable:
        sys.exit(1)


async def _check_all(cfg: Config, model: str | None) -> list[Row]:
    import asyncio
    import os

    from ..backend import Backend
    from ..transport import new_session

    backends = [Backend.prepare(p, os.environ) for p in cfg.providers]
    async with new_session() as session:
        return list(await asyncio.gather(*(_check_one(session, b, model) for b in backends)))


async def _check_one(session: aiohttp.ClientSession, backend: Backend, model: str | None) -> Row:
    import time

    from ..health import probe
    from ..routing import model_listed
    from ..trace import Reason

    name = backend.name
    if backend.health_url is None:
        reachable, ms = await _connects(backend)
        return Row(name, "yes" if reachable else "no", "no health check", "-", ms, reachable)
    budget = backend.connect_s + backend.read_s
    health = await probe(session, backend, time.time(), budget)
    ms = f"{health.ms:.0f} ms"
    reached = health.outcome.reason not in (Reason.CONNECT_FAILED, Reason.TIMEOUT)
    listed = "-" if health.models is None else _models(health.models)
    if backend.missing_key:
        return Row(name, _yes(reached), f"{backend.missing_key} is not set", listed, ms, False)
    if not health.ok:
        what = f"{health.outcome.reason}: {backend.redact(health.outcome.detail)}"
        return Row(name, _yes(reached), what, listed, ms, False)
    wanted = backend.model_for(model) if model else ""
    if wanted and health.models is not None and not model_listed(wanted, health.models):
        return Row(name, "yes", f"ok, but {wanted!r} is not listed", listed, ms, False)
    return Row(name, "yes", "ok", listed, ms, True)


async def _connects(backend: Backend) -> tuple[bool, str]:
    """A TCP connect to the endpoint, for providers without a health check."""
    import asyncio
    import time
    from urllib.parse import urlsplit

    parts = urlsplit(backend.spec.endpoint)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    start = time.perf_counter()
    try:
        _, writer = await asyncio.wait_for(
            asyncio.open_connection(parts.hostname, port), backend.connect_s
        )
    except (OSError, TimeoutError):
        return False, f"{(time.perf_counter() - start) * 1000:.0f} ms"
    writer.close()
    return True, f"{(time.perf_counter() - start) * 1000:.0f} ms"


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _models(models: frozenset[str]) -> str:
    names = sorted(models)
    return ", ".join(names[:3]) + (f" (+{len(names) - 3})" if len(names) > 3 else "")


def _table(rows: list[Row]) -> None:
    from rich.markup import escape
    from rich.table import Table

    from .render import print_table

    table = Table("provider", "reachable", "health", "models", "latency")
    for r in rows:
        style = "green" if r.usable else "red"
        table.add_row(
            r.provider, r.reachable, f"[{style}]{escape(r.health)}[/]", r.models, r.latency
        )
    print_table(table)
