"""`POST /v1/chat/completions`: the OpenAI Chat Completions face of the proxy (protocol §10)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from ...chat import completion
from ...chat.request import ChatRequest
from ...dialects import Verbatim
from ..http11.wire import Request, StreamResponse
from .face import Face, Serving
from .relay import read_json, streamed, whole, with_headers

if TYPE_CHECKING:
    from ...core.errors import StreamInterrupted
    from ...engine.stream import ChatStream


async def completions(gateway: Serving, request: Request) -> StreamResponse:
    req = with_headers(ChatRequest.parse(await read_json(request)), request)
    if req.stream:
        return await streamed(gateway, FACE, request, req, (), ChatEncoder)
    return await whole(gateway, FACE, req, (), _as_it_is)


def _json(chunk: dict[str, Any]) -> bytes:
    """A chunk's JSON: the provider's own bytes when they say it (`Verbatim`)."""
    return chunk.raw if type(chunk) is Verbatim else orjson.dumps(chunk)


def _as_it_is(answer: dict[str, Any]) -> dict[str, Any]:
    return answer


class ChatEncoder:
    """The chunks as OpenAI SSE, then `[DONE]`; a cut after the first one ends the stream with
    an error chunk naming the cut's reason."""

    forwarding = False  # a chat provider's chunks are chat chunks already

    def __init__(self, _stream: ChatStream) -> None:
        pass

    def start(self) -> bytes:
        return b""

    def chunks(self, batch: list[dict[str, Any]]) -> bytes:
        return b"data: " + b"\n\ndata: ".join(map(_json, batch)) + b"\n\n"

    def frames(self, frames: list[tuple[str | None, bytes]]) -> bytes:
        return b""

    def end(self) -> bytes:
        return b"data: [DONE]\n\n"

    def cut(self, exc: StreamInterrupted) -> bytes:
        attempts = [a.to_dict() for a in exc.attempts]
        body = completion.error(
            str(exc), "stream_interrupted", str(exc.cut.reason), attempts=attempts
        )
        return b"data: " + orjson.dumps(body) + b"\n\n"


FACE = Face("chat", (("POST", "/v1/chat/completions", completions),), prefixes=("/v1/chat",))
