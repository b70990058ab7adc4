"""The HTTP/1.1 server hands a connection to a WebSocket route (issue 34, 6): an echo route on
a real server on 127.0.0.1, driven by a real client (`websockets`), and raw sockets for what a
client library will not send. No API uses it yet."""

from __future__ import annotations

import asyncio
import base64
import os
import socket
import time
from collections.abc import AsyncIterator

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus
from wsproto.connection import Connection, ConnectionType
from wsproto.events import CloseConnection, Ping, TextMessage
from wsproto.utilities import generate_accept_token

from agent_reach.config import ServerConfig
from agent_reach.server.guard import Guard
from agent_reach.server.http11.connection import Server
from agent_reach.server.http11.websocket import WebSocket, route
from agent_reach.server.http11.wire import App, Request, Response


async def echo(ws: WebSocket, request: Request) -> None:
    """Each message back as it came, until the client closes."""
    while (message := await ws.receive()) is not None:
        await ws.send(message)


async def busy(ws: WebSocket, request: Request) -> None:
    """`echo`, always busy answering (as a turn under way is): a drain waits for it."""
    ws.busy = True
    await echo(ws, request)


async def plain(request: Request) -> Response:
    return Response(body=b'{"ok":true}', content_type="application/json")


async def served(**limits: float) -> tuple[Server, str]:
    config = ServerConfig(max_body_bytes=1000, websocket_max_message_bytes=1000, **limits)
    guard = Guard(frozenset(), config, None)
    app = App(guard.middleware)
    app.add("GET", "/echo", route(echo))
    app.add("GET", "/busy", route(busy))
    app.add("GET", "/plain", plain)
    server = Server(
        app, limits=config, screen=guard.expect, access=None, error_body=lambda *_: b"{}"
    )
    await server.start("127.0.0.1", 0)
    host, port = server.addresses[0]
    return server, f"ws://{host}:{port}"


@pytest.fixture
async def echo_url() -> AsyncIterator[str]:
    server, url = await served()
    yield url
    await server.close(1.0)


async def test_a_real_client_talks_to_a_websocket_route(echo_url: str) -> None:
    async with connect(f"{echo_url}/echo") as ws:
        await ws.send("hello")
        assert await ws.recv() == "hello"
        await ws.send(b"\x00\x01bytes")
        assert await ws.recv() == b"\x00\x01bytes"
        await ws.send(["frag", "mented"])  # one message in two frames
        assert await ws.recv() == "fragmented"
        pong = await ws.ping()
        await asyncio.wait_for(pong, 5)  # pings are answered
    assert ws.close_code == 1000


async def test_a_websocket_holds_its_clients_slot_until_it_closes() -> None:
    """Issue 47: a socket is a request under way for `max_requests_per_key` (here per address,
    with client auth off) for as long as it is open, not only while it is upgraded."""
    server, url = await served(max_requests_per_key=2)
    port = int(url.rsplit(":", 1)[1])

    def plain_status() -> bytes:
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        sock.sendall(b"GET /plain HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        reply = sock.recv(65536)
        sock.close()
        return reply.split(b"\r\n", 1)[0]

    try:
        async with connect(f"{url}/echo") as one, connect(f"{url}/echo") as two:
            for ws in (one, two):
                await ws.send("still open")
                assert await ws.recv() == "still open"
            assert await asyncio.to_thread(plain_status) == b"HTTP/1.1 429 Too Many Requests"
            with pytest.raises(InvalidStatus):
                async with connect(f"{url}/echo"):
                    pass
        await asyncio.sleep(0.1)  # both closed: their slots are free
        assert await asyncio.to_thread(plain_status) == b"HTTP/1.1 200 OK"
    finally:
        await server.close(1.0)


async def test_a_message_over_the_limit_is_closed_1009(echo_url: str) -> None:
    async with connect(f"{echo_url}/echo") as ws:
        await ws.send("x" * 1001)  # websocket_max_message_bytes is 1000
        with pytest.raises(ConnectionClosed):
            await ws.recv()
    assert ws.close_code == 1009


@pytest.mark.parametrize(
    ("limits", "busy"), [({"websocket_idle_s": 0.3}, False), ({"websocket_max_s": 0.6}, True)]
)
async def test_a_silent_or_old_websocket_is_closed_1001(
    limits: dict[str, float], busy: bool
) -> None:
    """Idle: nothing for `websocket_idle_s`. Old: open `websocket_max_s`, however busy."""
    server, url = await served(**limits)
    try:
        async with connect(f"{url}/echo", ping_interval=None) as ws:
            start = time.monotonic()
            with pytest.raises(ConnectionClosed):
                while time.monotonic() - start < 10:
                    if busy:
                        await ws.send("still here")
                        await ws.recv()
                        await asyncio.sleep(0.05)
                    else:
                        await ws.recv()
        assert ws.close_code == 1001
        assert time.monotonic() - start < 5
        assert not server.connections  # and the connection is gone
    finally:
        await server.close(1.0)


def handshake(port: int, *headers: str, extra: bytes = b"") -> tuple[socket.socket, bytes]:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    lines = ["GET /echo HTTP/1.1", "Host: 127.0.0.1", *headers]
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + extra)
    reply = b""
    while b"\r\n\r\n" not in reply:
        data = sock.recv(65536)
        if not data:
            break
        reply += data
    return sock, reply


