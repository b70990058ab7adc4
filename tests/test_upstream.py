"""The upstream client (`agent_reach.upstream`) against real servers on 127.0.0.1: raw asyncio
servers that write exactly the bytes a case needs, a small CONNECT proxy, and TLS with a test CA.
"""

from __future__ import annotations

import asyncio
import gzip
import logging
import socket
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import pytest
import trustme

from agent_reach.core.proxies import Proxy
from agent_reach.core.trace import Reason
from agent_reach.net.exchange import HIGH_WATER, READ_SIZE
from agent_reach.net.failures import (
    ConnectFailed,
    ConnectTimeout,
    DeadlineExceeded,
    Disconnected,
    Malformed,
    PoolTimeout,
    ReadTimeout,
    TLSFailed,
)
from agent_reach.net.transport import transport_failure
from agent_reach.net.upstream import Client, Timeouts

T = Timeouts(1.0, 1.0, 5.0)
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
WRITERS: list[asyncio.StreamWriter] = []  # every accepted connection, closed after each test
SERVERS: list[asyncio.Server] = []  # every listening server, closed after each test


@pytest.fixture(autouse=True)
async def _close_accepted() -> AsyncIterator[None]:
    yield
    for writer in WRITERS:
        writer.close()
    for server in SERVERS:
        server.close()
    await asyncio.sleep(0.05)
    WRITERS.clear()
    SERVERS.clear()


async def listen(handler: Handler, tls: ssl.SSLContext | None = None) -> asyncio.Server:
    async def tracked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        WRITERS.append(writer)
        await handler(reader, writer)

    server = await asyncio.start_server(tracked, "127.0.0.1", 0, ssl=tls)
    SERVERS.append(server)
    return server


Answer = Callable[[bytes], bytes]  # the request's head and body → the bytes written back


