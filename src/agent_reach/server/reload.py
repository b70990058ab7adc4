"""Reloading the config while serving (protocol §12.1): on SIGHUP, and with `serve --watch` when
the file changes (its mtime or size, polled once a second).

A reload reads and validates the whole file off the event loop, builds a new `Router` on the
same state store, and hands it to the proxy: new requests use it, requests in flight finish on
the router they started with. Remembered state is the store's, by provider identity (name,
endpoint and key), so unchanged providers keep their circuits, health and quotas, and an
edited one starts fresh. A file that does not load keeps the running config and logs why (the
file, provider and field, as `config validate` says it), and so does one that would turn client
auth off (its keys' variable unset or empty, or `server:` gone): that needs a restart.
`state:` and the listening address are read at start-up only; a change to them is logged as
needing a restart. Every outcome counts in `agent_reach_config_reloads_total{result}`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Callable

from ..config import Config, load_config
from ..core.errors import ConfigError
from ..router import Router
from .app import Gateway
from .guard import api_keys

log = logging.getLogger("agent_reach.server")


class Reloader:
    """Reloads `path` into `proxy`, one reload at a time."""

    def __init__(self, proxy: Gateway, path: str):
        self.proxy = proxy
        self.path = path
        self._lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[bool]] = set()

    def trigger(self) -> None:
        """Reload in the background (a signal handler cannot wait)."""
        task = asyncio.create_task(self.reload())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def reload(self) -> bool:
        """Read the file again and serve with it; False (old config kept) when it is invalid."""
        async with self._lock:
            try:
                config = await asyncio.to_thread(load_config, self.path)
                keys = api_keys(config.server, config.source)
                if self.proxy.api_keys and not keys:
                    raise ConfigError(
                        "server.api_keys_env: the new config serves without client keys; "
                        "turning client auth off needs a restart",
                        file=self.path,
                    )
                # Building it prepares the providers: a proxy variable that holds no http proxy
                # for a provider the old config did not have is found only now.
                router = Router(config, store=self.proxy.router.store)
            except ConfigError as exc:
                self.proxy.metrics.reloads.labels("error").inc()
                log.error(
                    "agent-reach: config reload failed, still serving the old config: %s", exc
                )
                return False
            old = self.proxy.config
            _warn_restart_only(old, config)
            self.proxy.adopt(router, keys)
            self.proxy.metrics.reloads.labels("ok").inc()
            log.info("agent-reach: config reloaded from %s: %s", self.path, _changes(old, config))
            return True

    async def watch(self, interval_s: float = 1.0) -> None:
        """Reload whenever the file's modification time or size changes."""
        seen = _stamp(self.path)
        while True:
            await asyncio.sleep(interval_s)
            now = _stamp(self.path)
            if now is not None and now != seen:
                seen = now
                await self.reload()


def install(proxy: Gateway, *, watch: bool) -> Callable[[], None]:
    """Reload on SIGHUP (and on file changes with `watch`); the function that stops it."""
    source = proxy.config.source
    if not os.path.isfile(source):
        return lambda: None
    reloader = Reloader(proxy, source)
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGHUP, reloader.trigger)
    watcher = asyncio.create_task(reloader.watch()) if watch else None

    def stop() -> None:
        loop.remove_signal_handler(signal.SIGHUP)
        if watcher is not None:
            watcher.cancel()

    return stop


def _stamp(path: str) -> tuple[int, int] | None:
    with contextlib.suppress(OSError):
        st = os.stat(path)
        return st.st_mtime_ns, st.st_size
    return None


def _changes(old: Config, new: Config) -> str:
    """`N providers (added x; changed y; removed z)` for the log line."""
    before = {p.name: p for p in old.providers}
    after = {p.name: p for p in new.providers}
    parts = [
        f"{what} {', '.join(names)}"
        for what, names in (
            ("added", [n for n in after if n not in before]),
            ("changed", [n for n in after if n in before and after[n] != before[n]]),
            ("removed", [n for n in before if n not in after]),
        )
        if names
    ]
    return f"{len(after)} providers" + (f" ({'; '.join(parts)})" if parts else "")


# What the listener, its connections, the guard and the upstream client take at start (the
# rest is read per request).
_AT_START = (
    "host",
    "port",
    "max_body_bytes",
    "first_byte_timeout_s",
    "keepalive_timeout_s",
    "request_timeout_s",
    "client_write_timeout_s",
    "max_connections",
    "max_head_bytes",
    "max_requests_per_key",
    "max_upstream_connections",
    "max_upstream_per_origin",
)


def _warn_restart_only(old: Config, new: Config) -> None:
    if new.state != old.state:
        log.warning("agent-reach: `state:` changed; it applies at the next restart")
    changed = [
        f"server.{name}"
        for name in _AT_START
        if getattr(new.server, name) != getattr(old.server, name)
    ]
    if changed:
        log.warning("agent-reach: %s changed; it applies at the next restart", ", ".join(changed))
