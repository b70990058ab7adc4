"""The `agent-reach` command line (spec §11).

Start-up stays light: this module imports only click; each command imports what it needs when
it runs. Exit codes: 0 ok, 1 all providers failed (or none usable), 2 usage or config error.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from .._version import __version__

F = TypeVar("F", bound=Callable[..., Any])


def fail(message: str, code: int) -> None:
    """Print `agent-reach: message` to stderr and exit with `code`."""
    click.echo(f"agent-reach: {message}", err=True)
    sys.exit(code)


def expected_errors(func: F) -> F:
    """Turn the errors a user can cause into a message and an exit code, never a traceback."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from ..errors import AllProvidersFailed, ConfigError, RequestError

        try:
            return func(*args, **kwargs)
        except ConfigError as exc:
            fail(f"config error: {exc}", 2)
        except RequestError as exc:
            fail(str(exc), 2)
        except AllProvidersFailed as exc:
            from .render import failure_lines

            for line in failure_lines(exc):
                click.echo(line, err=True)
            sys.exit(1)
        except KeyboardInterrupt:
            fail("interrupted", 130)

    return wrapper  # type: ignore[return-value]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "-V", "--version", prog_name="agent-reach")
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

    main.add_command(chat.chat)
    main.add_command(check.check)
    main.add_command(config_cmd.config)
    main.add_command(demo.demo)
    main.add_command(drill.drill)
    main.add_command(init_cmd.init)
    main.add_command(probe.probe)
    main.add_command(providers.providers)
    main.add_command(serve.serve)
    main.add_command(report.report)
    main.add_command(report.status)
    main.add_command(run.run)
    main.add_command(setup.setup)


_register()
