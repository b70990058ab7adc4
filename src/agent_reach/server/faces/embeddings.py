"""`POST /v1/embeddings`: the OpenAI Embeddings face of the proxy (protocol §10.3). The vectors
of one provider of the request's embedding space, in input order, written as the client asked
(`encoding_format`: float, or base64 of little-endian float32s, what OpenAI's SDK asks); the
space that answered in `X-Agent-Reach-Embedding-Space` (and the body's `model`).

An answer is written in pieces of `PIECE` vectors, the event loop free between them, so that
a big one neither holds its whole text in memory nor keeps every other client waiting."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import orjson

from ...core.errors import AllProvidersFailed
from ...dialects.embeddings import as_base64, listed
from ..http11.wire import Request, Response, StreamResponse
from .face import Face, Serving
from .relay import read_json, trace_headers, with_headers

SPACE_HEADER = "X-Agent-Reach-Embedding-Space"
PIECE = 64  # vectors written at a time
_JSON = {"Content-Type": "application/json"}


async def create(gateway: Serving, request: Request) -> StreamResponse:
    body = await read_json(request)
    router = gateway.router  # the one that answers, whatever a reload does meanwhile
    req = with_headers(router.embedding_request(body), request)
    try:
        result = await router.embed(req)
    except AllProvidersFailed as exc:
        return FACE.all_failed(exc)
    answer: dict[str, Any] = result.response
    headers = trace_headers(result.provider, result.trace) | {SPACE_HEADER: answer["model"]}
    rest = {k: v for k, v in answer.items() if k != "data"}
    head = orjson.dumps(rest)[:-1] + b',"data":['
    each = encoded(body.get("encoding_format"))
    return await in_pieces(request, headers, head, answer["data"], b"]}", each)


Item = dict[str, Any]


def encoded(encoding: Any) -> Callable[[Item], Item]:
    """Each `data` item with its vector in the `encoding` the client asked for: base64, else
    floats as they are."""
    if encoding != "base64":
        return _as_it_is
    return lambda item: {**item, "embedding": as_base64(item["embedding"])}


def _as_it_is(item: Item) -> Item:
    return item


def written(answer: dict[str, Any], encoding: Any) -> dict[str, str]:
    """`answer`'s vectors in the `encoding` the client asked for, at once (step mode's whole
    answer); the header that names the space they belong to."""
    answer["data"] = list(map(encoded(encoding), answer["data"]))
    return {SPACE_HEADER: answer["model"]}


async def in_pieces(
    request: Request,
    headers: dict[str, str],
    head: bytes,
    items: list[Any],
    tail: bytes,
    each: Callable[[Any], Any] = _as_it_is,
) -> StreamResponse:
    """A 200 whose JSON body is `head`, `items` (each a JSON value, as `each` makes it) joined
    by commas, `tail`, made and written `PIECE` items at a time."""

    def dumped(part: list[Any]) -> bytes:
        return b",".join(orjson.dumps(each(i), default=listed) for i in part)

    if len(items) <= PIECE:
        whole = head + dumped(items) + tail
        return Response(body=whole, content_type="application/json", headers=headers)
    resp = StreamResponse(headers=headers | _JSON)
    await resp.prepare(request)
    for start in range(0, len(items), PIECE):
        part = dumped(items[start : start + PIECE])
        await resp.write((head if start == 0 else b",") + part)
        await asyncio.sleep(0)  # every other client's turn
    await resp.write(tail)
    return resp


FACE = Face("embeddings", (("POST", "/v1/embeddings", create),), prefixes=("/v1/embeddings",))
