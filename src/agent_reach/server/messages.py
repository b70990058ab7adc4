"""`POST /v1/messages` and `POST /v1/messages/count_tokens`: the Anthropic Messages face of the
proxy (protocol §10.1), the API Claude Code speaks.

A Messages request is read into the engine's chat request (`dialects.anthropic.read_request`)
and keeps the body as it came (`native`): a `format: anthropic` provider gets that body and its
answer or stream is forwarded as it is; any other provider's answer is rendered back into
Messages, with `X-Agent-Reach-Dropped` naming what that provider was not sent.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import orjson
from aiohttp import web

from ..dialects import anthropic
from ..dialects.base import Inbound
from ..errors import AllProvidersFailed, StreamInterrupted
from ..request import ChatRequest
from .errors import all_failed, error_body
from .http import (
    SSE_HEADERS,
    dropped_header,
    json_response,
    read_json,
    sse,
    trace_headers,
    with_headers,
)

if TYPE_CHECKING:
    from ..stream import ChatStream
    from .app import Proxy


def _betas(given: str | None, allowed: list[str]) -> str | None:
    """The client's `anthropic-beta` flags that `server.anthropic_betas` lets through (a
    beta may add server-side tools or change billing: the config decides, not the client)."""
    if not given:
        return None
    if "*" in allowed:
        return given
    kept = [flag for f in given.split(",") if (flag := f.strip()) in allowed]
    return ",".join(kept) or None


async def create(proxy: Proxy, request: web.Request) -> web.StreamResponse:
    """`POST /v1/messages`: one message, whole or streamed, with failover."""
    body = await read_json(request)
    inbound = anthropic.read_request(body)
    beta = _betas(request.headers.get("anthropic-beta"), proxy.config.server.anthropic_betas)
    req = replace(
        with_headers(ChatRequest.checked(inbound.body), request),
        api="messages",
        native=body,
        native_headers={"anthropic-beta": beta} if beta else None,
        raw_response=False,  # a Messages client always gets a Messages body
    )
    if req.stream:
        return await _stream(proxy, request, req, inbound)
    try:
        result = await proxy.router.answer(req)
    except AllProvidersFailed as exc:
        return all_failed(request.path, exc)
    headers = trace_headers(result.provider, result.trace)
    if result.native:
        return json_response(result.response, headers)
    headers |= dropped_header(inbound.dropped)
    return json_response(anthropic.message_of(result.response), headers)


async def count_tokens(_proxy: Proxy, request: web.Request) -> web.Response:
    """`POST /v1/messages/count_tokens`: a local estimate, no provider is asked."""
    body = await read_json(request)
    return json_response({"input_tokens": anthropic.estimate_tokens(body)})


async def _stream(
    proxy: Proxy, request: web.Request, req: ChatRequest, inbound: Inbound
) -> web.StreamResponse:
    try:
        stream = await proxy.router.stream(req)
    except AllProvidersFailed as exc:
        return all_failed(request.path, exc)
    try:
        headers = trace_headers(stream.provider, stream.trace)
        if not stream.native:
            headers |= dropped_header(inbound.dropped)
        resp = web.StreamResponse(headers={**SSE_HEADERS, **headers})
        await resp.prepare(request)
        try:
            if stream.native:
                await _forward(resp, stream)
            else:
                await _render(resp, stream)
        except StreamInterrupted as exc:
            attempts = [a.to_dict() for a in exc.attempts]
            error = error_body(request.path, 500, str(exc), attempts=attempts)
            await resp.write(sse("error", orjson.dumps(error)))
        return resp
    finally:
        await stream.aclose()  # a client that went away cancels us: close the upstream


async def _forward(resp: web.StreamResponse, stream: ChatStream) -> None:
    """The provider's own events, in order, as it sent them."""
    async for _ in stream:
        await _send(resp, stream.take_frames())
    await _send(resp, stream.take_frames())


async def _render(resp: web.StreamResponse, stream: ChatStream) -> None:
    """A chat provider's chunks as Messages events."""
    events = anthropic.MessageEvents()
    async for chunk in stream:
        await _send(resp, [(e, orjson.dumps(d)) for e, d in events.feed(chunk)])
    await _send(resp, [(e, orjson.dumps(d)) for e, d in events.end()])


async def _send(resp: web.StreamResponse, frames: list[tuple[str | None, bytes]]) -> None:
    if frames:
        await resp.write(b"".join(sse(e, d) for e, d in frames))
