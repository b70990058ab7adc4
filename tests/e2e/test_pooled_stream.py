"""A pooled upstream connection stays usable after a stream that arrived in one piece, however
long it then waits in the pool (keep-alive to upstreams, issue 23).

Found by bench/stream.py: aiohttp 3.14's client re-arms a connection's read timeout while the
rest of an already received answer is drained, after the connection went back to the pool
(aio-libs/aiohttp#12954); the next request sent on it more than the read timeout later fails
at once with `timeout`, and the provider is skipped or failed over for nothing. It failed on
aiohttp's client (4 of 4 runs); the llhttp client (`upstream.py`) that replaced it passes.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web

from ..fakes.serving import Threaded
from ..fakes.upstream import Upstream, proxy_config
from .test_proxy import start, stop

CHUNKS = 1000
READ_MS = 400


def _chunk(text: str | None, finish: str | None = None) -> bytes:
    delta = {} if text is None else {"content": text}
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    body = {"id": "c", "object": "chat.completion.chunk", "model": "m", "choices": [choice]}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


# ~250 KB, written at once: the proxy's client gets it in a few reads, most of it buffered.
STREAM = b"".join(_chunk(f"t{i} " + "x" * 120) for i in range(CHUNKS)) + _chunk(None, "stop")
STREAM += b"data: [DONE]\n\n"


async def _long(request: web.Request) -> web.StreamResponse:
    await request.read()
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    await resp.write(STREAM)
    await resp.write_eof()
    return resp


@pytest.fixture
def long_stream() -> Iterator[str]:
    """A provider answering every chat request with `STREAM`: its endpoint."""
    app = web.Application()
    app.router.add_post("/v1/chat/completions", _long)
    server = Threaded()
    port = server.serve(app)
    yield f"http://127.0.0.1:{port}/v1/chat/completions"
    server.stop()


def test_a_pooled_connection_outlives_the_read_timeout(
    upstream: Upstream, long_stream: str, tmp_path: Path
) -> None:
    provider = {"name": "long", "endpoint": long_stream, "timeout": {"read": READ_MS}}
    proxy = start(proxy_config([provider]), tmp_path, upstream)
    try:
        client = proxy.client()
        for _ in range(3):  # each on the pooled connection, idle longer than the read timeout
            stream = client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "go"}], stream=True
            )
            texts = [c.choices[0].delta.content for c in stream if c.choices]
            assert sum(1 for t in texts if t) == CHUNKS
            time.sleep(READ_MS / 1000 * 2)
    finally:
        stop(proxy)
