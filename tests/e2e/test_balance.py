"""`balance: weighted` through `agent-reach serve`: two providers of weights 3 and 1 share 4,000
requests 75/25 (±3 points); with the heavier one refusing connections, every request is
answered by the other (failover is unchanged: the order drawn is the walk's)."""

from __future__ import annotations

import http.client
import json
from collections import Counter
from pathlib import Path

from ..fakes.upstream import Upstream, proxy_config, refused_url
from .test_proxy import start, stop

N = 4000
BODY = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})


def answered_by(port: int, n: int) -> Counter[str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    got: Counter[str] = Counter()
    for _ in range(n):
        conn.request("POST", "/v1/chat/completions", BODY, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        resp.read()
        assert resp.status == 200
        got[resp.getheader("x-agent-reach-provider") or "-"] += 1
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
