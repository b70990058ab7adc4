"""File descriptors (protocol §14) against `agent-reach serve` under a low `ulimit -n`: the soft
limit is raised to the hard one, `max_connections` is clamped below it (and the start says so),
connections past the cap are refused with one log line per episode, silent connections are
closed after `first_byte_timeout_s`, and requests on a client's open connection keep answering
while anyone holds every connection it may open."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..rawhttp import closed_within, connect, exchange, read_reply, request
from ..upstream import Upstream
from .test_proxy import MSG, Proxy, base_config, start, stop

SOFT, HARD = 256, 400
CAP = (HARD - 64) // 2  # one upstream socket per connection, 64 for files


@pytest.fixture
def proxy(upstream: Upstream, tmp_path: Path) -> Iterator[Proxy]:
    config = base_config(upstream, server={"first_byte_timeout_s": 2})
    p = start(config, tmp_path, upstream, prefix=("prlimit", f"--nofile={SOFT}:{HARD}", "--"))
    yield p
    assert stop(p) == 0


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def soft_limit(pid: int) -> int:
    line = next(
        x for x in Path(f"/proc/{pid}/limits").read_text().splitlines() if "open files" in x
    )
    return int(line.split()[3])


def test_idle_sockets_past_the_descriptor_limit_stop_no_one(proxy: Proxy, tmp_path: Path) -> None:
    log = tmp_path / "proxy.log"
    assert soft_limit(proxy.proc.pid) == HARD
    assert f"server.max_connections 10000 lowered to {CAP}" in log.read_text()
    client = proxy.client()
    ask = lambda: client.chat.completions.create(model="m", messages=MSG)  # noqa: E731
    assert ask().choices[0].message.content == "hello from ok"  # its connection is open now

    idle = [connect(proxy.port) for _ in range(HARD + 100)]  # more than the process may open
    try:
        for _ in range(5):
            assert ask().choices[0].message.content == "hello from ok"
            assert fds(proxy.proc.pid) < HARD
        refused = exchange(proxy.port, request("GET", "/v1/models", key=None))
        assert refused.status == 503
        assert "server.max_connections" in refused.json()["error"]["message"]
        # The cap's connections said nothing: closed after first_byte_timeout_s.
        assert all(closed_within(s, 4.0) is not None for s in idle[:CAP])
    finally:
        for sock in idle:
            sock.close()
    time.sleep(1.2)  # the episode of refusals is over
    assert exchange(proxy.port, request("GET", "/v1/models", key=None)).status == 200
    text = log.read_text()
    assert text.count("refusing new connections") == 1, text[-2000:]
    assert text.count("accepting connections again") == 1
    assert "Too many open files" not in text
    assert len(text.splitlines()) < 20, text[-2000:]


def test_a_silent_connection_is_closed_after_the_first_byte_timeout(proxy: Proxy) -> None:
    with connect(proxy.port) as silent, connect(proxy.port) as talking:
        talking.sendall(b"GET /v1/models HTTP/1.1\r\n")  # its first byte in time: not closed
        closed = closed_within(silent, 4.0)
        assert closed is not None
        assert 1.8 < closed < 3.0, closed
        talking.sendall(b"Host: 127.0.0.1\r\n\r\n")
        assert read_reply(talking).status == 200
