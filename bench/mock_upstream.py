"""A fast OpenAI-compatible mock for benchmarks: `python bench/mock_upstream.py` prints its
port, then answers every POST with a fixed chat.completion (and `GET /v1/models`)."""

from __future__ import annotations

import asyncio
import sys

from aiohttp import web

BODY = (
    b'{"id":"chatcmpl-bench","object":"chat.completion","created":1700000000,"model":"bench",'
    b'"choices":[{"index":0,"message":{"role":"assistant","content":"pong"},'
    b'"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}'
)
HANG_S = 3600


async def chat(_: web.Request) -> web.Response:
    return web.Response(body=BODY, content_type="application/json")


async def hang(_: web.Request) -> web.Response:
    await asyncio.sleep(HANG_S)
    return web.Response(body=BODY, content_type="application/json")


async def models(_: web.Request) -> web.Response:
    return web.json_response({"object": "list", "data": [{"id": "bench", "object": "model"}]})


async def main() -> None:
    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_post("/hang/v1/chat/completions", hang)
    app.router.add_get("/v1/models", models)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    print(runner.addresses[0][1], flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(0)
