"""`agent-reach serve`: the proxy, in one process or as N workers sharing one port.

One process runs one event loop. With `--workers N` the parent starts N copies of itself that
all bind the same port with SO_REUSEPORT (the kernel spreads connections across them) and
passes SIGTERM / SIGINT on to them. SIGTERM makes a worker drain: `/readyz` answers 503 at
once, the listener accepts for `drain_delay_s` more (so that load balancers stop sending it
new requests), then stops; what is in flight gets `shutdown_s` seconds to finish, and what is
left then is ended as its API says (a stream's error event, a WebSocket's 1001). A second
signal ends the wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import IO, TYPE_CHECKING, NamedTuple

from ..net.ports import free_port
from ..router import Router

if TYPE_CHECKING:
    from .app import Gateway
    from .http11.connection import Server
    from .http11.wire import App

GC_YOUNG = 20_000  # objects made before the youngest generation is collected (`run`)


class CannotServe(Exception):
    """The proxy could not listen (the port is taken, or not allowed)."""


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's event loop where it is installed (a dependency but on Windows): the proxy's
    sockets, timers and callbacks in C (docs/decisions.md has what it saves); None, asyncio's
    own, elsewhere."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


async def run(
    router: Router,
    host: str,
    port: int,
    *,
    reuse_port: bool = False,
    shutdown_s: float = 300.0,
    drain_delay_s: float = 0.0,
    log_level: str = "info",
    access_log: bool = True,
    watch: bool = False,
) -> None:
    """Serve until SIGTERM or SIGINT, then drain (the module's docstring) and stop. SIGHUP
    (and, with `watch`, a change to the file) reloads the config."""
    from . import guard, reload
    from .app import Gateway
    from .browsers import host_name, loopback
    from .http11.descriptors import accept_batch
    from .log import configure, server_log

    configure(log_level, access_log)
    gateway = Gateway(
        router, api_keys=guard.api_keys(router.config.server, router.config.source), host=host
    )
    if not gateway.api_keys and not loopback(host_name(host)):
        server_log.warning(
            "agent-reach: client auth is off on %s: anyone who can reach it may use your "
            "providers (set %s to client keys)",
            host,
            router.config.server.api_keys_env or "server.api_keys_env",
        )
    server = _server(gateway, gateway.app(), access_log=access_log)
    backlog = accept_batch(server.limits.max_connections)
    await server.start(host, port, reuse_port=reuse_port, backlog=backlog)
    # asyncio accepts up to `backlog` connections at once: few, so that a burst cannot take the
    # descriptors upstream sockets need; the kernel still queues 2048.
    for sock in server.sockets:
        with socket.fromfd(sock.fileno(), sock.family, sock.type) as dup:
            dup.listen(2048)
    # Everything loaded so far lives as long as the server: keep it out of the collector's
    # way. The youngest generation is collected after 20,000 new objects, not 700: the
    # requests in flight hold a few thousand, so at 700 each collection walked (and aged) live
    # ones again and again, while at 20,000 most of a request's objects are freed before one
    # comes (docs/decisions.md has the figures).
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG, 10, 10)
    stop, hurry = asyncio.Event(), asyncio.Event()
    since: list[int] = []  # the requests answered when the stop began

    def signalled() -> None:
        if stop.is_set():
            hurry.set()
            return
        gateway.draining = True  # `/readyz` is 503 from now on
        since.append(server.finished)
        stop.set()

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):  # before the banner: a stop right after it counts
        loop.add_signal_handler(sig, signalled)
    # Before the banner too: a SIGHUP sent once it is read reloads, and never kills.
    stop_reloading = reload.install(gateway, watch=watch)
    bound = server.addresses[0]
    auth = "on" if gateway.api_keys else "off"
    base = f"http://{bound[0]}:{bound[1]}"
    print(
        f"agent-reach: serving on {base} ({len(router.config.providers)} providers, client"
        f" auth {auth}, pid {os.getpid()}; status page {base}/agent-reach/)",
        flush=True,
    )
    started = time.monotonic()
    try:
        await stop.wait()
    finally:
        stop_reloading()
        gateway.draining = True
        drain = Drain(shutdown_s, drain_delay_s, hurry, since[0] if since else server.finished)
        await _drain(server, drain, started)


class Drain(NamedTuple):
    """How a stop goes: the seconds in-flight requests get (`shutdown_s`) after the listener
    accepted for `delay_s` more; `hurry`, once set, ends either wait; `since`: the requests
    answered when it began (`Server.finished`)."""

    shutdown_s: float
    delay_s: float
    hurry: asyncio.Event
    since: int


async def _drain(server: Server, drain: Drain, started: float) -> None:
    """Drain and stop (the module's docstring); the log says how it went."""
    from .log import server_log

    accepting = f"/readyz answers 503, accepting for {drain.delay_s:g} s more; then " * bool(
        drain.delay_s
    )
    server_log.info(
        "agent-reach: draining: %s%d request(s) under way get %g s to finish (a second signal"
        " ends them now)",
        accepting,
        server.answering,
        drain.shutdown_s,
    )
    if drain.delay_s:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(drain.hurry.wait(), drain.delay_s)
    shutdown_s = 0 if drain.hurry.is_set() else drain.shutdown_s
    closed = await server.close(shutdown_s, drain.hurry, drain.since)
    server_log.info(
        "agent-reach: stopped after %.0f s: %d request(s) drained, %d ended unfinished "
        "(their API's error), %d served in all",
        time.monotonic() - started,
        closed.drained,
        closed.ended,
        server.requests_count,
    )


async def run_with(
    router: Router,
    port: int,
    key: str,
    route: str | None,
    program: Callable[[str], Awaitable[int]],
    log: IO[str] | None = None,
) -> int:
    """Serve on 127.0.0.1 (`port`, 0 for a free one) for the one client key `key`, with
    `route` for requests that name none, while `program(base_url)` runs; its result. The
    proxy's log (access lines included) goes to `log`, when given."""
    from .app import Gateway
    from .faces.relay import DEFAULT_ROUTE
    from .log import configure

    if log is not None:
        configure("info", access=True, stream=log)

    gateway = Gateway(router, api_keys=frozenset({key}))
    app = gateway.app()
    if route:
        app[DEFAULT_ROUTE] = route
    server = _server(gateway, app, access_log=log is not None)
    try:
        await server.start("127.0.0.1", port)
    except OSError as exc:
        await server.close(0)
        why = os.strerror(exc.errno) if exc.errno else str(exc)
        raise CannotServe(f"cannot serve on 127.0.0.1:{port}: {why}") from exc
    try:
        return await program(f"http://127.0.0.1:{server.addresses[0][1]}")
    finally:
        await server.close(2.0)


def _server(gateway: Gateway, app: App, *, access_log: bool) -> Server:
    """The server of `app` with the limits of `server:` (protocol §14) on its connections,
    `max_connections` clamped to the file descriptors the process may open (said when so)."""
    from .http11.connection import Server
    from .http11.descriptors import connection_cap, quiet_accept_errors, raise_limit
    from .log import access_logger, server_log

    limits = gateway.config.server
    nofile = raise_limit()
    cap = connection_cap(limits.max_connections, nofile)
    if cap < limits.max_connections:
        server_log.info(
            "agent-reach: server.max_connections %d lowered to %d: the process may open %d "
            "files (ulimit -n), and each connection may need an upstream socket besides",
            limits.max_connections,
            cap,
            nofile,
        )
        limits = limits.model_copy(update={"max_connections": cap})
    quiet_accept_errors(asyncio.get_running_loop(), server_log)
    return Server(
        app,
        limits=limits,
        screen=gateway.guard.expect,
        access=access_logger(access_log),
        error_body=gateway.error_bytes,
    )


def run_workers(
    argv_config: list[str], host: str, port: int, workers: int, serve_args: list[str]
) -> int:
    """Start `workers` processes on one port and wait for them; the exit code of the worst.
    `serve_args` are passed on to each (log level, access log, shutdown timeout, drain delay,
    --watch); SIGTERM, SIGINT and SIGHUP are passed on to every worker. The banner comes once every
    worker serves (each says so on its own stdout, a pipe here): a signal sent after it reaches
    workers that stop cleanly."""
    port = port or free_port(host)
    cmd = [sys.executable, "-m", "agent_reach", *argv_config, "serve", *serve_args, "--host", host]
    procs = [
        subprocess.Popen(
            [*cmd, "--port", str(port), "--reuse-port"], stdout=subprocess.PIPE, text=True
        )
        for _ in range(workers)
    ]
    stopping = False

    def forward(sig: int, _frame: object) -> None:
        nonlocal stopping
        stopping = stopping or sig != signal.SIGHUP
        for p in procs:
            if p.poll() is None:
                p.send_signal(sig)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    for p in procs:
        assert p.stdout is not None
        if not p.stdout.readline() and not stopping:  # it stopped before serving (see stderr)
            for other in procs:
                other.terminate()
            return max(other.wait() for other in procs) or 1
    if not stopping:
        print(f"agent-reach: serving on http://{host}:{port} with {workers} workers", flush=True)
    return max(p.wait() for p in procs)
