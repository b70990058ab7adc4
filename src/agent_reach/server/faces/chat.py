"""`POST /v1/chat/completions`: the OpenAI Chat Completions face of the proxy (protocol §10)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from ...chat import completion
from ...chat.request import ChatRequest
from ...core.errors import StreamInterrupted
from ...dialects import Verbatim
from ..http11.wire import Request, StreamResponse
from .relay import Serving, read_json, streamed, whole, with_headers

if TYPE_CHECKING:
    from ...engine.stream import ChatStream


async def completions(gateway: Serving, request: Request) -> StreamResponse:
    req = with_headers(ChatRequest.parse(await read_json(request)), request)
    if req.stream:
        return await streamed(gateway, request, req, (), _relay)
    return await whole(gateway, request, req, (), _as_it_is)


def _json(chunk: dict[str, Any]) -> bytes:
    """A chunk's JSON: the provider's own bytes when they say it (`Verbatim`)."""
    return chunk.raw if type(chunk) is Verbatim else orjson.dumps(chunk)


def _as_it_is(answer: dict[str, Any]) -> dict[str, Any]:
    return answer


async def _relay(resp: StreamResponse, stream: ChatStream) -> None:
    """The chunks as OpenAI SSE, then `[DONE]`; a cut after the first one ends the stream with
    an error chunk naming the cut's reason."""
    try:
        async for batch in stream.batches():
            await resp.write(b"data: " + b"\n\ndata: ".join(map(_json, batch)) + b"\n\n")
    except StreamInterrupted as exc:
        attempts = [a.to_dict() for a in exc.attempts]
        reason = str(exc.cut.reason)
        body = completion.error(str(exc), "stream_interrupted", reason, attempts=attempts)
        await resp.write(b"data: " + orjson.dumps(body) + b"\n\n")
    else:
        await resp.write(b"data: [DONE]\n\n")
