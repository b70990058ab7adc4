"""`agent-reach serve`: the OpenAI-compatible proxy."""

from __future__ import annotations

import sys
from typing import Any

import click

from .exits import expected_errors


@click.command()
@click.option("--host", help="Address to listen on (default: server.host, 127.0.0.1).")
@click.option("--port", type=click.IntRange(0, 65535), help="Port (default: server.port, 8000).")
@click.option(
    "--workers",
    type=click.IntRange(1, 64),
    default=1,
    show_default=True,
    help="Processes sharing the port (SO_REUSEPORT), for several cores.",
)
@click.option(
    "--shutdown-timeout",
    type=click.FloatRange(0),
    default=300.0,
    show_default=True,
    help="Seconds in-flight requests and streams get to finish on SIGTERM; then each ends with "
    "its API's error (a second signal: at once).",
)
@click.option(
    "--drain-delay",
    type=click.FloatRange(0),
    default=0.0,
    show_default=True,
    help="Seconds the proxy keeps accepting after SIGTERM, /readyz answering 503, so that load "
    "balancers stop sending it requests first.",
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default="info",
    show_default=True,
    help="What goes to stderr: info has one access line per request; debug adds tracebacks.",
)
@click.option("--no-access-log", "no_access_log", is_flag=True, help="No access line per request.")
@click.option(
    "--watch", is_flag=True, help="Reload the config when its file changes (SIGHUP always does)."
)
@click.option("--reuse-port", is_flag=True, hidden=True)
@click.pass_obj
@expected_errors
def serve(
    obj: dict[str, Any],
    host: str | None,
    port: int | None,
    workers: int,
    shutdown_timeout: float,
    drain_delay: float,
    log_level: str,
    no_access_log: bool,
    watch: bool,
    reuse_port: bool,
) -> None:
    """Serve /v1/chat/completions (and more) with failover, for any OpenAI SDK."""
    from ..router import Router

    router = Router.from_config(obj["config_path"])
    server = router.config.server
    host = host or server.host
    port = server.port if port is None else port
    from ..server.guard import api_keys

    api_keys(server, router.config.source)  # client auth meant but off: refused before serving
    if workers > 1:
        _shared_state(router.config.state, workers, router.config.source)
        from ..server import run_workers

        config_args = ["--config", router.config.source] if obj["config_path"] else []
        serve_args = [
            *("--log-level", log_level, "--shutdown-timeout", str(shutdown_timeout)),
            *("--drain-delay", str(drain_delay)),
        ]
        if no_access_log:
            serve_args.append("--no-access-log")
        if watch:
            serve_args.append("--watch")
        sys.exit(run_workers(config_args, host, port, workers, serve_args))
    import asyncio

    from ..server import loop_factory, run

    try:
        asyncio.Runner(loop_factory=loop_factory()).run(
            run(
                router,
                host,
                port,
                reuse_port=reuse_port,
                shutdown_s=shutdown_timeout,
                drain_delay_s=drain_delay,
                log_level=log_level,
                access_log=not no_access_log,
                watch=watch,
            )
        )
    except OSError as exc:  # e.g. the port is taken
        click.echo(f"agent-reach: cannot serve on {host}:{port}: {exc.strerror or exc}", err=True)
        sys.exit(2)


def _shared_state(state: str, workers: int, source: str) -> None:
    """Several workers must share their state: with `memory://` each would keep its own
    budgets (a `3req/day` budget would take 3 a worker), stored responses (found only by the
    worker that made them) and login throttle. ConfigError for that combination."""
    if state.startswith("memory://"):
        from ..core.errors import ConfigError

        raise ConfigError(
            f"field 'state': memory:// is kept in each process, and --workers {workers} starts"
            f" {workers} of them: budgets, stored responses and the login throttle would be"
            " each worker's own; use sqlite:///PATH (the default) or redis://HOST:PORT/DB, or"
            " one worker",
            file=source,
        )
