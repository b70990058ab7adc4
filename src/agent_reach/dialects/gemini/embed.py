"""The Gemini API's embedding methods as a client sends them (protocol §10.3): `:embedContent`
(one content) and `:batchEmbedContents` (`requests`, each a content), read into an OpenAI
embeddings body (each content's text parts joined is one input; `outputDimensionality` its
`dimensions`), and the OpenAI-shaped answer written back in Gemini's shape. `taskType` and
`title` are not sent on: a space's providers embed a text one way."""

from __future__ import annotations

from typing import Any

from ...core.errors import RequestError

BATCH = "batchEmbedContents"
ONE = "embedContent"


def decode_embedding(method: str, body: dict[str, Any], model: str) -> dict[str, Any]:
    """The OpenAI embeddings body of a `method` request for `model` (`RequestError`: no
    content, or contents asking different widths)."""
    if method == BATCH:
        asks = body.get("requests")
        if not isinstance(asks, list) or not asks:
            raise RequestError("'requests' must be a non-empty array", param="requests")
    else:
        asks = [body]
    widths = {_width(ask.get("outputDimensionality")) for ask in asks if isinstance(ask, dict)}
    if len(widths) > 1:
        raise RequestError("every request must ask the same outputDimensionality", param="requests")
    out: dict[str, Any] = {"model": model, "input": [_text(ask) for ask in asks]}
    width = widths.pop() if widths else None
    if width is not None:
        out["dimensions"] = width
    return out


def encode_embedding(method: str, answer: dict[str, Any]) -> dict[str, Any]:
    """The Gemini answer of `method` for an OpenAI-shaped embeddings answer."""
    values = [{"values": item["embedding"]} for item in answer["data"]]
    return {"embeddings": values} if method == BATCH else {"embedding": values[0]}


def _width(value: Any) -> int | None:
    """An `outputDimensionality`: absent, or a positive integer (else `RequestError`)."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value > 0):
        return value
    raise RequestError("'outputDimensionality' must be a positive integer", param="requests")


def _text(ask: Any) -> str:
    content = ask.get("content") if isinstance(ask, dict) else None
    parts = content.get("parts") if isinstance(content, dict) else None
    if not isinstance(parts, list):
        raise RequestError("each request needs a 'content' with 'parts'", param="content")
    text = "".join(
        p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)
    )
    if not text:
        raise RequestError("a content to embed needs text parts", param="content")
    return text
