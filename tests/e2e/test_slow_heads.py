"""Heads sent a byte at a time keep no one out (issue 47, Medium 2; protocol §14), against
`agent-reach serve` under `ulimit -n 1024` (480 connections): one address may have at most
`server.max_pending_heads_per_ip` heads unfinished (the rest 429 at once), and at the cap a new
client closes the connection whose head began first, once it has had a second, so that 600
keyless connections trickling unfinished heads, from one address or from twenty, cannot keep a
new client's request from being answered."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..fakes.upstream import Upstream
from ..rawhttp import connect, exchange, read_reply, request
from .test_proxy import Proxy, base_config, start, stop

NOFILE = 1024
CAP = (NOFILE - 64) // 2
SLOW = b"POST /v1/chat/completions HTTP/1.1\r\n"  # and then a byte every few seconds
ATTACKERS = 600


def served(upstream: Upstream, tmp: Path, **server: object) -> Proxy:
    config = base_config(upstream, server=server)
    return start(config, tmp, upstream, prefix=("prlimit", f"--nofile={NOFILE}:{NOFILE}", "--"))


@pytest.fixture
def proxy(upstream: Upstream, tmp_path: Path) -> Iterator[Proxy]:
    p = served(upstream, tmp_path)
    yield p
    assert stop(p) == 0


def slow(port: int, source: str) -> socket.socket:
    sock = connect(port, timeout=5.0, source=source)
    sock.sendall(SLOW)
    return sock


def answered(port: int) -> int:
    return exchange(port, request("GET", "/v1/models", key=None)).status


def test_one_address_has_at_most_its_share_of_unfinished_heads(
    proxy: Proxy, tmp_path: Path
) -> None:
    socks = [slow(proxy.port, "127.0.0.2") for _ in range(ATTACKERS)]
    try:
        time.sleep(0.5)
        refused = []
        for sock in socks[32:]:  # past the 32 of the default: 429 at once, and closed
            reply = read_reply(sock)
            refused.append(reply.status)
            assert "server.max_pending_heads_per_ip" in reply.json()["error"]["message"]
        assert refused == [429] * (ATTACKERS - 32)
        for _ in range(5):
            assert answered(proxy.port) == 200
            socks[0].sendall(b"H")  # the first 32 trickle on, still counted
    finally:
        for sock in socks:
            sock.close()
    text = (tmp_path / "proxy.log").read_text()
    assert text.count("refusing request heads past 32 unfinished from one address") == 1, text
    assert "refusing new connections" not in text
    assert len(text.splitlines()) < 20, text[-2000:]


def test_heads_unfinished_past_a_second_make_room_at_the_cap(
    upstream: Upstream, tmp_path: Path
) -> None:
    """Twenty addresses, thirty each: under every address's share, and more than the cap."""
    proxy = served(upstream, tmp_path)
    addresses = [f"127.0.0.{i}" for i in range(2, 22)]
    socks = [slow(proxy.port, a) for a in addresses for _ in range(ATTACKERS // 20)]
    try:
        for _ in range(5):
            time.sleep(1.1)  # the oldest heads are past their second
            start_s = time.monotonic()
            assert answered(proxy.port) == 200
            assert time.monotonic() - start_s < 5
            for i, sock in enumerate(socks):  # the attacker opens again what was closed
                try:
                    sock.sendall(b"H")
                except OSError:
                    sock.close()
                    socks[i] = slow(proxy.port, addresses[i % 20])
    finally:
        for sock in socks:
            sock.close()
        assert stop(proxy) == 0
    text = (tmp_path / "proxy.log").read_text()
    assert f"unfinished after 1 s for new ones: {CAP} open" in text, text[-2000:]
