"""Embeddings on the wire (protocol §10.3, PROVIDERS.md "Embeddings endpoints"): the three
shapes providers speak, each a request for a batch of texts and the vectors of its answer.

- `openai`: `POST …/embeddings` `{model, input, encoding_format, dimensions?}` →
  `{data: [{index, embedding}], usage}`: OpenAI, DashScope's compatible mode, Zhipu,
  SiliconFlow, Jina, Voyage, Mistral; every format but Ollama's and Gemini's.
- `ollama`: `POST /api/embed` `{model, input, dimensions?}` → `{embeddings, prompt_eval_count}`.
- `gemini`: `POST …/models/{model}:batchEmbedContents` `{requests: [{model, content,
  outputDimensionality?}]}` → `{embeddings: [{values}]}` in request order, no token count.

The answer's vectors come back compact (`array('d')`: 8 bytes a number, not a Python float's
32; the values as the provider wrote them), checked for their count, their width and that
every value is a finite number (`Mismatch` otherwise: a malformed answer, failed over).
"""

from __future__ import annotations

import base64
import math
import sys
from array import array
from typing import Any, Literal, TypeAlias

from .base import Mismatch
from .tokens import text_tokens

Kind = Literal["openai", "ollama", "gemini"]
Vector: TypeAlias = "array[float]"  # of "d": one embedding
_NUMBERS = frozenset({float, int})  # what JSON numbers parse to (`true` is a bool, not one)
# How many inputs one request may carry where the provider's config says nothing (OpenAI's 2,048;
# Gemini's 100, as client libraries assume it; Ollama sets none: a local model's memory does).
MAX_BATCH: dict[Kind, int] = {"openai": 2048, "ollama": 256, "gemini": 100}
_CHAT_PATHS = {"openai": "/chat/completions", "ollama": "/api/chat"}
_EMBED_PATHS = {"openai": "/embeddings", "ollama": "/api/embed"}


def kind_of(fmt: str) -> Kind:
    """The embeddings shape of a provider of format `fmt`."""
    if fmt == "gemini":
        return "gemini"
    return "ollama" if fmt == "ollama" else "openai"


def default_url(kind: Kind, endpoint: str) -> str | None:
    """The embeddings URL beside a chat `endpoint` (`…/chat/completions` → `…/embeddings`,
    `…/api/chat` → `…/api/embed`); None where it cannot be told (Gemini's has the model in it:
    `gemini_url`)."""
    if kind == "gemini":
        return None
    base, sep, query = endpoint.partition("?")
    chat = _CHAT_PATHS[kind]
    if not base.rstrip("/").endswith(chat):
        return None
    return base.rstrip("/")[: -len(chat)] + _EMBED_PATHS[kind] + sep + query


def gemini_url(generate_url: str) -> str:
    """Gemini's `batchEmbedContents` URL of a model, from its `generateContent` one."""
    base, sep, query = generate_url.partition("?")
    head, colon, _ = base.rpartition(":")
    return (head if colon else base) + ":batchEmbedContents" + sep + query


def request_body(kind: Kind, model: str, inputs: list[str], width: int | None) -> dict[str, Any]:
    """One request for the vectors of `inputs` from `model`, at `width` (None: not sent)."""
    if kind == "gemini":
        ask = {} if width is None else {"outputDimensionality": width}
        return {
            "requests": [
                {"model": f"models/{model}", "content": {"parts": [{"text": text}]}, **ask}
                for text in inputs
            ]
        }
    body: dict[str, Any] = {"model": model, "input": inputs}
    if kind == "openai":
        body["encoding_format"] = "float"
    if width is not None:
        body["dimensions"] = width
    return body


def vectors(kind: Kind, body: Any, count: int) -> tuple[list[Any], int]:
    """The `count` vectors of an answer, in input order, each to be `checked`, and the tokens
    it says it took (0 when it says nothing); `Mismatch` when they are not `count`."""
    if not isinstance(body, dict):
        raise Mismatch("the embeddings answer is not a JSON object")
    if kind == "gemini":
        found, tokens = _gemini(body), 0
    elif kind == "ollama":
        found, tokens = (
            _listed(body.get("embeddings"), "embeddings"),
            _int(body.get("prompt_eval_count")),
        )
    else:
        found, tokens = _openai(body), _tokens(body.get("usage"))
    if len(found) != count:
        raise Mismatch(f"{len(found)} vectors for {count} inputs")
    return found, tokens


