"""A stop that cuts no stream (protocol §14, issue 38): on SIGTERM `/readyz` turns 503 while
`/healthz` stays 200 and the listener accepts for `--drain-delay`; the streams open then run to
their end within `--shutdown-timeout`, and those that outlast it end with their API's error
event, never cut silently. 100 streams of the `paced` scenario (a word every 100 ms for 20 s),
a quarter in each API, through `agent-reach serve` as a subprocess."""

from __future__ import annotations

import asyncio
import re
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from ..fakes.upstream import PACED_WORDS, Upstream, proxy_config
from .test_proxy import Proxy, start, stop

MSG = [{"role": "user", "content": "think long"}]
GEMINI = "/v1beta/models/m:streamGenerateContent?alt=sse"
REQUESTS: dict[str, tuple[str, dict[str, Any]]] = {
    "chat": ("/v1/chat/completions", {"model": "m", "messages": MSG, "stream": True}),
    "messages": (
        "/v1/messages",
        {"model": "m", "max_tokens": 4096, "messages": MSG, "stream": True},
    ),
    "responses": ("/v1/responses", {"model": "m", "input": "think long", "stream": True}),
    "gemini": (GEMINI, {"contents": [{"role": "user", "parts": [{"text": "think long"}]}]}),
}
# How each API's stream ends whole, and how it ends in error.
WHOLE = {
    "chat": "data: [DONE]",
    "messages": "event: message_stop",
    "responses": "event: response.completed",
    "gemini": '"finishReason":"STOP"',
}
ERROR = {
    "chat": 'data: {"error":',
    "messages": "event: error",
    "responses": "event: response.failed",
    "gemini": 'data: {"error":',
}
STREAMS = 100
IN_FLIGHT = re.compile(r"^agent_reach_requests_in_flight (\S+)$", re.M)


def proxy(upstream: Upstream, tmp: Path, shutdown_s: float) -> Proxy:
    paced = upstream.provider("paced", timeout={"read": 3000})
    config = proxy_config([paced], server={"max_requests_per_key": STREAMS + 10})
    return start(config, tmp, upstream, "--shutdown-timeout", str(shutdown_s), "--drain-delay", "1")


async def one(session: aiohttp.ClientSession, base: str, api: str, opened: Any) -> str:
    """A stream's whole text, read to its end; `opened()` once its first bytes came."""
    path, body = REQUESTS[api]
    async with session.post(base + path, json=body) as resp:
        assert resp.status == 200, await resp.text()
        text = (await resp.content.readany()).decode()
        opened()
        async for piece in resp.content.iter_any():
            text += piece.decode()
    return text


async def status(session: aiohttp.ClientSession, url: str) -> int:
    async with session.get(url) as r:
        return r.status


async def text(session: aiohttp.ClientSession, url: str) -> str:
    async with session.get(url) as r:
        return await r.text()


def counts(log: str) -> tuple[int, int]:
    """(drained, ended) of the proxy's last line."""
    found = re.search(r"(\d+) request\(s\) drained, (\d+) ended unfinished", log)
    assert found is not None, log[-2000:]
    return int(found[1]), int(found[2])


@dataclass
class Stop:
    """What the clients saw of a stop: each stream's API and text, the statuses of `/readyz`
    and `/healthz` polled in the drain delay once `/readyz` said 503, and how many probes were
    sent in all after the signal (those before the 503 included)."""

    streams: list[tuple[str, str]]
    ready: list[int]
    alive: list[int]
    probes: int


async def streams_through_a_stop(p: Proxy, again: bool = False) -> Stop:
    """Open `STREAMS` streams, SIGTERM once every one has begun (`again`: a second time after
    the probes), and read them to their end."""
    apis = [list(REQUESTS)[i % len(REQUESTS)] for i in range(STREAMS)]
    begun = asyncio.Event()
    count = 0

    def opened() -> None:
        nonlocal count
        count += 1
        if count == STREAMS:
            begun.set()

    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=90)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        tasks = [asyncio.create_task(one(session, p.base, api, opened)) for api in apis]
        await asyncio.wait_for(begun.wait(), 30)
        gauge = IN_FLIGHT.search(await text(session, p.base + "/metrics"))
        assert gauge is not None
        assert float(gauge[1]) == STREAMS  # what an autoscaler reads
        p.proc.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        # The signal's callback runs on the proxy's loop: a probe on its way may come first.
        probes = 1
        while await status(session, p.base + "/readyz") != 503:
            assert time.monotonic() - signalled < 5
            probes += 1
        print(f"/readyz 503 {1000 * (time.monotonic() - signalled):.1f} ms after SIGTERM")
        ready, alive = [], []
        while time.monotonic() < signalled + 0.6:  # within the 1 s drain delay: accepting
            ready.append(await status(session, p.base + "/readyz"))
            alive.append(await status(session, p.base + "/healthz"))
            await asyncio.sleep(0.05)
        if again:
            p.proc.send_signal(signal.SIGTERM)
        texts = await asyncio.gather(*tasks)
    streams = list(zip(apis, texts, strict=True))
    return Stop(streams, ready, alive, probes + len(ready) + len(alive))


def test_every_stream_open_at_sigterm_ends_whole(upstream: Upstream, tmp_path: Path) -> None:
    p = proxy(upstream, tmp_path, 30)
    seen = asyncio.run(streams_through_a_stop(p))
    assert p.proc.wait(30) == 0
    stop(p)
    assert set(seen.ready) == {503}, seen.ready  # once it said so, until it stops accepting
    assert set(seen.alive) == {200}, seen.alive
    for api, text in seen.streams:
        assert WHOLE[api] in text, (api, text[-300:])
        assert ERROR[api] not in text
        assert f"w{PACED_WORDS - 1} " in text  # every word came
    log = (tmp_path / "proxy.log").read_text()
    assert f"accepting for 1 s more; then {STREAMS} request(s) under way get 30 s" in log, log[
        -2000:
    ]
    # the streams, and the probes that came after the signal's callback
    assert counts(log)[1] == 0
    assert STREAMS <= counts(log)[0] <= STREAMS + seen.probes, log[-2000:]


@pytest.mark.parametrize(
    ("shutdown_s", "again"), [(2, False), (30, True)], ids=["timeout", "second-signal"]
)
def test_streams_outlasting_the_shutdown_timeout_end_with_their_apis_error(
    upstream: Upstream, tmp_path: Path, shutdown_s: float, again: bool
) -> None:
    p = proxy(upstream, tmp_path, shutdown_s)
    seen = asyncio.run(streams_through_a_stop(p, again))
    assert p.proc.wait(30) == 0
    stop(p)
    for api, text in seen.streams:
        assert ERROR[api] in text, (api, text[-300:])
        assert WHOLE[api] not in text
        assert "shutting down" in text
    log = (tmp_path / "proxy.log").read_text()
    assert counts(log)[1] == STREAMS
    assert counts(log)[0] <= seen.probes, log[-2000:]  # the probes only


def test_readyz_is_open_and_says_the_state_store(upstream: Upstream, tmp_path: Path) -> None:
    p = start(
        proxy_config([upstream.provider("ok")]),
        tmp_path,
        upstream,
        env={"AGENT_REACH_API_KEYS": "k1"},
    )
    try:
        assert p.get("/readyz") == (200, {"status": "ready", "state": "ok"})  # no key needed
        assert p.get("/metrics")[0] == 401  # unlike the metrics
    finally:
        stop(p)
