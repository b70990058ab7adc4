"""How the CLI shows attempts and failures (plain text; rich only for tables)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable

    from ..core.errors import AllProvidersFailed
    from ..core.trace import Attempt


NDJSON = "agent_reach.ndjson"  # ctx.meta: stdout is one JSON value per line
PRINTED = "agent_reach.printed"  # ctx.meta: something went to stdout already


def short(text: str, limit: int = 160) -> str:
    """`text` on one line, cut to `limit` characters (an ellipsis marks the cut)."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class TraceLines:
    """Trace lines in the seed's style, one per attempt, as they happen:

    Connecting to zhipu-api… auth_failed (401, 12 ms) — invalid api key
    Fallback to local-ollama, success! (230 ms)
    """

    def __init__(self) -> None:
        self.count = 0
        self.last: str | None = None

    def line(self, a: Attempt) -> str:
        if a.last_resort:
            verb = "Last resort:"
        elif a.who == self.last:
            verb = "Retrying"
        elif self.count == 0:
            verb = "Connecting to"
        else:
            verb = "Fallback to"
        self.count += 1
        self.last = a.who
        ms = f"{a.ms:.0f} ms"
        if a.ok:
            sep = "…" if verb in ("Connecting to", "Retrying") else ","
            return f"{verb} {a.who}{sep} success! ({ms})"
        if a.skipped:
            return f"Skipping {a.who}: {a.reason}" + (f" — {short(a.detail)}" if a.detail else "")
        facts = f"{a.status}, {ms}" if a.status is not None else ms
        tail = f" — {short(a.detail)}" if a.detail else ""
        return f"{verb} {a.who}… {a.reason} ({facts}){tail}"


def chain(trace: Iterable[Attempt]) -> str:
    """`dead connect_failed → auth auth_failed → local ok`: a request's attempts in order."""
    return " → ".join(f"{a.who} {a.label}" for a in trace)


def attempt_line(a: Attempt) -> str:
    """`  name: reason (status, ms) — detail`, for the failure summary."""
    facts = f"{a.status}, {a.ms:.0f} ms" if a.status is not None else f"{a.ms:.0f} ms"
    lr = " [last resort]" if a.last_resort else ""
    tail = f" — {short(a.detail)}" if a.detail else ""
    return f"  {a.who}: {a.reason} ({facts}){lr}{tail}"


def failure_lines(exc: AllProvidersFailed) -> list[str]:
    """What the CLI prints to stderr when every provider failed."""
    head = exc.fault.message or (str(exc).split(" (", 1)[0] if exc.attempts else str(exc))
    return [f"agent-reach: {head}", *(attempt_line(a) for a in exc.attempts)]


def print_table(table: object) -> None:
    """Print a rich table: as wide as the terminal, or wide enough not to cut when piped."""
    import sys

    from rich.console import Console

    width = None if sys.stdout.isatty() else 240
    Console(soft_wrap=False, width=width).print(table)


def print_json(value: object) -> None:
    """`value` as JSON on stdout: indented, or on one line when the command writes NDJSON."""
    import click
    import orjson

    ctx = click.get_current_context(silent=True)
    line = ctx is not None and bool(ctx.meta.get(NDJSON))
    if ctx is not None:
        ctx.meta[PRINTED] = True
    click.echo(orjson.dumps(value, option=0 if line else orjson.OPT_INDENT_2).decode())
