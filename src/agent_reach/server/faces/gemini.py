"""`POST /v1beta/models/{model}:generateContent`, `:streamGenerateContent` and `:countTokens`,
and `GET /v1beta/models`: the Gemini API face of the proxy (protocol §10.2), the API Gemini CLI
speaks (`/v1/models/…` the same).

A generateContent request is read into the engine's chat request (`dialects.decode_request`,
the model from the URL) and keeps its body (`native`): a `format: gemini` provider gets that
body and its answer or stream is forwarded as it is; any other provider's answer is rendered
back into Gemini's shape, with `X-Agent-Reach-Dropped` naming what that provider was not sent.
A stream is server-sent events with `alt=sse`, else one JSON array written as it comes.
"""

from __future__ import annotations

import functools
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import orjson

from ...chat.request import ChatRequest
from ...core.errors import StreamInterrupted
from ...dialects.gemini.answer import encode_answer
from ...dialects.gemini.errors import error_body
from ...dialects.gemini.request import decode_request, estimate_tokens
from ...dialects.gemini.stream import StreamEncoder
from ..errors import error_response
from ..http11.wire import Request, Response, StreamResponse
from .relay import Serving, json_response, read_json, streamed, whole, with_headers

if TYPE_CHECKING:
    from ...engine.stream import ChatStream

_METHODS = ("generateContent", "streamGenerateContent", "countTokens")


async def call(gateway: Serving, request: Request) -> StreamResponse:
    """`POST …/models/{model}:{method}`."""
    model, _, method = request.match_info["target"].rpartition(":")
    if method not in _METHODS or not model:
        names = ", ".join(_METHODS)
        return error_response(request.path, 404, f"no such method (the proxy serves {names})")
    body = await read_json(request)
    if method == "countTokens":
        return json_response({"totalTokens": estimate_tokens(body)})
    stream = method == "streamGenerateContent"
    inbound = decode_request(body, model, stream)
    req = replace(
        with_headers(ChatRequest.checked(inbound.body), request),
        api="gemini",
        native=body,
        raw_response=False,  # a Gemini client always gets a Gemini body
    )
    if not stream:
        return await whole(gateway, request, req, inbound.dropped, encode_answer)
    sse = request.query.get("alt") == "sse"
    relay = functools.partial(_relay, sse)
    kind = "text/event-stream" if sse else "application/json"
    return await streamed(gateway, request, req, inbound.dropped, relay, kind)


async def models(gateway: Serving, _request: Request) -> Response:
    """`GET /v1beta/models`: every model name a request may ask for, as Gemini lists them."""
    listed = [
        {
            "name": f"models/{m['id']}",
            "displayName": m["id"],
            "supportedGenerationMethods": list(_METHODS),
        }
        for m in gateway.model_names()
    ]
    return json_response({"models": listed})


async def _relay(sse: bool, resp: StreamResponse, stream: ChatStream) -> None:
    """The stream as Gemini's (server-sent events, or one JSON array); a cut after its start
    ends it with one Google error object."""
    out = _Writer(resp, sse)
    try:
        if stream.native:
            async for _ in stream.batches():
                await out.frames(stream.take_frames())
            await out.frames(stream.take_frames())
        else:
            await _render(out, stream)
    except StreamInterrupted as exc:
        attempts = [a.to_dict() for a in exc.attempts]
        await out.objects([error_body(500, str(exc), attempts=attempts)])
    await out.close()


async def _render(out: _Writer, stream: ChatStream) -> None:
    """A chat provider's chunks as Gemini's stream."""
    chunks = StreamEncoder()
    async for batch in stream.batches():
        await out.objects([o for chunk in batch for o in chunks.feed(chunk)])
    await out.objects(chunks.end())


class _Writer:
    """Gemini stream objects written as server-sent events (`alt=sse`) or as the items of one
    JSON array, opened by the first and closed by `close`."""

    def __init__(self, resp: StreamResponse, sse: bool) -> None:
        self.resp = resp
        self.sse = sse
        self.opened = False

    async def objects(self, objects: list[dict[str, Any]]) -> None:
        await self._write([orjson.dumps(o) for o in objects])

    async def frames(self, frames: list[tuple[str | None, bytes]]) -> None:
        """A `format: gemini` provider's own events, each one response object."""
        await self._write([data for _, data in frames])

    async def _write(self, items: list[bytes]) -> None:
        if not items:
            return
        if self.sse:
            await self.resp.write(b"".join(b"data: " + i + b"\r\n\r\n" for i in items))
            return
        head = b"," if self.opened else b"["
        self.opened = True
        await self.resp.write(head + b",".join(items))

    async def close(self) -> None:
        if not self.sse:
            await self.resp.write(b"]" if self.opened else b"[]")
