"""`agent-reach providers`: the built-in catalog of known endpoints (protocol §11, §13)."""

from __future__ import annotations

import click

from .exits import expected_errors


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the entries as JSON.")
@expected_errors
def providers(as_json: bool) -> None:
    """List the known provider endpoints with their compatibility level."""
    from .. import catalog

    entries = catalog.load()
    if as_json:
        from .render import print_json

        print_json([e.to_dict() for e in entries])
        return
    from rich import box
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    table = Table("name", "format", "level", "key variable", "endpoint", box=box.SIMPLE_HEAD)
    for column in table.columns:
        column.overflow = "fold"
    for e in entries:
        table.add_row(e.name, e.format, e.level, e.key_env or "-", escape(e.endpoint))
    console = Console(soft_wrap=False)
    if not console.is_terminal:  # piped: whole URLs on one line
        console = Console(soft_wrap=False, width=max(console.width, 160))
    console.print(table)
    click.echo(
        "levels: "
        + "; ".join(f"{level} = {meaning}" for level, meaning in catalog.LEVEL_MEANING.items()),
        err=True,
    )
