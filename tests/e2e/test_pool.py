"""One client key cannot take the upstream connections everyone needs (issue 40, item 6; protocol
§14), against `agent-reach serve` with small limits and two simulated providers' servers (two
origins): a key has at most `max_requests_per_key` requests under way (past it 429, in each
API's own error shape), one origin at most `max_upstream_per_origin` of the process's
`max_upstream_connections` exchanges, and a request that finds no connection free within its
provider's connect timeout moves on to the next provider as that one's `timeout`."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ..fakes.upstream import Upstream
from ..rawhttp import Reply, connect, exchange, request
from .test_hostile import Served
from .test_proxy import MSG, Proxy, base_config, start, stop

JSON = ("Content-Type", "application/json")
CHAT = json.dumps({"model": "m", "messages": MSG}).encode()
ANTHROPIC = json.dumps({"model": "m", "max_tokens": 10, "messages": MSG}).encode()
GEMINI = json.dumps({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}).encode()
KEYS = "k1,k2,k3"
PER_KEY, PER_ORIGIN, ALL = 2, 3, 4


@pytest.fixture(scope="module")
def other() -> Iterator[Upstream]:
    """A second simulated-provider server: another origin (another port)."""
    server = Upstream()
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def served(
    upstream: Upstream, other: Upstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    server = {
        "max_requests_per_key": PER_KEY,
        "max_upstream_per_origin": PER_ORIGIN,
        "max_upstream_connections": ALL,
    }
    config = base_config(upstream, server=server, deadline_ms=20000)
    for provider in config["providers"]:
        if provider["name"] == "hang":  # an exchange under way for as long as a test needs
            provider["timeout"] = {"connect": 300, "read": 20000}
    config["providers"].append(
        {"name": "elsewhere", "endpoint": other.url("backup"), "api_key_env": "PROVIDER_KEY"}
    )
    tmp = tmp_path_factory.mktemp("pool")
    proxy = start(config, tmp, upstream, env={"AGENT_REACH_API_KEYS": KEYS})
    yield Served(proxy, tmp / "proxy.log")
    assert stop(proxy) == 0
    assert "Traceback" not in (tmp / "proxy.log").read_text()


def chat(key: str, *order: str) -> bytes:
    """A chat request with client key `key` (none: ""), to the providers `order` names."""
    fallback = ("X-Agent-Reach-Fallback-Order", ",".join(order))
    return request("POST", "/v1/chat/completions", JSON, fallback, body=CHAT, key=key or None)


def answer(reply: Reply) -> str:
    assert reply.status == 200, reply.body
    content: str = reply.json()["choices"][0]["message"]["content"]
    return content


def until(check: Callable[[], bool], seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "not within the time allowed"
        time.sleep(0.02)


def hanging(proxy: Proxy, key: str, count: int) -> list[socket.socket]:
    """`count` requests of `key`'s to the `hang` provider, each under way at the provider."""
    before = len(proxy.upstream.bodies("hang"))
    socks = [connect(proxy.port) for _ in range(count)]
    for sock in socks:
        sock.sendall(chat(key, "hang"))
    until(lambda: len(proxy.upstream.bodies("hang")) >= before + count)
    return socks


def test_a_key_past_its_requests_under_way_gets_429_in_each_apis_shape(served: Served) -> None:
    proxy = served.proxy
    held = hanging(proxy, "k1", PER_KEY)
    try:
        refused = exchange(proxy.port, chat("k1", "ok"))
        assert refused.status == 429, refused.body
        assert refused.headers["retry-after"] == "1"
        error = refused.json()["error"]
        assert (error["type"], error["code"]) == ("rate_limit_error", "rate_limit_exceeded")
        assert "more than 2 requests at once" in error["message"]
        assert "(server.max_requests_per_key)" in error["message"]
        raw = request("POST", "/v1/messages", JSON, body=ANTHROPIC, key="k1")
        messages = exchange(proxy.port, raw)
        assert messages.status == 429
        assert messages.json()["type"] == "error"
        assert messages.json()["error"]["type"] == "rate_limit_error"
        raw = request("POST", "/v1beta/models/m:generateContent", JSON, body=GEMINI, key="k1")
        gemini = exchange(proxy.port, raw)
        assert gemini.status == 429
        assert gemini.json()["error"]["status"] == "RESOURCE_EXHAUSTED"
        # Another key is served meanwhile; so is the health check, which no key counts.
        assert answer(exchange(proxy.port, chat("k2", "ok"))) == "hello from ok"
        assert exchange(proxy.port, request("GET", "/healthz", key=None)).status == 200
    finally:
        for sock in held:
            sock.close()
    until(lambda: exchange(proxy.port, chat("k1", "ok")).status == 200)
    text = served.log.read_text()
    assert text.count("429 to client key ") == 1, text[-2000:]
    assert "2 requests under way (server.max_requests_per_key); refusing more" in text
    assert "3 requests refused over server.max_requests_per_key" in text
    assert "k1" not in text  # a key is never logged


def test_one_origin_cannot_take_every_upstream_connection(served: Served) -> None:
    """Two keys' slow requests fill the origin's share; another origin is served at once, and
    a request whose first provider is the full origin tries it for the connect timeout (a
    `timeout`) and moves on, not waiting to the deadline."""
    proxy = served.proxy
    held = hanging(proxy, "k1", PER_KEY) + hanging(proxy, "k2", PER_ORIGIN - PER_KEY)
    try:
        assert answer(exchange(proxy.port, chat("k3", "elsewhere"))) == "hello from backup"
        start = time.monotonic()
        moved = exchange(proxy.port, chat("k3", "hang", "elsewhere"))
        took = time.monotonic() - start
        assert answer(moved) == "hello from backup"
        trace = moved.headers["x-agent-reach-trace"].split(",")
        assert trace[0].startswith("hang:timeout:"), trace
        assert trace[1].startswith("elsewhere:ok:"), trace
        assert took < 10.0, took  # the deadline is 20 s
    finally:
        for sock in held:
            sock.close()
    until(lambda: "attempts=hang:timeout,elsewhere:ok" in served.log.read_text())


def test_with_client_auth_off_an_address_is_one_client(upstream: Upstream, tmp_path: Path) -> None:
    """No keys to tell clients apart: the cap counts per client address."""
    config = base_config(upstream, server={"max_requests_per_key": 1})
    for provider in config["providers"]:
        if provider["name"] == "hang":
            provider["timeout"] = {"connect": 300, "read": 20000}
    proxy = start(config, tmp_path, upstream)
    try:
        held = hanging(proxy, "", 1)
        try:
            refused = exchange(proxy.port, chat("", "ok"))
            assert refused.status == 429, refused.body
        finally:
            for sock in held:
                sock.close()
        until(lambda: exchange(proxy.port, chat("", "ok")).status == 200)
    finally:
        assert stop(proxy) == 0
    text = (tmp_path / "proxy.log").read_text()
    assert "429 to client 127.0.0.1: 1 requests under way" in text, text[-2000:]
    assert "client 127.0.0.1: 1 requests refused over server.max_requests_per_key" in text
