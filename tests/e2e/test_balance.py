"""`balance: weighted` through `agent-reach serve`: two providers of weights 3 and 1 share 4,000
requests 75/25 (±3 points); with the heavier one refusing connections, every request is
answered by the other (failover is unchanged: the order drawn is the walk's); once it is back,
it has its share again within one health TTL. `balance: latency`: the fast one takes nearly
everything, and a few slow requests of one client do not move the others'."""

from __future__ import annotations

import http.client
import json
import time
from collections import Counter
from pathlib import Path

from aiohttp import web

from ..fakes.serving import Threaded
from ..fakes.shapes import completion
from ..fakes.upstream import LONG_ANSWER, Upstream, proxy_config, refused_url
from .test_proxy import start, stop

N = 4000
BODY = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})


def answered_by(port: int, n: int, body: str = BODY) -> Counter[str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    got: Counter[str] = Counter()
    try:
        for _ in range(n):
            headers = {"Content-Type": "application/json"}
            conn.request("POST", "/v1/chat/completions", body, headers)
            resp = conn.getresponse()
            resp.read()
            assert resp.status == 200
            got[resp.getheader("x-agent-reach-provider") or "-"] += 1
    finally:
        conn.close()
    return got


def provider(name: str, url: str, weight: float) -> dict[str, object]:
    return {"name": name, "endpoint": url, "api_key_env": "", "fallback_weight": weight}


def test_weights_3_and_1_share_the_traffic(upstream: Upstream, tmp_path: Path) -> None:
    url = upstream.url("ok")
    config = proxy_config(
        [provider("heavy", url, 3), provider("light", url, 1)], balance="weighted"
    )
    proxy = start(config, tmp_path, upstream)
    try:
        got = answered_by(proxy.port, N)
    finally:
        assert stop(proxy) == 0
    assert abs(got["heavy"] / N - 0.75) <= 0.03, got
    assert got["heavy"] + got["light"] == N


def test_with_the_heavier_one_down_the_other_answers_all(
    upstream: Upstream, tmp_path: Path
) -> None:
    config = proxy_config(
        [provider("heavy", refused_url(), 3), provider("light", upstream.url("ok"), 1)],
        balance="weighted",
    )
    proxy = start(config, tmp_path, upstream)
    try:
        got = answered_by(proxy.port, 400)
    finally:
        assert stop(proxy) == 0
    assert got == {"light": 400}


class Switch:
    """A provider that is up or down (503 to its health check and its requests) as told."""

    def __init__(self) -> None:
        self.up = False
        self.threads = Threaded()
        app = web.Application()
        app.router.add_get("/v1/models", self.models)
        app.router.add_post("/v1/chat/completions", self.chat)
        self.port = self.threads.serve(app)

    async def models(self, request: web.Request) -> web.Response:
        if not self.up:
            return web.json_response({"error": {"message": "down"}}, status=503)
        return web.json_response({"object": "list", "data": [{"id": "m", "object": "model"}]})

    async def chat(self, request: web.Request) -> web.Response:
        if not self.up:
            return web.json_response({"error": {"message": "down"}}, status=503)
        return web.json_response(completion("from the switch", "m"))


def test_the_heavier_one_back_has_its_share_within_one_health_ttl(
    upstream: Upstream, tmp_path: Path
) -> None:
    switch = Switch()
    heavy = provider("heavy", f"http://127.0.0.1:{switch.port}/v1/chat/completions", 3)
    heavy["health_check"] = "../models"
    light = {**provider("light", upstream.url("ok"), 1), "health_check": ""}
    config = proxy_config(
        [heavy, light],
        balance="weighted",
        health={"mode": "cached", "ttl_s": 1.0},
    )
    proxy = start(config, tmp_path, upstream)
    try:
        assert answered_by(proxy.port, 200) == {"light": 200}
        switch.up = True
        time.sleep(1.2)  # one health TTL, and a little
        got = answered_by(proxy.port, 1000)
    finally:
        assert stop(proxy) == 0
        switch.threads.stop()
    assert abs(got["heavy"] / 1000 - 0.75) <= 0.05, got


def test_latency_sends_nearly_everything_to_the_fast_one(
    upstream: Upstream, tmp_path: Path
) -> None:
    slow = provider("slow", upstream.url("slow"), 3)  # 0.6 s an answer, first by weight
    config = proxy_config([slow, provider("fast", upstream.url("ok"), 1)], balance="latency")
    proxy = start(config, tmp_path, upstream)
    try:
        got = answered_by(proxy.port, 40)
    finally:
        assert stop(proxy) == 0
    assert got["slow"] >= 1  # measured: the first request, with nothing known, went by weight
    assert got["fast"] >= 36  # then fast first (a loaded machine may slow one answer of it)


def test_a_few_slow_requests_of_one_client_move_no_one_else(
    upstream: Upstream, tmp_path: Path
) -> None:
    """Issue 47: the latency of a provider is the median of its recent good attempts, so three
    requests that ask for a long answer (1 s each) leave the fast provider first for the 20
    requests after them; the other answers in 0.6 s."""
    fast = provider("fast", upstream.url("askslow"), 3)
    config = proxy_config([fast, provider("other", upstream.url("slow"), 1)], balance="latency")
    proxy = start(config, tmp_path, upstream)
    try:
        answered_by(proxy.port, 12)  # each measured: the fast one first from the second on
        long = json.dumps({**json.loads(BODY), "max_tokens": LONG_ANSWER})
        assert answered_by(proxy.port, 3, long) == {"fast": 3}  # 1 s each
        got = answered_by(proxy.port, 20)
    finally:
        assert stop(proxy) == 0
    assert got == {"fast": 20}
