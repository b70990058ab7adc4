"""File descriptors (protocol §14) against `agent-reach serve` under a low `ulimit -n`: the soft
limit is raised to the hard one, `max_connections` is clamped below it (and the start says so),
at the cap a new connection closes the one idle the longest and is refused only when every one
has a request under way (one log line per episode of either), silent connections are closed
after `first_byte_timeout_s`, and clients keep being answered, on their open connections and
on new ones, while anyone holds every connection it may open with silent ones."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..fakes.upstream import Upstream
from ..rawhttp import closed_within, connect, exchange, read_reply, request
from .test_proxy import MSG, Proxy, base_config, start, stop

SOFT, HARD = 256, 400
JSON = ("Content-Type", "application/json")
HANG = ("X-Agent-Reach-Fallback-Order", "hang")
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
    """Issue 40, 3: silent sockets hold every connection the proxy may open, and new clients
    are still served: each new connection closes the one idle the longest (a silent socket, or
    a client's keep-alive connection, which its client opens again), with one log line for the
    episode; none is refused, and the proxy never runs out of descriptors."""
    log = tmp_path / "proxy.log"
    assert soft_limit(proxy.proc.pid) == HARD
    assert f"server.max_connections 10000 lowered to {CAP}" in log.read_text()
    client = proxy.client()
    ask = lambda: client.chat.completions.create(model="m", messages=MSG)  # noqa: E731
    assert ask().choices[0].message.content == "hello from ok"  # its connection is open now

    idle = [connect(proxy.port) for _ in range(HARD + 100)]  # more than the process may open
    try:
        for _ in range(5):
            # A new client, accepted after every silent socket: it finds the cap full of them.
            fresh = exchange(proxy.port, request("GET", "/v1/models", key=None))
            assert fresh.status == 200, fresh.body
            assert ask().choices[0].message.content == "hello from ok"
            assert fds(proxy.proc.pid) < HARD
        # Silent all along: closed for new ones, or after first_byte_timeout_s.
        assert all(closed_within(s, 4.0) is not None for s in idle)
    finally:
        for sock in idle:
            sock.close()
    time.sleep(1.2)  # the episode is over
    assert exchange(proxy.port, request("GET", "/v1/models", key=None)).status == 200
    text = log.read_text()
    assert text.count("closing idle connections for new ones") == 1, text[-2000:]
    assert text.count("idle connections for new ones") == 2  # and the line that ends it
    assert "refusing new connections" not in text
    assert "Too many open files" not in text
    assert len(text.splitlines()) < 20, text[-2000:]


def test_new_connections_are_refused_when_every_one_has_a_request(
    upstream: Upstream, tmp_path: Path
) -> None:
    """At the cap with a request under way on every connection, nothing is idle to close: a
    new connection is 503 (one log line when refusing starts, one when it ends)."""
    config = base_config(upstream, server={"max_connections": 4})
    for provider in config["providers"]:
        if provider["name"] == "hang":  # a request under way for as long as the test needs
            provider["timeout"] = {"connect": 500, "read": 20000}
    proxy = start(config, tmp_path, upstream)
    body = json.dumps({"model": "m", "messages": MSG}).encode()
    hang = request("POST", "/v1/chat/completions", JSON, HANG, body=body, key=None)
    before = len(upstream.bodies("hang"))
    busy = [connect(proxy.port) for _ in range(4)]
    try:
        for sock in busy:
            sock.sendall(hang)
        deadline = time.monotonic() + 10
        while len(upstream.bodies("hang")) < before + 4 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(upstream.bodies("hang")) == before + 4  # every connection has a request
        refused = exchange(proxy.port, request("GET", "/v1/models", key=None))
        assert refused.status == 503
        assert "server.max_connections" in refused.json()["error"]["message"]
        for sock in busy:
            sock.close()
        time.sleep(1.2)  # the closed ones are gone, and the episode of refusals is over
        assert exchange(proxy.port, request("GET", "/v1/models", key=None)).status == 200
    finally:
        for sock in busy:
            sock.close()
        assert stop(proxy) == 0
    text = (tmp_path / "proxy.log").read_text()
    assert text.count("refusing new connections (503): 4 open") == 1, text[-2000:]
    assert text.count("accepting connections again after refusing 1") == 1, text[-2000:]


def test_a_silent_connection_is_closed_after_the_first_byte_timeout(proxy: Proxy) -> None:
    with connect(proxy.port) as silent, connect(proxy.port) as talking:
        talking.sendall(b"GET /v1/models HTTP/1.1\r\n")  # its first byte in time: not closed
        closed = closed_within(silent, 10.0)
        assert closed is not None  # first_byte_timeout_s (2 s), not keepalive_timeout_s (75 s)
        assert closed > 1.8, closed
        talking.sendall(b"Host: 127.0.0.1\r\n\r\n")
        assert read_reply(talking).status == 200
