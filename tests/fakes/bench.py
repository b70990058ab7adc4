"""The benchmarks' upstream, fast and OpenAI-compatible: `python -m tests.fakes.bench` (from the
repository's root) prints its port, then answers every POST with a fixed chat.completion (and
`GET /v1/models`).

Under `/sse/` it is a paced streaming upstream instead: every POST is answered with an SSE
stream of `SSE_CHUNKS` content chunks `SSE_GAP_S` apart (the first at once), a final chunk
and `data: [DONE]`, so that a proxy's added time to first token and per-chunk gap show.

Under `/flood/` every POST is answered with 8 KB content chunks as fast as its reader takes
them (at most `FLOOD_MAX` bytes), and `GET /flood/stats` says how many such streams are open,
how many ended because their reader went away, and the bytes each one got written.

Under `/long/` every POST is answered at once with a long SSE stream, written in one go:
`LONG_CHUNKS` content chunks shaped as OpenAI sends them (id, fingerprint, logprobs…), a final
chunk and `data: [DONE]` (bench/stream.py: how many chunks a proxy relays per second); under
`/drip/` with the same stream written one event at a time, as fast as it goes. Under
`/idle/` the stream's first content chunk comes at once and then nothing for `IDLE_S` (an open
idle stream, held by its reader: what one costs a proxy in memory).

Under `/tail/` one POST in ten (a seeded draw) is answered after `TAIL_S`, the others at once
(bench/hedging.py: a heavy-tailed primary).

Under `/embed/` it is an embeddings provider: `POST /embed/v1/embeddings` answers each input
with the same `EMBED_WIDTH`-wide vector, in OpenAI's shape (bench/embeddings.py); under
`/embed32/` the vector's numbers are float32s written as OpenAI writes them (about 20
characters each, not 5: what one big answer costs a proxy).

Under `/budget/` every POST is counted and answered after `BUDGET_S`; `GET /budget/stats` says
how many came (bench/abuse.py: how many requests a budget let through).
"""

from __future__ import annotations

import asyncio
import random
import sys
from array import array

import orjson
from aiohttp import web

from .serving import port_of, start
from .shapes import chunk, completion, sse

BODY = orjson.dumps(completion("pong", "bench", id="chatcmpl-bench"))
HANG_S = 3600
SSE_CHUNKS = 20
SSE_GAP_S = 0.005
BUDGET_S = 0.3
TAIL_S = 2.0
TAIL_DRAW = random.Random(42)
LONG_CHUNKS = 1000
IDLE_S = 300
EMBED_WIDTH = 1024
EMBED_NUMBERS = [((i * 7919) % 2000 - 1000) / 1000 for i in range(EMBED_WIDTH)]
EMBED_VECTOR = orjson.dumps(EMBED_NUMBERS)
# float32s (a number's last bits made up) as doubles: OpenAI's -0.006929283495992422
EMBED32_VECTOR = orjson.dumps(
    list(array("f", [x / 7 + i * 1e-7 for i, x in enumerate(EMBED_NUMBERS)]))
)
BUDGETED: list[int] = []  # one item per request that reached `/budget/`


def _sse(delta: dict[str, str], finish: str | None = None) -> bytes:
    return sse(chunk(delta, finish, model="bench", id="chatcmpl-bench"))


SSE_FRAMES = [
    _sse({"role": "assistant", "content": f"t{i} "} if i == 0 else {"content": f"t{i} "})
    for i in range(SSE_CHUNKS)
]
SSE_END = _sse({}, "stop") + b"data: [DONE]\n\n"
LONG_FRAME = sse(
    {
        "id": "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT",
        "object": "chat.completion.chunk",
        "created": 1741569952,
        "model": "gpt-4o-2024-08-06",
        "service_tier": "default",
        "system_fingerprint": "fp_f9f4fb6dbf",
        "choices": [
            {"index": 0, "delta": {"content": " token"}, "logprobs": None, "finish_reason": None}
        ],
    }
)
LONG_BODY = SSE_FRAMES[0] + LONG_FRAME * (LONG_CHUNKS - 1) + SSE_END
FLOOD_FRAME = _sse({"content": "x" * 8192})
FLOOD_MAX = 256 * 2**20
FLOOD_WRITTEN: list[int] = []  # bytes written so far, per /flood/ stream
FLOOD_CUT: list[int] = []  # the streams that ended because their reader went away


async def chat(_: web.Request) -> web.Response:
    return web.Response(body=BODY, content_type="application/json")


async def tail(_: web.Request) -> web.Response:
    if TAIL_DRAW.random() < 0.10:
        await asyncio.sleep(TAIL_S)
    return web.Response(body=BODY, content_type="application/json")


_EMBEDDED: dict[tuple[int, bytes], bytes] = {}  # the answer for n inputs, made once


