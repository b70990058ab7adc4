"""The data path under the loads issue 23 names, through `agent-reach serve` on real sockets:
10,000 requests on one keep-alive connection, 500 pipelined, and a client that leaves a stream
mid-way cancelling the upstream at once."""

from __future__ import annotations

import json
import socket
import struct
import time
from collections.abc import Iterator

import pytest

from ..fakes.upstream import Upstream, proxy_config
from ..rawhttp import connect, read_reply, request
from .test_proxy import Proxy, start, stop

BODY = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
CHAT = request("POST", "/v1/chat/completions", ("Content-Type", "application/json"), body=BODY)


@pytest.fixture(scope="module")
def served(upstream: Upstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    config = proxy_config(
        [upstream.provider("ok"), upstream.provider("cutstall")], fallback_order=["ok"]
    )
    proxy = start(config, tmp_path_factory.mktemp("data-path"), upstream)
    yield proxy
    stop(proxy)


def test_ten_thousand_requests_on_one_keep_alive_connection(served: Proxy) -> None:
    served.upstream.clear()
    statuses: dict[int, int] = {}
    with connect(served.port) as sock:
        buffer = bytearray()
        for _ in range(10_000):
            sock.sendall(CHAT)
            reply = read_reply(sock, buffer)
            statuses[reply.status] = statuses.get(reply.status, 0) + 1
            assert reply.json()["choices"][0]["message"]["content"]
            assert reply.headers.get("connection", "").lower() != "close"
    assert statuses == {200: 10_000}
    assert len(served.upstream.bodies("ok")) == 10_000


def test_five_hundred_pipelined_requests(served: Proxy) -> None:
    served.upstream.clear()
    with connect(served.port) as sock:
        sock.sendall(CHAT * 500)
        buffer = bytearray()
        replies = [read_reply(sock, buffer) for _ in range(500)]
    assert [r.status for r in replies] == [200] * 500
    assert all(r.json()["object"] == "chat.completion" for r in replies)
    assert len(served.upstream.bodies("ok")) == 500


@pytest.mark.parametrize("reset", [False, True], ids=["closed", "reset"])
def test_a_client_leaving_mid_stream_cancels_the_upstream_within_100_ms(
    served: Proxy, reset: bool
) -> None:
    """The `cutstall` provider sends its first words and then waits 30 s; the client reads the
    first chunk and closes its socket (a FIN, or a reset). Measured three times: the best of
    them within 100 ms (one slow round on a loaded machine is not the data path's doing)."""
    stream = json.dumps({"model": "m", "stream": True, "messages": [{"role": "user"}]})
    raw = request(
        "POST",
        "/v1/chat/completions",
        ("Content-Type", "application/json"),
        ("X-Agent-Reach-Fallback-Order", "cutstall"),
        body=stream.replace('"user"}', '"user", "content": "hi"}').encode(),
    )
    delays = []
    for _ in range(3):
        served.upstream.clear()
        sock = connect(served.port)
        sock.sendall(raw)
        got = b""
        while b"data: " not in got:
            got += sock.recv(65536)
        if reset:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        left = time.monotonic()
        sock.close()
        deadline = left + 2
        while "cutstall" not in served.upstream.cancelled_at and time.monotonic() < deadline:
            time.sleep(0.001)
        assert "cutstall" in served.upstream.cancelled_at, "the upstream was never cancelled"
        delays.append(served.upstream.cancelled_at["cutstall"] - left)
    print(f"cancel delays: {[round(d * 1000, 1) for d in delays]} ms")
    assert min(delays) <= 0.1, delays
