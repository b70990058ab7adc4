"""The `agent-reach` command line (protocol §11).

Start-up stays light: this module imports only click; each command imports what it needs when
it runs. Exit codes: 0 ok, 1 all providers failed (or none usable), 2 usage or config error.
With `--json`, stdout carries JSON only, failures included (`{"error": {...}}`).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from ..version import PROTOCOL_VERSION, __version__

F = TypeVar("F", bound=Callable[..., Any])

JSON_MODE = "agent_reach.json"  # ctx.meta: the command runs with --json
NDJSON = "agent_reach.ndjson"  # ctx.meta: stdout is one JSON value per line
PRINTED = "agent_reach.printed"  # ctx.meta: something went to stdout already
_FAIL_TYPES = {1: "failed", 2: "usage_error", 130: "interrupted"}


def fail(message: str, code: int, type: str | None = None) -> None:
    """Print `agent-reach: message` to stderr (and, with `--json`, an error object to stdout
    when nothing else was printed there) and exit with `code`."""
    click.echo(f"agent-reach: {type.replace('_', ' ') + ': ' if type else ''}{message}", err=True)
    ctx = click.get_current_context(silent=True)
    if ctx is not None and ctx.meta.get(JSON_MODE) and not ctx.meta.get(PRINTED):
        print_error(message, type or _FAIL_TYPES.get(code, "failed"))
    sys.exit(code)


def print_error(
    message: str, type: str, status: int | None = None, attempts: list[Any] | None = None
) -> None:
    """The `--json` form of a failure: `{"error": {message, type, status}}`, plus `attempts`
    when providers were tried (status: what the proxy would answer, or null)."""
    from .render import print_json

    body: dict[str, Any] = {"error": {"message": message, "type": type, "status": status}}
    if attempts is not None:
        body["attempts"] = [a.to_dict() for a in attempts]
    print_json(body)


def expected_errors(func: F) -> F:
    """Turn the errors a user can cause into a message and an exit code, never a traceback."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from ..errors import AllProvidersFailed, ConfigError, RequestError, StreamInterrupted

        ctx = click.get_current_context()
        ctx.meta[JSON_MODE] = bool(kwargs.get("as_json"))
        try:
            return func(*args, **kwargs)
        except ConfigError as exc:
            fail(str(exc), 2, "config_error")
        except RequestError as exc:
            click.echo(f"agent-reach: {exc}", err=True)
            if ctx.meta[JSON_MODE]:
                print_error(str(exc), "invalid_request_error", exc.status)
            sys.exit(2)
        except AllProvidersFailed as exc:
            from .render import failure_lines

            lines = failure_lines(exc)
            for line in lines:
                click.echo(line, err=True)
            if ctx.meta[JSON_MODE]:
                interrupted = isinstance(exc, StreamInterrupted)
                kind = "stream_interrupted" if interrupted else exc.code
                print_error(lines[0].removeprefix("agent-reach: "), kind, exc.status, exc.attempts)
            sys.exit(1)
        except KeyboardInterrupt:
            fail("interrupted", 130)

    return wrapper  # type: ignore[return-value]


def _set_config(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value is not None:
        ctx.ensure_object(dict)["config_path"] = value


def _with_config_option(command: click.Command) -> None:
    """Let `--config` follow the subcommand too (`agent-reach chat --config x.yaml`)."""
    if not any("--config" in p.opts for p in command.params):
        command.params.append(
            click.Option(
                ["--config"],
                type=click.Path(dir_okay=False),
                expose_value=False,
                callback=_set_config,
                help="Config file (also accepted before the command).",
            )
        )
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            _with_config_option(sub)


class _Main(click.Group):
    """The root group: its global options are accepted after any subcommand as well."""

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        _with_config_option(cmd)
        super().add_command(cmd, name)


@click.group(cls=_Main, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(
    __version__,
    "-V",
    "--version",
    prog_name="agent-reach",
    message=f"%(prog)s %(version)s (protocol {PROTOCOL_VERSION})",
)
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    envvar=None,
    help="Config file (default: $AGENT_REACH_CONFIG, then ~/.agent-reach/config.yaml).",
)
@click.pass_context
def main(ctx: click.Context, config_path: str | None) -> None:
    """agent-reach: when one LLM provider fails, the next one answers."""
    ctx.obj = {"config_path": config_path}


def _register() -> None:
    from . import (
        chat,
        check,
        config_cmd,
        demo,
        drill,
        init_cmd,
        probe,
        providers,
        report,
        run,
        serve,
        setup,
    )

    for command in (
        chat.chat,
        check.check,
        config_cmd.config,
        demo.demo,
        drill.drill,
        init_cmd.init,
        probe.probe,
        providers.providers,
        serve.serve,
        report.report,
        report.status,
        report.caps,
        run.run,
        setup.setup,
    ):
        main.add_command(command)


_register()
