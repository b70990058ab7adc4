"""Client connection limits (protocol §14) with 2 s settings, against `agent-reach serve`: idle,
slowloris and trickled-body connections are closed within ~3 s, a streaming client that reads
nothing is dropped and its upstream cancelled, connections past `max_connections` get a 503
when every one has a request under way, and normal requests keep answering all the while."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..conftest import ERROR, assert_valid
from ..fakes.upstream import Upstream
from ..rawhttp import closed_within, connect, exchange, read_reply, request
from .test_proxy import MSG, Proxy, base_config, start, stop

LIMITS = {
    "max_body_bytes": 20000,
    "keepalive_timeout_s": 2,
    "request_timeout_s": 2,
    "client_write_timeout_s": 2,
    "max_connections": 40,
}
BODY = json.dumps({"messages": MSG}).encode()
JSON = ("Content-Type", "application/json")  # an API POST without keys must say it is JSON


@pytest.fixture(scope="module")
def proxy(upstream: Upstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    config = base_config(upstream, server=LIMITS)
    config["providers"].append({"name": "firehose", "endpoint": upstream.url("firehose")})
    # The `hang` scenario, waited for as long as a test needs: a request under way.
    waited = {"connect": 500, "read": 20000}
    config["providers"].append(
        {"name": "held", "endpoint": upstream.url("hang"), "timeout": waited}
    )
    p = start(config, tmp_path_factory.mktemp("timeouts"), upstream)
    yield p
    assert stop(p) == 0


class Steady:
    """Normal requests, one every 50 ms on keep-alive connections, while a test runs."""

    def __init__(self, proxy: Proxy) -> None:
        self.proxy = proxy
        self.latencies: list[float] = []
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)

    def __enter__(self) -> Steady:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        client = self.proxy.client()
        while not self._stop.wait(0.05):
            start = time.monotonic()
            try:
                answer = client.chat.completions.create(model="m", messages=MSG)
                assert answer.choices[0].message.content == "hello from ok"
            except Exception as exc:  # every failure is reported by the test
                self.failures.append(repr(exc))
            self.latencies.append(time.monotonic() - start)
        client.close()  # its connection does not count against a later test's cap


def assert_steady(steady: Steady) -> None:
    assert not steady.failures, steady.failures
    assert len(steady.latencies) >= 10
    # below request_timeout_s (2 s), which a steady client would wait were it held up
    assert max(steady.latencies) < 1.9, max(steady.latencies)


def test_idle_and_slowloris_connections_close_while_requests_answer(proxy: Proxy) -> None:
    with Steady(proxy) as steady:
        idle = [connect(proxy.port) for _ in range(5)]
        used = connect(proxy.port)  # a request, then idle keep-alive
        used.sendall(request("POST", "/v1/chat/completions", JSON, body=BODY, key=None))
        assert read_reply(used).status == 200
        loris = connect(proxy.port)
        head = request("GET", "/v1/models", key=None)
        sent = bytearray()

        def trickle() -> None:  # one byte every 100 ms: the head would take ~7 s
            for byte in head:
                try:
                    loris.sendall(bytes([byte]))
                except OSError:
                    return
                sent.append(byte)
                time.sleep(0.1)

        threading.Thread(target=trickle, daemon=True).start()
        for sock in [*idle, used]:
            closed = closed_within(sock, 4.0)
            assert closed is not None
            assert closed < 3.0
        reply = read_reply(loris)
        assert reply.status == 408
        assert_valid(ERROR, reply.json())
        assert "server.request_timeout_s" in reply.json()["error"]["message"]
        assert len(sent) < len(head)
        for sock in [*idle, used, loris]:
            sock.close()
    assert_steady(steady)


def test_a_trickled_body_is_408_within_the_request_timeout(proxy: Proxy) -> None:
    with Steady(proxy) as steady, connect(proxy.port) as sock:
        head = request(
            "POST", "/v1/chat/completions", JSON, ("Content-Length", str(len(BODY))), key=None
        )
        started = time.monotonic()
        sock.sendall(head)
        for byte in BODY[:20]:  # one byte every 100 ms
            sock.sendall(bytes([byte]))
            time.sleep(0.1)
        reply = read_reply(sock)
        elapsed = time.monotonic() - started
    assert reply.status == 408
    assert_valid(ERROR, reply.json())
    assert 1.9 < elapsed < 10, elapsed  # request_timeout_s (2 s): never early
    assert_steady(steady)


def test_a_client_that_reads_nothing_is_dropped_and_its_upstream_cancelled(
    proxy: Proxy, tmp_path: Path
) -> None:
    proxy.upstream.clear()
    body = json.dumps({"messages": MSG, "stream": True}).encode()
    raw = request(
        "POST",
        "/v1/chat/completions",
        JSON,
        ("X-Agent-Reach-Route", "firehose"),
        body=body,
        key=None,
    )
    with Steady(proxy) as steady, connect(proxy.port) as sock:
        sock.sendall(raw)  # and never read
        deadline = time.monotonic() + 15
        while "firehose" not in proxy.upstream.cancelled and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proxy.upstream.cancelled == ["firehose"]
        written = proxy.upstream.firehose_bytes
        time.sleep(0.5)
        assert proxy.upstream.firehose_bytes == written  # nothing more is produced
    assert_steady(steady)


def test_connections_past_the_cap_get_a_503(proxy: Proxy) -> None:
    """With a request under way on every connection (idle ones would be closed for new ones,
    tests/e2e/test_descriptors.py)."""
    cap = LIMITS["max_connections"]
    before = len(proxy.upstream.bodies("hang"))
    held = [connect(proxy.port) for _ in range(cap)]
    try:
        order = ("X-Agent-Reach-Fallback-Order", "held")
        for sock in held:
            sock.sendall(request("POST", "/v1/chat/completions", JSON, order, body=BODY, key=None))
        deadline = time.monotonic() + 10
        while len(proxy.upstream.bodies("hang")) < before + cap and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(proxy.upstream.bodies("hang")) == before + cap
        reply = exchange(proxy.port, request("GET", "/v1/models", key=None))
        assert reply.status == 503
        assert_valid(ERROR, reply.json())
        assert "server.max_connections" in reply.json()["error"]["message"]
        reply = exchange(proxy.port, request("POST", "/v1/messages", body=b"{}", key=None))
        assert reply.status == 503
        assert reply.json()["type"] == "error"  # the path's API shape
        with connect(proxy.port) as silent:  # says nothing: answered within a second anyway
            started = time.monotonic()
            assert read_reply(silent).status == 503
            took = time.monotonic() - started
            assert 0.9 < took < 1.9, took  # its second, not request_timeout_s (2 s)
    finally:
        for sock in held:
            sock.close()
    time.sleep(0.2)
    assert exchange(proxy.port, request("GET", "/v1/models", key=None)).status == 200
