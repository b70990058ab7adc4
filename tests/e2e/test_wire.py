"""The proxy's own HTTP/1.1 server (issue 23, item 1) where clients differ: an HTTP/1.0 client
gets a stream unchunked and the connection closed after it, HEAD answers a GET route's head
alone and keeps the connection, and `Connection: close` is honoured."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import pytest

from ..fakes.upstream import Upstream, proxy_config
from ..rawhttp import closed_within, connect, read_reply, request
from .test_proxy import Proxy, start, stop

JSON = ("Content-Type", "application/json")


@pytest.fixture(scope="module")
def served(upstream: Upstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    config = proxy_config([upstream.provider("ok")])
    proxy = start(config, tmp_path_factory.mktemp("wire"), upstream)
    yield proxy
    stop(proxy)


def chat(stream: bool) -> bytes:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": stream}
    return request("POST", "/v1/chat/completions", JSON, body=json.dumps(body).encode(), key=None)


def test_an_http10_client_gets_its_stream_unchunked_then_the_connection_closes(
    served: Proxy,
) -> None:
    with connect(served.port) as sock:
        sock.sendall(chat(stream=True).replace(b"HTTP/1.1", b"HTTP/1.0", 1))
        reply = read_reply(sock)  # framed by the close: there is no length
        assert reply.head.startswith(b"HTTP/1.0 200 "), reply.head
        assert "transfer-encoding" not in reply.headers
        assert reply.body.endswith(b"data: [DONE]\n\n"), reply.body[-200:]
        assert closed_within(sock, 2.0) is not None


def test_head_answers_a_get_routes_head_and_keeps_the_connection(served: Proxy) -> None:
    with connect(served.port) as sock:
        buffer = bytearray()
        sock.sendall(request("GET", "/v1/models", key=None))
        got = read_reply(sock, buffer)
        sock.sendall(request("HEAD", "/v1/models", key=None) + request("GET", "/healthz", key=None))
        head = read_reply_head(sock, buffer)
        assert head.startswith(b"HTTP/1.1 200 ")
        assert f"Content-Length: {len(got.body)}".encode() in head
        after = read_reply(sock, buffer)  # the next answer follows the head at once
        assert after.status == 200
        assert after.json() == {"status": "ok"}


def read_reply_head(sock: socket.socket, buffer: bytearray) -> bytes:
    """The head of an answer that has no body (HEAD's), leaving what follows in `buffer`."""
    while b"\r\n\r\n" not in buffer:
        data = sock.recv(65536)
        assert data, bytes(buffer)
        buffer += data
    head, _, rest = bytes(buffer).partition(b"\r\n\r\n")
    buffer[:] = rest
    return head


def test_connection_close_is_honoured(served: Proxy) -> None:
    with connect(served.port) as sock:
        sock.sendall(chat(stream=False).replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n", 1))
        reply = read_reply(sock)
        assert reply.status == 200
        assert reply.headers["connection"] == "close"
        assert closed_within(sock, 2.0) is not None


def test_a_request_pipelined_before_a_malformed_one_is_answered_first(served: Proxy) -> None:
    with connect(served.port) as sock:
        buffer = bytearray()
        bad = b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n"
        sock.sendall(request("GET", "/healthz", key=None) + bad)
        first = read_reply(sock, buffer)
        assert first.status == 200
        assert first.json() == {"status": "ok"}
        second = read_reply(sock, buffer)
        assert second.status == 400
        assert second.json()["type"] == "error"  # Anthropic's shape: its path is /v1/messages
        assert "malformed HTTP request" in second.json()["error"]["message"]


def test_an_absolute_form_target_reaches_its_path(served: Proxy) -> None:
    with connect(served.port) as sock:
        sock.sendall(b"GET http://127.0.0.1/healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        reply = read_reply(sock)
        assert reply.status == 200
        assert reply.json() == {"status": "ok"}
