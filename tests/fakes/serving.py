"""Running a fake provider: an aiohttp app on a free port of 127.0.0.1, in the caller's event
loop (`serving`) or in a thread's own (`Threaded`: synchronous tests and CLI subprocesses reach
it while the test's code runs)."""

from __future__ import annotations

import asyncio
import ssl
import threading
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from aiohttp import web

T = TypeVar("T")


async def start(
    app: web.Application,
    *,
    tls: ssl.SSLContext | None = None,
    cancel: bool = False,
    backlog: int = 128,
) -> web.AppRunner:
    """`app` listening; `cancel`: a handler is cancelled when its client goes away."""
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1, handler_cancellation=cancel)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls, backlog=backlog).start()
    return runner


def port_of(runner: web.AppRunner) -> int:
    return int(runner.addresses[0][1])


@asynccontextmanager
async def serving(app: web.Application, **options: Any) -> AsyncIterator[int]:
    """`app` listening for the block (options as `start`'s); its port."""
    runner = await start(app, **options)
    try:
        yield port_of(runner)
    finally:
        await runner.cleanup()


class Threaded:
    """Apps served by one event loop in a thread of its own, until `stop`."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._runners: list[web.AppRunner] = []
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def serve(self, app: web.Application, **options: Any) -> int:
        """`app` listening (options as `start`'s); its port."""
        runner = self.run(start(app, **options))
        self._runners.append(runner)
        return port_of(runner)

    def run(self, work: Coroutine[Any, Any, T]) -> T:
        """`work` run on the servers' loop, waited for."""
        return asyncio.run_coroutine_threadsafe(work, self.loop).result(10)

    def stop(self) -> None:
        for runner in self._runners:
            self.run(runner.cleanup())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()