UPGRADE = ("Upgrade: websocket", "Connection: Upgrade", "Sec-WebSocket-Version: 13")


async def test_the_handshake_is_checked_and_answered_in_the_apis_shape(echo_url: str) -> None:
    port = int(echo_url.rsplit(":", 1)[1])
    key = base64.b64encode(os.urandom(16)).decode()

    def exchange(*headers: str) -> bytes:
        sock, reply = handshake(port, *headers)
        sock.close()
        return reply

    no_upgrade = await asyncio.to_thread(exchange)
    assert no_upgrade.startswith(b"HTTP/1.1 426 ")
    assert b"this path speaks WebSocket" in no_upgrade
    old_version = await asyncio.to_thread(
        exchange,
        "Upgrade: websocket",
        "Connection: Upgrade",
        "Sec-WebSocket-Version: 8",
        f"Sec-WebSocket-Key: {key}",
    )
    assert old_version.startswith(b"HTTP/1.1 400 ")
    bad_key = await asyncio.to_thread(exchange, *UPGRADE, "Sec-WebSocket-Key: short")
    assert bad_key.startswith(b"HTTP/1.1 400 ")
    good = await asyncio.to_thread(exchange, *UPGRADE, f"Sec-WebSocket-Key: {key}")
    assert good.startswith(b"HTTP/1.1 101 Switching Protocols\r\n")
    assert f"Sec-WebSocket-Accept: {generate_accept_token(key.encode()).decode()}".encode() in good


async def test_a_frame_sent_with_the_handshake_is_read(echo_url: str) -> None:
    """The bytes after the head, in the same packet, are the WebSocket's first frame."""
    port = int(echo_url.rsplit(":", 1)[1])
    key = base64.b64encode(os.urandom(16)).decode()
    client = Connection(ConnectionType.CLIENT)
    frame = client.send(TextMessage("with the handshake"))

    def exchange() -> bytes:
        sock, reply = handshake(port, *UPGRADE, f"Sec-WebSocket-Key: {key}", extra=frame)
        rest = reply.partition(b"\r\n\r\n")[2]
        while b"with the handshake" not in rest:
            data = sock.recv(65536)
            if not data:
                break
            rest += data
        sock.close()
        return rest

    rest = await asyncio.to_thread(exchange)
    client.receive_data(rest)
    assert [e.data for e in client.events() if isinstance(e, TextMessage)] == ["with the handshake"]


