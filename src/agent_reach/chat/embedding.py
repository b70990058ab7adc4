"""An embeddings request as it arrives in OpenAI's API (`POST /v1/embeddings`, protocol §10.3),
checked field by field, and the request the engine walks for it: its `model` an embedding
space, its body the inputs and the space's width (a space's width is never the client's to
change)."""

from __future__ import annotations

from typing import Any, Literal

from ..core.errors import RequestError
from ..core.records import record
from .request import ChatRequest

Encoding = Literal["float", "base64"]
FIELDS = frozenset({"model", "input", "encoding_format", "dimensions", "user"})


@record
class EmbeddingAsk:
    """What a client asked: the model (a space or one of its aliases), the texts, how it wants
    the vectors written and the width it named (None: the space's)."""

    model: str
    inputs: list[Any]  # texts, or token-id arrays (`tokens`)
    encoding: Encoding = "float"
    dimensions: int | None = None
    tokens: bool = False

    @classmethod
    def parse(cls, body: Any) -> EmbeddingAsk:
        """The ask of an OpenAI embeddings body; `RequestError` (a 400 naming the field)."""
        if not isinstance(body, dict):
            raise RequestError("the request must be a JSON object")
        for name in body:
            if name not in FIELDS:
                raise RequestError(f"unknown field {name!r}", param=name)
        model = body.get("model")
        if not isinstance(model, str) or not model:
            raise RequestError("'model' is required: the name of an embedding space", param="model")
        encoding = body.get("encoding_format", "float")
        if encoding not in ("float", "base64"):
            raise RequestError(
                "'encoding_format' must be 'float' or 'base64'", param="encoding_format"
            )
        dimensions = body.get("dimensions")
        if dimensions is not None and (
            not isinstance(dimensions, int) or isinstance(dimensions, bool) or dimensions < 1
        ):
            raise RequestError("'dimensions' must be a positive integer", param="dimensions")
        value = body.get("input")
        tokens = _token_ids(value)
        inputs = _texts(value) if tokens is None else tokens
        return cls(model, inputs, encoding, dimensions, tokens is not None)

    def request(self, space: str, width: int) -> ChatRequest:
        """The engine's request for this ask in `space`, whose vectors are `width` long."""
        body: dict[str, Any] = {"input": self.inputs, "dimensions": width}
        if self.tokens:
            body["tokens"] = True  # only providers with `token_input` take it
        return ChatRequest(body=body, model=space, stream=False, api="embeddings")


def _token_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _token_ids(value: Any) -> list[list[int]] | None:
    """The token-id arrays of `input` (one array, or a non-empty list of non-empty arrays),
    or None when it holds no token ids at all."""
    if isinstance(value, list) and value and all(_token_id(t) for t in value):
        return [value]
    if not isinstance(value, list) or not any(isinstance(v, list) for v in value):
        return None
    for i, ids in enumerate(value):
        if not isinstance(ids, list) or not ids or not all(_token_id(t) for t in ids):
            raise RequestError(
                f"'input[{i}]' must be a non-empty array of token ids, as the others are",
                param="input",
            )
    return value


def _texts(value: Any) -> list[str]:
    """The texts of `input`: a string or a non-empty list of non-empty strings."""
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value:
        raise RequestError(
            "'input' must be a string, a non-empty array of strings or of token-id arrays",
            param="input",
        )
    for i, text in enumerate(value):
        if not isinstance(text, str) or not text:
            raise RequestError(f"'input[{i}]' must be a non-empty string", param="input")
    return value
