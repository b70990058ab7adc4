"""`agent-reach check`: every provider's health check at once, as a table."""

from __future__ import annotations

import sys
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import click

from . import expected_errors

if TYPE_CHECKING:
    import aiohttp

    from ..backend import Backend
    from ..config import Config


@dataclass(frozen=True)
class Row:
    """One provider's check, as `check --json` prints it."""

    provider: str
    reachable: bool  # something answered at its endpoint or health URL
    usable: bool  # a request would be sent to it
    health: str  # "ok", "none" (no health check), else the reason it failed
    detail: str  # why, in words ("" when ok)
    models: list[str]  # what its health check lists ([] when it lists none)
    latency_ms: float | None  # of the health check or TCP connect; null when unreachable

    def health_text(self) -> str:
        if self.health == "none":
            return "no health check"
        return f"{self.health}: {self.detail}" if self.detail else self.health


def _row(
    provider: str, reachable: bool, health: str, detail: str, models: list[str], ms: float
) -> Row:
    usable = health in ("ok", "none") and reachable
    return Row(
        provider, reachable, usable, health, detail, models, round(ms, 1) if reachable else None
    )


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

        print_json([asdict(r) for r in rows])
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
        detail = "" if reachable else "no TCP connection to its endpoint"
        return _row(name, reachable, "none", detail, [], ms)
    budget = backend.connect_s + backend.read_s
    health = await probe(session, backend, time.time(), budget)
    reached = health.outcome.reason not in (Reason.CONNECT_FAILED, Reason.TIMEOUT)
    listed = sorted(health.models or ())
    if backend.missing_key:
        detail = f"{backend.missing_key} is not set"
        return _row(name, reached, str(Reason.AUTH_FAILED), detail, listed, health.ms)
    if not health.ok:
        detail = backend.redact(health.outcome.detail)
        return _row(name, reached, str(health.outcome.reason), detail, listed, health.ms)
    wanted = backend.model_for(model) if model else ""
    if wanted and health.models is not None and not model_listed(wanted, health.models):
        detail = f"{wanted!r} is not listed"
        return _row(name, True, str(Reason.MODEL_UNAVAILABLE), detail, listed, health.ms)
    return _row(name, True, "ok", "", listed, health.ms)


async def _connects(backend: Backend) -> tuple[bool, float]:
    """A TCP connect to the endpoint, for providers without a health check: (ok, ms)."""
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
        return False, (time.perf_counter() - start) * 1000
    writer.close()
    return True, (time.perf_counter() - start) * 1000


def _models(names: list[str]) -> str:
    if not names:
        return "-"
    return ", ".join(names[:3]) + (f" (+{len(names) - 3})" if len(names) > 3 else "")


def _table(rows: list[Row]) -> None:
    from rich.markup import escape
    from rich.table import Table

    from .render import print_table

    table = Table("provider", "reachable", "health", "models", "latency")
    for r in rows:
        style = "green" if r.usable else "red"
        table.add_row(
            r.provider,
            "yes" if r.reachable else "no",
            f"[{style}]{escape(r.health_text())}[/]",
            _models(r.models),
            "-" if r.latency_ms is None else f"{r.latency_ms:.0f} ms",
        )
    print_table(table)