async def embed(request: web.Request) -> web.Response:
    inputs = orjson.loads(await request.read())["input"]
    n = len(inputs) if isinstance(inputs, list) else 1
    vector = EMBED32_VECTOR if request.path.startswith("/embed32/") else EMBED_VECTOR
    if (n, vector) not in _EMBEDDED:
        items = b",".join(
            b'{"object":"embedding","index":%d,"embedding":%s}' % (i, vector) for i in range(n)
        )
        _EMBEDDED[n, vector] = (
            b'{"object":"list","data":[%s],"model":"bench","usage":{"prompt_tokens":%d,'
            b'"total_tokens":%d}}' % (items, n, n)
        )
    return web.Response(body=_EMBEDDED[n, vector], content_type="application/json")


async def hang(_: web.Request) -> web.Response:
    await asyncio.sleep(HANG_S)
    return web.Response(body=BODY, content_type="application/json")


async def models(_: web.Request) -> web.Response:
    return web.json_response({"object": "list", "data": [{"id": "bench", "object": "model"}]})


async def paced_stream(request: web.Request) -> web.StreamResponse:
    await request.read()
    resp = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    )
    await resp.prepare(request)
    for i, frame in enumerate(SSE_FRAMES):
        if i:
            await asyncio.sleep(SSE_GAP_S)
        await resp.write(frame)
    await resp.write(SSE_END)
    await resp.write_eof()
    return resp


async def sse_at_once(request: web.Request, body: bytes, then_s: float = 0) -> web.StreamResponse:
    """`body` as an SSE stream in one write; the stream ends `then_s` seconds later."""
    await request.read()
    resp = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    )
    await resp.prepare(request)
    await resp.write(body)
    if then_s:
        await asyncio.sleep(then_s)
        await resp.write(SSE_END)
    await resp.write_eof()
    return resp


async def long_stream(request: web.Request) -> web.StreamResponse:
    return await sse_at_once(request, LONG_BODY)


async def drip_stream(request: web.Request) -> web.StreamResponse:
    await request.read()
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    await resp.write(SSE_FRAMES[0])
    for _ in range(LONG_CHUNKS - 1):
        await resp.write(LONG_FRAME)
    await resp.write(SSE_END)
    await resp.write_eof()
    return resp


async def idle_stream(request: web.Request) -> web.StreamResponse:
    return await sse_at_once(request, SSE_FRAMES[0], IDLE_S)


async def flood(request: web.Request) -> web.StreamResponse:
    await request.read()
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    stream = len(FLOOD_WRITTEN)
    FLOOD_WRITTEN.append(0)
    try:
        await resp.write(_sse({"role": "assistant", "content": "x"}))
        while FLOOD_WRITTEN[stream] < FLOOD_MAX:
            await resp.write(FLOOD_FRAME)
            FLOOD_WRITTEN[stream] += len(FLOOD_FRAME)
    except (asyncio.CancelledError, ConnectionError):
        FLOOD_CUT.append(stream)
        raise
    await resp.write(SSE_END)
    return resp


async def budgeted(_: web.Request) -> web.Response:
    BUDGETED.append(1)
    await asyncio.sleep(BUDGET_S)
    return web.Response(body=BODY, content_type="application/json")


async def budget_stats(_: web.Request) -> web.Response:
    return web.json_response({"requests": len(BUDGETED)})


async def flood_stats(_: web.Request) -> web.Response:
    return web.json_response({"written": FLOOD_WRITTEN, "cut": len(FLOOD_CUT)})


async def main() -> None:
    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_post("/hang/v1/chat/completions", hang)
    app.router.add_post("/tail/v1/chat/completions", tail)
    app.router.add_post("/embed/v1/embeddings", embed)
    app.router.add_post("/embed32/v1/embeddings", embed)
    app.router.add_get("/v1/models", models)
    app.router.add_post("/sse/v1/chat/completions", paced_stream)
    app.router.add_post("/long/v1/chat/completions", long_stream)
    app.router.add_post("/drip/v1/chat/completions", drip_stream)
    app.router.add_post("/idle/v1/chat/completions", idle_stream)
    for prefix in ("/sse", "/long", "/drip", "/idle"):
        app.router.add_get(f"{prefix}/v1/models", models)
    app.router.add_post("/flood/v1/chat/completions", flood)
    app.router.add_get("/flood/stats", flood_stats)
    app.router.add_post("/budget/v1/chat/completions", budgeted)
    app.router.add_get("/budget/stats", budget_stats)
    # A deep accept queue: a proxy opens hundreds of connections to it at once (bench/abuse.py's
    # 200 unread streams), and aiohttp's 128 overflowed there (a dropped SYN is sent again
    # after 1 s, past the proxy's 1 s connect timeout: one stream never started).
    runner = await start(app, cancel=True, backlog=2048)
    print(port_of(runner), flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(0)