def flooded(port: int, frames: bytes, count: int, rcvbuf: int | None = None) -> int | None:
    """Open a WebSocket with raw frames, send `frames` `count` times without reading (with a
    small receive buffer when `rcvbuf` is given), then read: the close code the server sent."""
    key = base64.b64encode(os.urandom(16)).decode()
    sock = socket.socket()
    if rcvbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(10)
    sock.connect(("127.0.0.1", port))
    lines = ["GET /echo HTTP/1.1", "Host: 127.0.0.1", *UPGRADE, f"Sec-WebSocket-Key: {key}"]
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(1)
    assert head.startswith(b"HTTP/1.1 101 ")
    sock.settimeout(1)
    try:
        for _ in range(count):
            sock.sendall(frames)
    except (BrokenPipeError, ConnectionResetError, TimeoutError):
        pass  # closed, or no longer read, while we were still sending
    sock.settimeout(10)
    reader = Connection(ConnectionType.CLIENT)
    while True:
        try:
            data = sock.recv(65536)
        except ConnectionResetError:
            break
        if not data:
            break
        reader.receive_data(data)
        for event in reader.events():
            if isinstance(event, CloseConnection):
                sock.close()
                return event.code
    sock.close()
    return None


async def test_a_flood_of_empty_fragments_is_closed_1009(echo_url: str) -> None:
    """Issue 47: each frame counts toward the message's size, so that a message of endless
    empty fragments is as bounded as a long one."""
    port = int(echo_url.rsplit(":", 1)[1])
    writer = Connection(ConnectionType.CLIENT)
    first = writer.send(TextMessage("", message_finished=False))
    more = writer.send(TextMessage("", message_finished=False))
    code = await asyncio.to_thread(flooded, port, first + more * 10_000, 1)
    assert code == 1009


async def test_pings_whose_pongs_are_not_read_are_closed() -> None:
    """Issue 47: a client that pings and reads nothing cannot make the server hold its pongs
    without bound: past what one message may be and 64 KB unread, the socket is closed 1008
    (which such a client does not read either: the connection is gone, long before
    `client_write_timeout_s`)."""
    server, url = await served(client_write_timeout_s=60)
    try:
        port = int(url.rsplit(":", 1)[1])
        ping = Connection(ConnectionType.CLIENT).send(Ping(b"x" * 125))
        flood = asyncio.create_task(asyncio.to_thread(flooded, port, ping * 1000, 40, 4096))
        deadline = time.monotonic() + 8
        while not server.connections and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert server.connections  # the socket is open
        while server.connections and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert not server.connections  # and closed by the server
        await flood
    finally:
        await server.close(1.0)


async def test_a_route_that_takes_no_websocket_answers_an_upgrade_and_closes(
    echo_url: str,
) -> None:
    port = int(echo_url.rsplit(":", 1)[1])

    def exchange() -> tuple[bytes, bytes]:
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        sock.sendall(
            b"GET /plain HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
            b"Connection: Upgrade\r\n\r\n"
        )
        reply = b""
        while True:
            data = sock.recv(65536)
            if not data:
                break
            reply += data
        sock.close()
        return reply, reply.partition(b"\r\n\r\n")[2]

    reply, body = await asyncio.to_thread(exchange)
    assert reply.startswith(b"HTTP/1.1 200 ")
    assert body == b'{"ok":true}'  # and then the connection closed


async def test_an_idle_websocket_holds_no_drain() -> None:
    """At the server's close, a socket whose session is not busy is closed 1001 at once."""
    server, url = await served()
    async with connect(f"{url}/echo") as ws:
        await ws.send("hello")
        assert await ws.recv() == "hello"
        began = time.monotonic()
        closed = await server.close(30)
        with pytest.raises(ConnectionClosed):
            await ws.recv()
    assert time.monotonic() - began < 5
    assert (ws.close_code, ws.close_reason) == (1001, "the server is shutting down")
    assert closed.ended == 0


async def test_a_busy_websocket_open_at_the_shutdown_timeout_is_closed_1001() -> None:
    server, url = await served()
    async with connect(f"{url}/busy") as ws:
        await ws.send("hello")
        assert await ws.recv() == "hello"
        closed = await server.close(0.2)  # the session outlasts it
        with pytest.raises(ConnectionClosed):
            await ws.recv()
    assert (ws.close_code, ws.close_reason) == (1001, "the server is shutting down")
    assert closed.ended == 1
