"""`agent-reach probe URL`: what an endpoint speaks, how well, and the config entry for it.

The probing itself (health check, one small request per candidate format, paths for an
arbitrary JSON API, a stream request) is `agent_reach.probe`; here are the command's checks,
its printing, and `--write`, which appends the entry to the config file keeping its comments.
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import click

from .exits import expected_errors, fail
from .render import print_json

if TYPE_CHECKING:
    from pathlib import Path

    from .discovery import Report


@click.command()
@click.argument("url")
@click.option("--format", "fmt", help="The endpoint's format (default: detect it).")
@click.option("--model", "-m", help="The model to ask for (default: the first one listed).")
@click.option("--api-key-env", "key_env", help="The environment variable holding the key.")
@click.option("--write", "name", help="Append the entry to the config file as provider NAME.")
@click.option(
    "--weight",
    type=click.FloatRange(min=0),
    help="The written entry's fallback_weight (default: below every other, so it comes last).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_obj
@expected_errors
def probe(
    obj: dict[str, Any],
    url: str,
    fmt: str | None,
    model: str | None,
    key_env: str | None,
    name: str | None,
    weight: float | None,
    as_json: bool,
) -> None:
    """Send one health check and one small chat request to URL; report its format, its
    compatibility level, streaming and the schema_compatibility paths. Exit 1 when it did not
    answer usably."""
    import asyncio

    from ..config.write import provider_names, weight_after_last
    from .discovery import run_probe
    from .init_cmd import config_target

    url = _endpoint(url, fmt)
    environ = _checked(url, fmt, model, key_env)
    target = None
    if name is not None:
        if not re.fullmatch(r"[A-Za-z0-9._-]+", name):
            fail(f"provider name {name!r}: expected letters, digits, '.', '_' or '-'", 2)
        target = config_target(obj["config_path"])
        if name in provider_names(target):
            fail(f"{target} already has a provider named {name!r}", 2)
    report = asyncio.run(run_probe(url, fmt, model or "", key_env or "", environ, name or "probe"))
    if target is not None and report.usable:
        weight = weight if weight is not None else weight_after_last(target)
        if weight is not None:
            report.provider["fallback_weight"] = weight
    if as_json:
        print_json(asdict(report))
    else:
        _print(report)
    if target is not None:
        if not report.usable:
            fail("nothing was written: the endpoint did not answer usably", 1)
        _write(target, str(name), report.provider, as_json)
    if not report.usable:
        raise SystemExit(1)


def _endpoint(url: str, fmt: str | None) -> str:
    """The endpoint to probe: `url`, or the one a base URL stands for (said on stderr)."""
    from ..catalog import endpoint_of_base

    found = endpoint_of_base(url, fmt)
    if found is None or fmt not in (None, found[0]):
        return url
    click.echo(f"{url} is a base URL: probing its {found[0]} endpoint {found[1]}", err=True)
    return found[1]


def _checked(url: str, fmt: str | None, model: str | None, key_env: str | None) -> dict[str, str]:
    """Exit 2 on arguments that cannot work; the environment the probe may read (the key,
    and the proxy variables: it goes where the provider would)."""
    from .. import dialects
    from ..catalog import formats_for_url
    from ..core import proxies
    from .discovery import model_in_url

    if not re.match(r"^https?://[^/?#]+", url):
        fail(f"expected a full http(s) URL, got {url!r}", 2)
    if fmt is not None and fmt not in dialects.FORMATS:
        fail(f"format {fmt!r} is not available (available: {', '.join(dialects.FORMATS)})", 2)
    if (fmt or formats_for_url(url)[0]) == "gemini" and not model and not model_in_url(url):
        fail("a Gemini models collection URL needs --model (or a URL that names the model)", 2)
    environ = {name: os.environ[name] for name in proxies.VARIABLES if name in os.environ}
    if not key_env:
        return environ
    if not os.environ.get(key_env):
        fail(f"{key_env} is not set", 2)
    return {**environ, key_env: os.environ[key_env]}


def _write(target: Path, name: str, provider: dict[str, Any], as_json: bool) -> None:
    """Append the probed provider to the config file, and say so."""
    from ..config.write import append_provider, read_raw, written

    how = append_provider(target, provider)
    click.echo(written(how, repr(name), target), err=as_json)
    if read_raw(target)[0].get("fallback_order"):
        click.echo(
            f"note: the file's fallback_order does not name {name!r}; add it there to try "
            "it by default",
            err=True,
        )


# -- reporting ---------------------------------------------------------------------------------


def _print(r: Report) -> None:
    from .. import catalog
    from ..config.write import to_yaml

    rows: list[tuple[str, str]] = []
    h = r.health
    if h is None or h.url is None:
        rows.append(("health check", "none (the format has no default health check)"))
    elif h.ok:
        listed = f", lists {_few(h.models)}" if h.models else ""
        rows.append(("health check", f"ok ({h.ms:.0f} ms) — {h.url}{listed}"))
    else:
        rows.append(("health check", f"failed ({h.ms:.0f} ms) — {h.url}: {h.detail}"))
    if r.model:
        rows.append(("model", f"{r.model} (from {r.model_from})"))
    for i, t in enumerate(r.tries):
        status = f"HTTP {t.status}, " if t.status else ""
        what = f"{t.format}{' with custom paths' if t.paths else ''}: {t.reason}"
        tail = f' — "{_short(t.answer)}"' if t.answer is not None else ""
        if t.detail:
            tail = f" — {t.detail}"
        rows.append(("chat" if i == 0 else "", f"{what} ({status}{t.ms:.0f} ms){tail}"))
    if r.usable:
        assert r.level is not None
        rows.append(("format", f"{r.format} ({r.detected_by})"))
        rows.append(("level", f"{r.level} — {catalog.LEVEL_MEANING[r.level]}"))
        s = r.stream
        works = f"yes ({s['chunks']} chunks)" if s["works"] else f"no — {s['detail']}"
        rows.append(("streaming", works))
        sc = r.schema_compatibility
        rows.append(
            ("paths", f"choices_path: {sc['choices_path']!r}, content_path: {sc['content_path']!r}")
        )
    else:
        rows.append(("result", f"not usable: {r.problem}"))
    rows += [("note", note) for note in r.notes]
    for label, text in rows:
        click.echo(f"{label:<14}{text}")
    if r.usable:
        click.echo("\nconfig entry:\n" + to_yaml([r.provider], indent=2).rstrip("\n"))


def _few(models: list[str]) -> str:
    return ", ".join(models[:3]) + (f" (+{len(models) - 3})" if len(models) > 3 else "")


def _short(text: str | None, limit: int = 60) -> str:
    one_line = " ".join((text or "").split())
    return one_line if len(one_line) <= limit else one_line[:limit] + "…"
