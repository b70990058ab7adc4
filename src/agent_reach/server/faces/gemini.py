"""`POST /v1beta/models/{model}:generateContent`, `:streamGenerateContent`, `:countTokens`,
`:embedContent` and `:batchEmbedContents`, and `GET /v1beta/models`: the Gemini API face of
the proxy (protocol §10.2, §10.3), the API Gemini CLI speaks (`/v1/models/…` the same).

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
from ...core.errors import AllProvidersFailed, StreamInterrupted
from ...dialects.gemini.answer import encode_answer
from ...dialects.gemini.embed import BATCH, ONE, decode_embedding, encode_embedding
from ...dialects.gemini.errors import error_body
from ...dialects.gemini.request import decode_request, estimate_tokens
from ...dialects.gemini.stream import StreamEncoder
from ..http11.wire import Request, Response, StreamResponse
from .embeddings import SPACE_HEADER, in_pieces
from .face import Face, Serving
from .relay import json_response, read_json, streamed, trace_headers, whole, with_headers

if TYPE_CHECKING:
    from ...engine.stream import ChatStream

_METHODS = ("generateContent", "streamGenerateContent", "countTokens", ONE, BATCH)


async def call(gateway: Serving, request: Request) -> StreamResponse:
    """`POST …/models/{model}:{method}`."""
    model, _, method = request.match_info["target"].rpartition(":")
    if method not in _METHODS or not model:
        names = ", ".join(_METHODS)
        return FACE.error_response(404, f"no such method (the proxy serves {names})")
    body = await read_json(request)
    if method == "countTokens":
        return json_response({"totalTokens": estimate_tokens(body)})
    if method in (ONE, BATCH):
        return await _embed(gateway, request, method, body, model)
    stream = method == "streamGenerateContent"
    inbound = decode_request(body, model, stream)
    req = replace(
        with_headers(ChatRequest.checked(inbound.body), request),
        api="gemini",
        native=body,
        raw_response=False,  # a Gemini client always gets a Gemini body
    )
    if not stream:
        return await whole(gateway, FACE, req, inbound.dropped, encode_answer)
    sse = request.query.get("alt") == "sse"
    encoder = functools.partial(GeminiEncoder, sse)
    kind = "text/event-stream" if sse else "application/json"
    return await streamed(gateway, FACE, request, req, inbound.dropped, encoder, kind)


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


class GeminiEncoder:
    """The stream as Gemini's: server-sent events (`alt=sse`) or the items of one JSON array,
    opened by the first and closed at the end; a chat provider's chunks rendered, a Gemini
    provider's own events as they came; a cut after the start ends it with one Google error
    object."""

    def __init__(self, sse: bool, stream: ChatStream) -> None:
        self.sse = sse
        self.forwarding = stream.native
        self.opened = False
        self.out = StreamEncoder()

    def start(self) -> bytes:
        return b""

    def chunks(self, batch: list[dict[str, Any]]) -> bytes:
        return self._items([orjson.dumps(o) for chunk in batch for o in self.out.feed(chunk)])

    def frames(self, frames: list[tuple[str | None, bytes]]) -> bytes:
        return self._items([data for _, data in frames])  # each one response object

    def end(self) -> bytes:
        tail = b"" if self.forwarding else self._items([orjson.dumps(o) for o in self.out.end()])
        return tail + self._close()

    def cut(self, exc: StreamInterrupted) -> bytes:
        attempts = [a.to_dict() for a in exc.attempts]
        error = orjson.dumps(error_body(500, str(exc), attempts=attempts))
        return self._items([error]) + self._close()

    def _items(self, items: list[bytes]) -> bytes:
        if not items:
            return b""
        if self.sse:
            return b"".join(b"data: " + i + b"\r\n\r\n" for i in items)
        head = b"," if self.opened else b"["
        self.opened = True
        return head + b",".join(items)

    def _close(self) -> bytes:
        if self.sse:
            return b""
        return b"]" if self.opened else b"[]"


async def _embed(
    gateway: Serving, request: Request, method: str, body: dict[str, Any], model: str
) -> StreamResponse:
    """`:embedContent` and `:batchEmbedContents`: the Embeddings face's path, in Gemini's
    shape."""
    router = gateway.router
    req = with_headers(router.embedding_request(decode_embedding(method, body, model)), request)
    try:
        result = await router.embed(req)
    except AllProvidersFailed as exc:
        return FACE.all_failed(exc)
    headers = trace_headers(result.provider, result.trace)
    headers[SPACE_HEADER] = result.response["model"]
    answer = encode_embedding(method, result.response)
    if method != BATCH:
        return json_response(answer, headers)
    return await in_pieces(request, headers, b'{"embeddings":[', answer["embeddings"], b"]}")


def gemini_error(status: int, message: str, **fields: Any) -> dict[str, Any]:
    """Google's error body, `{"error": {"code", "message", "status"}}`, with its status names
    (no OpenAI `type`, `code` or `param`)."""
    extra = {k: v for k, v in fields.items() if k not in ("type", "code", "param")}
    return error_body(status, message, **extra)


def _served(path: str) -> bool:
    """`/v1/models/{model}:{method}`: the Gemini API under `v1` (its `GET /v1/models` is
    OpenAI's)."""
    return path.startswith("/v1/models/") and ":" in path


FACE = Face(
    "gemini",
    (
        ("POST", "/v1beta/models/{target}", call),
        ("POST", "/v1/models/{target}", call),
        ("GET", "/v1beta/models", models),
    ),
    gemini_error,
    prefixes=("/v1beta",),
    also=_served,
    query_key=True,
)