@dataclass
class Raw:
    """A server that answers each request on a connection with `answer(request)`."""

    answer: Answer
    connections: int = 0
    requests: list[bytes] = field(default_factory=list)
    server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        assert self.server is not None
        return int(self.server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                request = head + await reader.readexactly(length)
                self.requests.append(request)
                writer.write(self.answer(request))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@pytest.fixture
async def raw() -> AsyncIterator[Callable[[Answer], Raw]]:
    servers: list[Raw] = []

    def start(answer: Answer) -> Raw:
        servers.append(Raw(answer))
        return servers[-1]

    yield start
    for server in servers:
        if server.server is not None:
            server.server.close()


async def started(server: Raw, tls: ssl.SSLContext | None = None) -> Raw:
    server.server = await listen(server._serve, tls)
    return server


def ok(body: bytes, extra: bytes = b"") -> Answer:
    def answer(_: bytes) -> bytes:
        return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n%s" % (len(body), extra, body)

    return answer


async def test_keep_alive_reuses_one_connection(raw: Callable[[Answer], Raw]) -> None:
    server = await started(raw(ok(b'{"a":1}', b"Content-Type: application/json\r\n")))
    client = Client("t")
    for _ in range(50):
        resp, body = await client.fetch("POST", f"http://127.0.0.1:{server.port}/x", b"{}", {}, T)
        assert (resp.status, body, resp.content_type) == (200, b'{"a":1}', "application/json")
    await client.close()
    assert server.connections == 1
    assert len(server.requests) == 50
    assert server.requests[0].startswith(b"POST /x HTTP/1.1\r\nHost: 127.0.0.1:")


async def test_chunked_gzip_and_interim_answers(raw: Callable[[Answer], Raw]) -> None:
    packed = gzip.compress(b"hello " * 1000)
    chunks = b"".join(
        b"%x\r\n%s\r\n" % (len(packed[i : i + 100]), packed[i : i + 100])
        for i in range(0, len(packed), 100)
    )
    answer = (
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
        b"Content-Encoding: gzip\r\n\r\n" + chunks + b"0\r\n\r\n"
    )
    server = await started(raw(lambda _: answer))
    client = Client("t")
    for _ in range(3):
        resp, body = await client.fetch("POST", f"http://127.0.0.1:{server.port}/", b"", {}, T)
        assert (resp.status, body) == (200, b"hello " * 1000)
    await client.close()
    assert server.connections == 1


async def test_an_answer_that_ends_with_the_connection() -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nline one\nline two")
        writer.close()

    server = await listen(serve)
    port = server.sockets[0].getsockname()[1]
    client = Client("t")
    resp = await client.request("GET", f"http://127.0.0.1:{port}/", b"", {}, T)
    assert [await resp.lines() for _ in range(3)] == [[b"line one"], [b"line two"], []]
    resp.release()
    await client.close()
    server.close()


async def test_failures_are_named(raw: Callable[[Answer], Raw]) -> None:
    client = Client("t")
    dead = await started(raw(ok(b"")))
    port = dead.port
    assert dead.server is not None
    dead.server.close()
    await dead.server.wait_closed()
    with pytest.raises(ConnectFailed, match="connection refused"):
        await client.fetch("GET", f"http://127.0.0.1:{port}/", b"", {}, T)
    cut = await started(raw(lambda _: b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc"))
    with pytest.raises(ReadTimeout):
        await client.fetch("GET", f"http://127.0.0.1:{cut.port}/", b"", {}, Timeouts(1, 0.2, 5))
    junk = await started(raw(lambda _: b"SMTP ready\r\n\r\n"))
    with pytest.raises(Malformed):
        await client.fetch("GET", f"http://127.0.0.1:{junk.port}/", b"", {}, T)
    with pytest.raises(ValueError, match="invalid header"):
        await client.fetch("GET", f"http://127.0.0.1:{junk.port}/", b"", {"X": "a\r\nB: c"}, T)
    await client.close()


async def test_an_unread_stream_holds_the_upstream_back() -> None:
    """The client reads nothing: memory stays near HIGH_WATER, the server's writes back up."""
    written = 0

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal written
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100000000\r\n\r\n")
        lines = (b"data: " + b"x" * 1000 + b"\n\n") * 256  # 256 KB a write: reads come full
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline and written < 100_000_000:
            writer.write(lines)
            written += len(lines)
            try:
                await asyncio.wait_for(writer.drain(), 0.3)
            except TimeoutError:
                break  # backed up: the client stopped reading
        writer.close()

    server = await listen(serve)
    port = server.sockets[0].getsockname()[1]
    client = Client("t")
    resp = await client.request("GET", f"http://127.0.0.1:{port}/", b"", {}, Timeouts(1, 5))
    await asyncio.sleep(1.0)
    held = len(resp._live().buffer)
    assert held <= HIGH_WATER + READ_SIZE  # reading paused past HIGH_WATER, a read at most
    assert written < 8_000_000  # socket buffers and ours, not the whole answer
    assert (await resp.lines())[0].startswith(b"data: xxx")
    resp.close()
    await client.close()
    server.close()


@dataclass
class ConnectProxy:
    """A CONNECT proxy on 127.0.0.1: tunnels when the Proxy-Authorization is `want`."""

    want: str | None = None
    tunnels: int = 0
    server: asyncio.Server | None = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode()
        target = head.split(" ")[1]
        auth = next(
            (
                line.split(": ", 1)[1]
                for line in head.split("\r\n")
                if line.lower().startswith("proxy-authorization")
            ),
            None,
        )
        if auth != self.want:
            writer.write(b"HTTP/1.1 407 Proxy Authentication Required\r\n\r\n")
            writer.close()
            return
        host, port = target.rsplit(":", 1)
        up_reader, up_writer = await asyncio.open_connection(host, int(port))
        WRITERS.append(up_writer)
        self.tunnels += 1
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            while data := await src.read(65536):
                dst.write(data)
                await dst.drain()
            dst.close()

        await asyncio.gather(
            pipe(reader, up_writer), pipe(up_reader, writer), return_exceptions=True
        )


async def test_through_a_connect_proxy_with_tls(raw: Callable[[Answer], Raw]) -> None:
    ca = trustme.CA()
    served = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost").configure_cert(served)
    server = await started(raw(ok(b"tunnelled")), served)
    trusted = ssl.create_default_context()
    ca.configure_trust(trusted)
    proxy = ConnectProxy(want="Basic dTpw")
    proxy.server = await listen(proxy._serve)
    proxy_port = proxy.server.sockets[0].getsockname()[1]
    client = Client("t")
    url = f"https://localhost:{server.port}/v1"
    via = Proxy("127.0.0.1", proxy_port, "u", "p")
    for _ in range(3):
        _, body = await client.fetch("POST", url, b"{}", {}, T, trusted, via)
        assert body == b"tunnelled"
    assert proxy.tunnels == 1  # pooled: one tunnel for all three
    with pytest.raises(ConnectFailed, match="the proxy answered 407 Proxy Authentication Required"):
        await client.fetch("POST", url, b"{}", {}, T, trusted, Proxy("127.0.0.1", proxy_port))
    with pytest.raises(TLSFailed, match="not trusted"):
        await client.fetch("POST", url, b"{}", {}, T, None, via)  # the system CAs only
    proxy.server.close()
    await proxy.server.wait_closed()
    with pytest.raises(ConnectFailed, match="cannot connect to the proxy: connection refused"):
        await client.fetch("POST", url, b"{}", {}, T, trusted, Proxy("127.0.0.1", proxy_port))
    await client.close()


async def test_a_cancelled_request_closes_its_connection() -> None:
    closed = asyncio.Event()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
        await reader.read()  # until the client goes
        closed.set()

    server = await listen(serve)
    port = server.sockets[0].getsockname()[1]
    client = Client("t")
    task = asyncio.ensure_future(client.fetch("GET", f"http://127.0.0.1:{port}/", b"", {}, T))
    await asyncio.sleep(0.1)
    task.cancel()
    await asyncio.wait_for(closed.wait(), 5)  # closed on cancel, not held (as it would be)
    await client.close()
    server.close()


async def test_a_closed_keep_alive_connection_is_not_reused(raw: Callable[[Answer], Raw]) -> None:
    server = await started(raw(ok(b"x", b"Connection: close\r\n")))
    client = Client("t")
    for _ in range(3):
        _, body = await client.fetch("GET", f"http://127.0.0.1:{server.port}/", b"", {}, T)
        assert body == b"x"
    assert server.connections == 3
    await client.close()


async def test_a_server_that_closes_without_answering() -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.close()

    server = await listen(serve)
    port = server.sockets[0].getsockname()[1]
    client = Client("t")
    with pytest.raises(Disconnected, match="server disconnected"):
        await client.fetch("GET", f"http://127.0.0.1:{port}/", b"", {}, T)
    await client.close()
    server.close()


async def test_a_connect_nobody_answers_times_out_and_leaves_nothing_behind(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A listener whose accept queue is full drops the SYN: the connect waits, then fails as a
    connect timeout within `connect_s`, nothing is logged when the listener goes away after it,
    and a connect refused then is told as refused."""
    full = socket.socket()
    full.bind(("127.0.0.1", 0))
    full.listen(0)
    port = full.getsockname()[1]
    held = []
    for _ in range(3):  # fill the queue (Linux takes backlog + 1), never accepted
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", port))
        held.append(s)
    client = Client("t")
    caplog.set_level(logging.DEBUG, logger="asyncio")
    start = time.monotonic()
    with pytest.raises(ConnectTimeout):
        await client.fetch("GET", f"http://127.0.0.1:{port}/", b"", {}, Timeouts(0.3, 1, 5))
    assert 0.25 < time.monotonic() - start < 2
    full.close()  # what was waited on is reset now
    await asyncio.sleep(0.1)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    with pytest.raises(ConnectFailed, match="connection refused"):
        await client.fetch("GET", f"http://127.0.0.1:{port}/", b"", {}, T)
    for s in held:
        s.close()
    await client.close()


async def test_a_response_never_released_gives_its_slot_back(raw: Callable[[Answer], Raw]) -> None:
    server = await started(raw(ok(b"x")))
    client = Client("t", limit=1)
    url = f"http://127.0.0.1:{server.port}/"
    resp = await client.request("GET", url, b"", {}, T)
    del resp  # dropped unread: the one connection allowed must come back
    _, body = await asyncio.wait_for(client.fetch("GET", url, b"", {}, T), 2)
    assert body == b"x"
    await client.close()


async def test_at_most_limit_exchanges_run_at_once_the_rest_wait_in_turn() -> None:
    """`limit` caps the exchanges under way; the others start in the order they came, one as
    each ends; a waiter whose deadline passes takes no slot with it."""
    running, most, order = 0, 0, []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal running, most
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                running += 1
                most = max(most, running)
                order.append(head.split(b" ")[1].decode())
                await asyncio.sleep(0.05)
                running -= 1
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx")
        except (asyncio.IncompleteReadError, ConnectionError):
            return  # the client closed its connection

    server = await listen(serve)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/"
    client = Client("t", limit=2)
    fetches = []
    for i in range(6):
        fetches.append(asyncio.create_task(client.fetch("GET", f"{url}{i}", b"", {}, T)))
        await asyncio.sleep(0)  # each waits before the next comes
    hurried = Timeouts(1.0, 1.0, 0.01)
    with pytest.raises(DeadlineExceeded):
        await client.fetch("GET", f"{url}late", b"", {}, hurried)
    answers = await asyncio.gather(*fetches)
    assert [body for _, body in answers] == [b"x"] * 6
    assert most == 2
    assert order == [f"/{i}" for i in range(6)]
    _, body = await asyncio.wait_for(client.fetch("GET", f"{url}after", b"", {}, T), 2)
    assert body == b"x"  # both slots came back
    assert most == 2
    await client.close()
    server.close()


async def held(release: asyncio.Event) -> str:
    """A server that answers each request once `release` is set; its URL."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                await reader.readuntil(b"\r\n\r\n")
                await release.wait()
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx")
        except (asyncio.IncompleteReadError, ConnectionError):
            return  # the client went

    server = await listen(serve)
    return f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/"


async def test_a_wait_for_a_free_connection_lasts_the_connect_timeout_at_most() -> None:
    """Issue 40, 6: every slot taken by answers that do not come, a request (a stream's, with
    no deadline of its own; a whole answer's, with one far off) fails as `PoolTimeout` once
    its connect timeout has passed, not at its deadline or never: the walk moves on."""
    release = asyncio.Event()
    url = await held(release)
    client = Client("t", limit=2)
    hogs = [asyncio.create_task(client.fetch("GET", url, b"", {}, T)) for _ in range(2)]
    await asyncio.sleep(0.1)  # both under way
    start = time.monotonic()
    with pytest.raises(PoolTimeout, match=r"no free connection within 300 ms \(all 2 "):
        await asyncio.wait_for(client.request("GET", url, b"", {}, Timeouts(0.3, 5.0)), 5)
    with pytest.raises(PoolTimeout):
        await asyncio.wait_for(client.fetch("GET", url, b"", {}, Timeouts(0.3, 5.0, 10.0)), 5)
    assert time.monotonic() - start < 3.0
    outcome = transport_failure(PoolTimeout("no free connection within 300 ms"), False)
    assert (outcome.reason, outcome.detail) == (Reason.TIMEOUT, "no free connection within 300 ms")
    with pytest.raises(DeadlineExceeded):  # the deadline first: the request's own timeout
        await client.fetch("GET", url, b"", {}, Timeouts(0.3, 5.0, 0.1))
    release.set()
    assert [body for _, body in await asyncio.gather(*hogs)] == [b"x", b"x"]
    _, body = await asyncio.wait_for(client.fetch("GET", url, b"", {}, T), 2)
    assert body == b"x"  # the slots came back, none lost to the waits that gave up
    await client.close()


async def test_one_origin_takes_at_most_its_share_of_the_connections() -> None:
    """Slow answers from one origin take its `per_origin` slots, not the client's: another
    origin's requests go at once, and the slow one's next waits (then gives up) alone."""
    slow_release, fast_release, stuck = asyncio.Event(), asyncio.Event(), asyncio.Event()
    slow, fast, other = await held(slow_release), await held(fast_release), await held(stuck)
    fast_release.set()
    client = Client("t", limit=3, per_origin=2)
    hogs = [asyncio.create_task(client.fetch("GET", slow, b"", {}, T)) for _ in range(2)]
    await asyncio.sleep(0.1)
    with pytest.raises(PoolTimeout, match=r"\(all 2 to this host in use\)"):
        await client.fetch("GET", slow, b"", {}, Timeouts(0.2, 5.0, 10.0))
    _, body = await asyncio.wait_for(client.fetch("GET", fast, b"", {}, T), 2)
    assert body == b"x"  # the third slot, with no wait
    waiting = asyncio.create_task(client.fetch("GET", other, b"", {}, T))
    await asyncio.sleep(0.1)  # all three in use now
    with pytest.raises(PoolTimeout, match=r"\(all 3 in use\)"):
        await client.fetch("GET", fast, b"", {}, Timeouts(0.2, 5.0, 10.0))
    slow_release.set()
    stuck.set()
    assert [body for _, body in await asyncio.gather(*hogs, waiting)] == [b"x"] * 3
    await client.close()


async def test_bytes_on_an_idle_connection_retire_it() -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx")
            await asyncio.sleep(0.05)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nstale")  # unasked, cut

    server = await listen(serve)
    port = server.sockets[0].getsockname()[1]
    client = Client("t")
    url = f"http://127.0.0.1:{port}/"
    for _ in range(2):
        _, body = await client.fetch("GET", url, b"", {}, T)
        assert body == b"x"  # never the stale answer
        await asyncio.sleep(0.1)
    await client.close()
    server.close()


async def test_read_timeout_runs_from_each_wait_and_the_deadline_from_the_start() -> None:
    """One timer per exchange: a body that trickles in (each piece within the read timeout,
    the whole well past it) is read on a pooled connection too, the deadline ends one that
    outlives it on time, and the next exchange is not cut by what that one left."""

    async def trickle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\n")
            for piece in (b"ab", b"cd", b"ef"):
                await asyncio.sleep(0.15)
                writer.write(piece)

    server = await listen(trickle)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/"
    client = Client("t")
    for _ in range(2):  # the second on the first's connection, its timer set anew
        _, raw = await client.fetch("GET", url, b"", {}, Timeouts(1, 0.25, 5))  # 0.45 s > 0.25
        assert raw == b"abcdef"
    started = time.monotonic()
    with pytest.raises(DeadlineExceeded):
        await client.fetch("GET", url, b"", {}, Timeouts(1, 0.25, 0.3))
    assert time.monotonic() - started >= 0.28  # not early; and before the whole answer (0.45 s)
    _, raw = await client.fetch("GET", url, b"", {}, Timeouts(1, 0.25, 5))  # a fresh timer
    assert raw == b"abcdef"
    await client.close()
    server.close()
