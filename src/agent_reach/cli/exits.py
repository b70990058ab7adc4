"""How a command ends (protocol §11): exit codes, the error a user can cause said in words
(and, with `--json`, as an error object on stdout), never a traceback."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from .render import PRINTED

F = TypeVar("F", bound=Callable[..., Any])

JSON_MODE = "agent_reach.json"  # ctx.meta: the command runs with --json
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
        from ..core.errors import AllProvidersFailed, ConfigError, RequestError, StreamInterrupted

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