def checked(i: int, vector: list[Any] | Vector, width: int) -> Vector:
    """Vector `i` of an answer made compact, when it is `width` finite numbers (else
    `Mismatch`)."""
    if len(vector) != width:
        raise Mismatch(f"vector {i} has {len(vector)} dimensions, not {width}")
    if not isinstance(vector, array):
        if not set(map(type, vector)) <= _NUMBERS:
            raise Mismatch(f"vector {i} holds a value that is no number")
        try:
            vector = array("d", vector)
        except OverflowError:
            raise Mismatch(f"vector {i} holds a value that is not finite") from None
    if not math.isfinite(sum(vector)):
        raise Mismatch(f"vector {i} holds a value that is not finite")
    return vector


def _openai(body: dict[str, Any]) -> list[Any]:
    data = body.get("data")
    if not isinstance(data, list):
        raise Mismatch("the embeddings answer has no 'data' list")
    ordered: dict[int, Any] = {}
    for i, item in enumerate(data):
        if not isinstance(item, dict):
            raise Mismatch(f"data[{i}] is not an object")
        index = item.get("index", i)
        if not isinstance(index, int) or index in ordered:
            raise Mismatch(f"data[{i}] has no index of its own")
        ordered[index] = _vector(item.get("embedding"), f"data[{i}].embedding")
    if sorted(ordered) != list(range(len(ordered))):
        raise Mismatch("the answer's indices are not 0 to n-1")
    return [ordered[i] for i in range(len(ordered))]


def _gemini(body: dict[str, Any]) -> list[Any]:
    items = body.get("embeddings")
    if not isinstance(items, list):
        raise Mismatch("the answer has no 'embeddings' list")
    return [
        _vector(item.get("values") if isinstance(item, dict) else None, f"embeddings[{i}].values")
        for i, item in enumerate(items)
    ]


def _listed(items: Any, where: str) -> list[Any]:
    if not isinstance(items, list):
        raise Mismatch(f"the answer has no '{where}' list")
    return [_vector(v, f"{where}[{i}]") for i, v in enumerate(items)]


def _vector(value: Any, where: str) -> list[Any] | Vector:
    """A vector: a list (of numbers, `checked` says), or base64 of little-endian float32 (as
    OpenAI's API sends it when asked)."""
    if isinstance(value, str):
        try:
            raw = base64.b64decode(value, validate=True)
        except ValueError:
            raise Mismatch(f"{where} is neither numbers nor base64") from None
        if len(raw) % 4:
            raise Mismatch(f"{where} is not float32s")
        floats = array("f", raw)
        if sys.byteorder != "little":
            floats.byteswap()
        return array("d", floats)
    if not isinstance(value, list):
        raise Mismatch(f"{where} is not a list of numbers")
    return value


def estimated_tokens(inputs: list[Any]) -> int:
    """The tokens of `inputs` as `count_tokens` estimates them where no provider counts (a
    token-id array is its length), for an answer that says none."""
    return sum(len(i) if isinstance(i, list) else max(1, round(text_tokens(i))) for i in inputs)


def _tokens(usage: Any) -> int:
    if not isinstance(usage, dict):
        return 0
    return _int(usage.get("total_tokens")) or _int(usage.get("prompt_tokens"))


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def unit(vector: Vector) -> Vector:
    """`vector` scaled to length 1 (as it is when it is already, within float32's precision,
    or all zeros)."""
    norm = math.hypot(*vector)
    if norm == 0 or abs(norm - 1) < 1e-6:
        return vector
    return array("d", [x / norm for x in vector])


def as_base64(vector: Vector) -> str:
    """`vector` as OpenAI's `encoding_format: base64` gives it: little-endian float32s."""
    floats = array("f", vector)
    if sys.byteorder != "little":
        floats.byteswap()
    return base64.b64encode(floats.tobytes()).decode("ascii")


def listed(value: Any) -> list[float]:
    """A vector as a list of floats: orjson's `default` for what it cannot write itself."""
    if isinstance(value, array):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")
