"""`POST /v1/chat/completions`: the OpenAI Chat Completions face of the proxy (protocol §10)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import orjson
from aiohttp import web

from .. import completion
from ..errors import AllProvidersFailed, StreamInterrupted
from ..request import ChatRequest
from .errors import all_failed
from .http import (
    SSE_HEADERS,
    dropped_header,
    json_response,
    read_json,
    trace_headers,
    with_headers,
)

if TYPE_CHECKING:
    from .app import Proxy


async def completions(proxy: Proxy, request: web.Request) -> web.StreamResponse:
    req = with_headers(ChatRequest.parse(await read_json(request)), request)
    if req.stream:
        return await _stream(proxy, request, req)
    router = proxy.router  # the one that answers, whatever a reload does meanwhile
    try:
        result = await router.answer(req)
    except AllProvidersFailed as exc:
        return all_failed(request.path, exc)
    headers = trace_headers(result.provider, result.trace)
    headers |= dropped_header(router.dropped(result.provider, req, ()))
    return json_response(result.response, headers)


async def _stream(proxy: Proxy, request: web.Request, req: ChatRequest) -> web.StreamResponse:
    router = proxy.router  # the one that answers, whatever a reload does meanwhile
    try:
        stream = await router.stream(req)
    except AllProvidersFailed as exc:
        return all_failed(request.path, exc)
    try:
        headers = {**SSE_HEADERS, **trace_headers(stream.provider, stream.trace)}
        headers |= dropped_header(router.dropped(stream.provider, req, ()))
        resp = web.StreamResponse(headers=headers)
        await resp.prepare(request)
        try:
            async for chunk in stream:
                await resp.write(b"data: " + orjson.dumps(chunk) + b"\n\n")
        except StreamInterrupted as exc:
            attempts = [a.to_dict() for a in exc.attempts]
            reason = str(exc.cut.reason)
            body = completion.error(str(exc), "stream_interrupted", reason, attempts=attempts)
            await resp.write(b"data: " + orjson.dumps(body) + b"\n\n")
        else:
            await resp.write(b"data: [DONE]\n\n")
        return resp
    finally:
        await stream.aclose()  # a client that went away cancels us: close the upstream
