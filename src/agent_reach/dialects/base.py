"""What every dialect has in common: its interface, stream framing and shared helpers. Pure."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from .. import completion, paths
from ..outcomes import ErrorInfo


class Mismatch(Exception):
    """A 2xx body (or stream frame) that is not a usable answer: `schema_mismatch`."""


class ProviderError(Exception):
    """The provider reported an error in its body or stream; classified by `outcomes`."""

    def __init__(self, info: ErrorInfo) -> None:
        self.info = info
        super().__init__(info.message)


@dataclass(frozen=True, slots=True)
class Shape:
    """Where the answer is in a provider's body (the provider's `schema_compatibility`)."""

    choices_path: str
    content_path: str
    model_field: str = "model"


@dataclass(frozen=True, slots=True)
class Context:
    """What a dialect needs to know about one attempt besides the body."""

    model: str  # the model this provider was asked for (after model_map); "" when none
    created: int  # unix seconds, for bodies that carry no timestamp
    shape: Shape


class Decoder(ABC):
    """Turns a provider's stream frames into OpenAI chunks, one frame at a time.

    `feed` returns the chunks a frame produces; it raises `ProviderError` for an error frame
    and `Mismatch` for an unparsable one. `finished` turns true once the provider has said the
    answer is complete (`[DONE]`, a finish reason, `done: true`, …): a stream that ends before
    that was cut.
    """

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.id = completion.new_id()
        self.finished = False

    @abstractmethod
    def feed(self, event: str | None, data: bytes) -> list[dict[str, Any]]:
        """The OpenAI chunks for one frame."""

    def chunk(self, **fields: Any) -> dict[str, Any]:
        """An OpenAI chunk with this stream's id, model and timestamp."""
        return completion.chunk(
            id=self.id, model=self.ctx.model, created=self.ctx.created, **fields
        )


class Dialect(ABC):
    """One provider format. Subclasses set the class defaults and override what differs."""

    name: ClassVar[str]
    framing: ClassVar[Literal["sse", "ndjson"]] = "sse"
    health_check: ClassVar[str] = ""
    choices_path: ClassVar[str] = "choices"
    content_path: ClassVar[str] = "message.content"
    max_tokens_field: ClassVar[str] = "max_tokens"

    def url(self, endpoint: str, model: str, stream: bool) -> str:
        """The URL to POST to (some formats put the model or the stream flag in it)."""
        return endpoint

    def headers(self) -> dict[str, str]:
        """Fixed headers the format needs besides auth and content type."""
        return {}

    @abstractmethod
    def body(
        self,
        request: dict[str, Any],
        model: str,
        stream: bool,
        max_tokens_field: str,
    ) -> dict[str, Any]:
        """The provider's request body for an OpenAI chat request."""

    def error_of(self, body: Any) -> ErrorInfo | None:
        """The error a provider reported in `body`, if any."""
        return openai_error(body)

    @abstractmethod
    def normalize(self, raw: Any, ctx: Context) -> dict[str, Any]:
        """The provider's JSON answer as an OpenAI `chat.completion` (raises `Mismatch`)."""

    @abstractmethod
    def decoder(self, ctx: Context) -> Decoder:
        """A fresh stream decoder for one attempt."""


# ---------------------------------------------------------------------------------------------
# Shared pieces


def max_tokens_of(request: dict[str, Any]) -> Any:
    """The request's output cap, whichever OpenAI field carries it."""
    value = request.get("max_completion_tokens")
    return request.get("max_tokens") if value is None else value


def openai_error(body: Any) -> ErrorInfo | None:
    """`{"error": {...}}` or `{"error": "text"}`, as OpenAI, Ollama and many others send."""
    if not isinstance(body, dict) or "error" not in body:
        return None
    err = body["error"]
    if isinstance(err, dict):
        code = err.get("code") or err.get("type")
        return ErrorInfo(str(err.get("message") or err), None if code is None else str(code), None)
    if err is None or err == "" or err is False:
        return None
    return ErrorInfo(str(err))


def text_of(content: Any) -> str | None:
    """Message content as text: a string as is, a list of parts joined by their text."""
    if isinstance(content, str) or content is None:
        return content
    if isinstance(content, list):
        return "".join(
            p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text"
        )
    return None


def content_at(raw: Any, shape: Shape) -> tuple[Any, str]:
    """(choice, content) at the shape's paths; `Mismatch` when there is no string there."""
    if not isinstance(raw, dict):
        raise Mismatch(f"expected a JSON object, got {type(raw).__name__}")
    choice, content = paths.extract(raw, shape.choices_path, shape.content_path)
    content = text_of(content)
    if not isinstance(content, str):
        raise Mismatch(f"no text at {shape.choices_path} → {shape.content_path}")
    return choice, content


def model_of(raw: dict[str, Any], ctx: Context) -> str:
    """The response's model at `model_field`, else the model that was asked for."""
    value = paths.get(raw, ctx.shape.model_field)
    return value if isinstance(value, str) and value else ctx.model or "unknown"


def loads(data: bytes) -> Any:
    """Parse JSON or raise `Mismatch` with a short reason."""
    import orjson

    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise Mismatch(f"invalid JSON: {exc}") from None


class SSEFrames:
    """Server-sent events, one line at a time: `data:` with or without a space, `event:`
    names, comment lines (`: keep-alive`, `:HTTP_STATUS/200`) skipped, multi-line data joined.
    """

    __slots__ = ("_data", "_event")

    def __init__(self) -> None:
        self._event: str | None = None
        self._data: list[bytes] = []

    def line(self, raw: bytes) -> tuple[str | None, bytes] | None:
        """Feed one line; returns a finished (event, data) frame at its blank line."""
        line = raw.rstrip(b"\r\n")
        if not line:
            return self.flush()
        if line[0] == 0x3A:  # ':' comment
            return None
        name, _, value = line.partition(b":")
        if value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            self._data.append(value)
        elif name == b"event":
            self._event = value.decode("utf-8", "replace")
        return None

    def flush(self) -> tuple[str | None, bytes] | None:
        """The pending frame, if any (also called at the end of the stream)."""
        if not self._data:
            self._event = None
            return None
        frame = (self._event, b"\n".join(self._data))
        self._event, self._data = None, []
        return frame


class NDJSONFrames:
    """Newline-delimited JSON: every non-blank line is a frame."""

    __slots__ = ()

    def line(self, raw: bytes) -> tuple[str | None, bytes] | None:
        line = raw.strip()
        return (None, line) if line else None

    def flush(self) -> tuple[str | None, bytes] | None:
        return None


def framer(framing: str) -> SSEFrames | NDJSONFrames:
    """A line framer for a dialect's `framing`."""
    return SSEFrames() if framing == "sse" else NDJSONFrames()
