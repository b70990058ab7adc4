"""The floor of a proxy built on aiohttp (bench/floor.py): receive a POST, send its body to the
upstream on a kept-alive connection, return the answer. No keys, no checks, no failover, no
log: what any aiohttp proxy pays before doing anything of its own.

    python bench/peers/aiohttp_floor.py PORT UPSTREAM_URL
"""

from __future__ import annotations

import asyncio
import sys

import aiohttp
from aiohttp import web


async def main(port: int, upstream: str) -> None:
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))

    async def forward(request: web.Request) -> web.Response:
        body = await request.read()
        headers = {"Content-Type": "application/json"}
        async with session.post(upstream + request.path, data=body, headers=headers) as resp:
            answer = await resp.read()
            return web.Response(body=answer, status=resp.status, content_type="application/json")

    app = web.Application()
    app.router.add_post("/{path:.*}", forward)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), sys.argv[2]))
