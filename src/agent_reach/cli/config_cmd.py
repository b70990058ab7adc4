"""`agent-reach config validate|schema`."""

from __future__ import annotations

from typing import Any

import click

from .exits import expected_errors


@click.group()
def config() -> None:
    """Check a config file, or print its JSON Schema."""


@config.command()
@click.argument("path", required=False, type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.pass_obj
@expected_errors
def validate(obj: dict[str, Any], path: str | None, as_json: bool) -> None:
    """Validate a config file (default: the one agent-reach would use); exit 2 if it is wrong."""
    from ..config import load_config

    cfg = load_config(path or obj["config_path"])
    table = cfg.route_table()
    unset: dict[str, str | list[str]] = {
        p.name: (envs if p.keys else envs[0])
        for p in cfg.providers
        if (envs := [v for v in p.key_envs if not _is_set(v)])
    }
    no_auth = [p for p in cfg.providers if p.proxy_auth_env and not _is_set(p.proxy_auth_env)]
    if as_json:
        from .render import print_json

        print_json(
            {
                "source": cfg.source,
                "providers": [p.name for p in cfg.providers],
                "default_order": list(table.default),
                "routes": {name: list(names) for name, names in table.routes.items()},
                "unset_keys": unset,  # a pool's: the list of its keys not set
                "unset_proxy_auth": {p.name: p.proxy_auth_env for p in no_auth},
            }
        )
        return
    click.echo(f"{cfg.source}: ok, {len(cfg.providers)} provider(s)")
    click.echo(f"  default order: {' → '.join(table.default)}")
    for name, names in table.routes.items():
        click.echo(f"  route {name}: {' → '.join(names)}")
    for p in cfg.providers:
        missing = unset.get(p.name)
        if isinstance(missing, str):
            click.echo(f"  note: {p.name}: {missing} is not set (it will be skipped)")
        elif missing and len(missing) < len(p.key_envs):
            click.echo(f"  note: {p.name}: {', '.join(missing)} not set (its other keys are used)")
        elif missing:
            click.echo(
                f"  note: {p.name}: none of {', '.join(missing)} is set (it will be skipped)"
            )
    for p in no_auth:
        click.echo(f"  note: {p.name}: {p.proxy_auth_env} is not set (no proxy credentials)")


def _is_set(var: str) -> bool:
    import os

    return bool(os.environ.get(var))


@config.command()
def schema() -> None:
    """Print the JSON Schema of the config file (for editors)."""
    import json

    from ..config.schema import document

    click.echo(json.dumps(document(), indent=2))
