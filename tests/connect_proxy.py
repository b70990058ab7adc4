"""A small HTTP proxy on 127.0.0.1 for the tests, Clash-like: CONNECT tunnels (https
upstreams) and absolute-form requests (http upstreams), an optional `Proxy-Authorization`
check (407 without it), a status to answer every request with instead (e.g. 502) or none at
all (silent), and names
that only it resolves (an upstream a client cannot reach but through it). It runs
in its own thread with its own loop, so that CLI and proxy subprocesses can reach it; it
records every tunnel and forwarded request.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import threading
from dataclasses import dataclass, field
from urllib.parse import urlsplit

_REASONS = {200: "Connection established", 407: "Proxy Authentication Required", 502: "Bad Gateway"}


@dataclass
class ConnectProxy:
    """A running test proxy; `credentials` (`user:password`): what it requires."""

    credentials: str | None = field(default=None, repr=False)
    answer: int | None = None  # every request is answered with this status instead
    silent: bool = False  # every request is read and never answered
    echo: bool = False  # a refusal quotes the request's head (as some proxies' error pages do)
    hosts: dict[str, str] = field(default_factory=dict)  # names only it resolves (→ address)
    port: int = 0
    tunnels: list[str] = field(default_factory=list)  # host:port of each CONNECT it opened
    forwarded: list[str] = field(default_factory=list)  # URL of each absolute-form request
    refused: list[int] = field(default_factory=list)  # the status of each request it refused
    loop: asyncio.AbstractEventLoop | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def used(self) -> int:
        return len(self.tunnels) + len(self.forwarded)

    def clear(self) -> None:
        self.tunnels.clear()
        self.forwarded.clear()
        self.refused.clear()

    def start(self) -> ConnectProxy:
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self.loop = loop
            server = loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0))
            self.port = server.sockets[0].getsockname()[1]
            ready.set()
            loop.run_forever()
            server.close()
            loop.close()

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        ready.wait(10)
        return self

    def stop(self) -> None:
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)

    def _authorized(self, headers: dict[str, str]) -> bool:
        if self.credentials is None:
            return True
        token = base64.b64encode(self.credentials.encode()).decode()
        return headers.get("proxy-authorization", "").strip() == f"Basic {token}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            writer.close()
            return
        lines = head.decode("latin-1").split("\r\n")
        method, target, _ = lines[0].split(" ", 2)
        headers = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if sep:
                headers[name.strip().lower()] = value.strip()
        if self.silent:
            await reader.read()  # until the client gives up
            await _close(writer)
            return
        status = 407 if not self._authorized(headers) else self.answer
        if method == "CONNECT":
            host, _, port = target.rpartition(":")
            where = (host.strip("[]"), int(port))
        else:
            parts = urlsplit(target)
            where = (parts.hostname or "", parts.port or 80)
        upstream = None
        if status is None:
            try:
                upstream = await asyncio.open_connection(
                    self.hosts.get(where[0], where[0]), where[1]
                )
            except OSError:
                status = 502
        if status is not None:
            self.refused.append(status)
            challenge = 'Proxy-Authenticate: Basic realm="test"\r\n' if status == 407 else ""
            body = b"refused:\n" + head if self.echo else b""
            writer.write(
                f"HTTP/1.1 {status} {_REASONS.get(status, 'Refused')}\r\n{challenge}"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                + body
            )
            await _close(writer)
            return
        assert upstream is not None
        up_reader, up_writer = upstream
        if method == "CONNECT":
            self.tunnels.append(target)
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        else:
            self.forwarded.append(target)
            up_writer.write(head)  # as it came: an HTTP server takes the absolute form too
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        await _close(writer)


async def _close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(ConnectionError, OSError):
        await writer.wait_closed()
