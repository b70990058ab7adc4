"""`POST /v1/messages` and `POST /v1/messages/count_tokens`: the Anthropic Messages face of the
proxy (protocol §10.1), the API Claude Code speaks.

A Messages request is read into the engine's chat request
(`dialects.anthropic.request.decode_request`) and keeps the body as it came (`native`): a
`format: anthropic` provider gets that body and its answer or stream is forwarded as it is;
any other provider's answer is rendered back into Messages, with `X-Agent-Reach-Dropped`
naming what that provider was not sent.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import orjson

from ...chat.request import ChatRequest
from ...core.errors import StreamInterrupted
from ...dialects.anthropic.answer import encode_answer
from ...dialects.anthropic.request import decode_request
from ...dialects.anthropic.schema import estimate_tokens
from ...dialects.anthropic.stream import StreamEncoder
from ..errors import error_body
from ..http11.wire import Request, Response, StreamResponse
from .relay import Serving, json_response, read_json, sse, streamed, whole, with_headers

if TYPE_CHECKING:
    from ...engine.stream import ChatStream

PATH = "/v1/messages"  # the shape of its errors


def _betas(given: str | None, allowed: list[str]) -> str | None:
    """The client's `anthropic-beta` flags that `server.anthropic_betas` lets through (a
    beta may add server-side tools or change billing: the config decides, not the client)."""
    if not given:
        return None
    if "*" in allowed:
        return given
    kept = [flag for f in given.split(",") if (flag := f.strip()) in allowed]
    return ",".join(kept) or None


async def create(gateway: Serving, request: Request) -> StreamResponse:
    """`POST /v1/messages`: one message, whole or streamed, with failover."""
    body = await read_json(request)
    inbound = decode_request(body)
    req = replace(
        with_headers(ChatRequest.checked(inbound.body), request),
        api="messages",
        native=body,
        native_headers=_beta(gateway, request),
        marked=inbound.marked,
        raw_response=False,  # a Messages client always gets a Messages body
    )
    if req.stream:
        return await streamed(gateway, request, req, inbound.dropped, _relay)
    return await whole(gateway, request, req, inbound.dropped, encode_answer)


async def count_tokens(gateway: Serving, request: Request) -> Response:
    """`POST /v1/messages/count_tokens`: counted by the route's first native Anthropic
    provider, else (or when it gives no count) a local estimate."""
    body = await read_json(request)
    estimate = estimate_tokens(body)  # checks the request too
    asked: dict[str, Any] = {k: body[k] for k in ("model", "messages", "agent_reach") if k in body}
    req = replace(
        with_headers(ChatRequest.checked(asked), request),
        api="messages",
        native=body,
        native_headers=_beta(gateway, request),
    )
    counted = await gateway.router.count_tokens(req)
    if counted is None:
        return json_response({"input_tokens": estimate})
    provider, tokens = counted
    return json_response({"input_tokens": tokens}, {"X-Agent-Reach-Provider": provider})


def _beta(gateway: Serving, request: Request) -> dict[str, str] | None:
    """The client's `anthropic-beta` header (Anthropic needs it for beta fields), with the
    flags `server.anthropic_betas` allows."""
    beta = _betas(request.headers.get("anthropic-beta"), gateway.config.server.anthropic_betas)
    return {"anthropic-beta": beta} if beta else None


async def _relay(resp: StreamResponse, stream: ChatStream) -> None:
    """The stream as Messages events; a cut after its start ends it with `event: error`."""
    try:
        if stream.native:
            await _forward(resp, stream)
        else:
            await _render(resp, stream)
    except StreamInterrupted as exc:
        attempts = [a.to_dict() for a in exc.attempts]
        error = error_body(PATH, 500, str(exc), attempts=attempts)
        await resp.write(sse("error", orjson.dumps(error)))


async def _forward(resp: StreamResponse, stream: ChatStream) -> None:
    """The provider's own events, in order, as it sent them."""
    async for _ in stream.batches():
        await _send(resp, stream.take_frames())
    await _send(resp, stream.take_frames())


async def _render(resp: StreamResponse, stream: ChatStream) -> None:
    """A chat provider's chunks as Messages events."""
    events = StreamEncoder()
    async for batch in stream.batches():
        await _send(resp, [(e, orjson.dumps(d)) for chunk in batch for e, d in events.feed(chunk)])
    await _send(resp, [(e, orjson.dumps(d)) for e, d in events.end()])


async def _send(resp: StreamResponse, frames: list[tuple[str | None, bytes]]) -> None:
    if frames:
        await resp.write(b"".join(sse(e, d) for e, d in frames))
