"""`POST /v1/embeddings`: the OpenAI Embeddings face of the proxy (protocol §10.3). The vectors
of one provider of the request's embedding space, in input order, written as the client asked
(`encoding_format`: float, or base64 of little-endian float32s, what OpenAI's SDK asks); the
space that answered in `X-Agent-Reach-Embedding-Space` (and the body's `model`)."""

from __future__ import annotations

from typing import Any

from ...core.errors import AllProvidersFailed
from ...dialects.embeddings import as_base64
from ..http11.wire import Request, StreamResponse
from .face import Face, Serving
from .relay import json_response, read_json, trace_headers, with_headers

SPACE_HEADER = "X-Agent-Reach-Embedding-Space"


async def create(gateway: Serving, request: Request) -> StreamResponse:
    body = await read_json(request)
    router = gateway.router  # the one that answers, whatever a reload does meanwhile
    req = with_headers(router.embedding_request(body), request)
    try:
        result = await router.embed(req)
    except AllProvidersFailed as exc:
        return FACE.all_failed(exc)
    answer: dict[str, Any] = result.response
    headers = trace_headers(result.provider, result.trace) | written(
        answer, body.get("encoding_format")
    )
    return json_response(answer, headers)


def written(answer: dict[str, Any], encoding: Any) -> dict[str, str]:
    """`answer`'s vectors in the `encoding` the client asked for (base64, else floats as
    they are); the header that names the space they belong to."""
    if encoding == "base64":
        for item in answer["data"]:
            item["embedding"] = as_base64(item["embedding"])
    return {SPACE_HEADER: answer["model"]}


FACE = Face("embeddings", (("POST", "/v1/embeddings", create),), prefixes=("/v1/embeddings",))
