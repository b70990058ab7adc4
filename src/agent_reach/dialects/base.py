"""What every dialect is: its interface, the values it works with and its two errors. Pure.

A `Dialect` builds a provider's request body, reads a provider's error and answer, and makes a
`Decoder` for its stream; `Context`, `Shape` and `Inbound` are the values it is given and
returns. `Mismatch` (a 2xx that is no usable answer) and `ProviderError` (an error the provider
reported) are what it raises. `loads` (JSON, or `Mismatch`) and `openai_error` (the default
`error_of`) are here because the interface itself uses them. The conversions dialects build
bodies and answers from are in `convert`; stream framing is in `framing`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import orjson

from ..chat import completion
from ..core.outcomes import ErrorInfo
from ..core.records import record


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


@record
class Inbound:
    """A client's request in another API (Responses, Messages), read as a chat request.

    `body` is the OpenAI chat request the engine routes (with the client's `agent_reach`
    extension, if any); `dropped` names what a provider that does not speak the client's API
    will not see (hosted tools, thinking blocks, `cache_control`, …), for the
    `X-Agent-Reach-Dropped` header. `marked` is `body` with the client's `cache_control` marks
    kept on its messages, for a provider that takes them (None when the request has none).
    """

    body: dict[str, Any]
    dropped: tuple[str, ...] = ()
    marked: dict[str, Any] | None = None


@record
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

    def __init__(self, ctx: Context, dialect: Dialect) -> None:
        self.ctx = ctx
        self.dialect = dialect
        self.id = completion.new_id()
        self.model = ctx.model
        self.finished = False
        self._opened: set[int] = set()  # choice indexes whose first chunk has gone out

    def frame_object(self, event: str | None, data: bytes) -> dict[str, Any]:
        """A frame's JSON object: `Mismatch` when it is not one, `ProviderError` when it
        carries an error (the dialect's `error_of`, or an `event: error`)."""
        return self.judged(event, loads(data))

    def judged(self, event: str | None, obj: Any) -> dict[str, Any]:
        """`frame_object` of a frame already parsed."""
        if not isinstance(obj, dict):
            raise Mismatch("stream frame is not a JSON object")
        err = self.dialect.error_of(obj)
        if err is not None or event == "error":
            raise ProviderError(err or ErrorInfo(str(obj)[:300]))
        return obj

    @abstractmethod
    def feed(self, event: str | None, data: bytes) -> list[dict[str, Any]]:
        """The OpenAI chunks for one frame."""

    def repeats(
        self, frames: list[tuple[str | None, bytes]], at: int, out: list[dict[str, Any]]
    ) -> int:
        """`feed` of the frames from `at` on while each is one the decoder knows at a glance
        to give itself as a `Verbatim` chunk (added to `out`, which a face may check no
        further); the index of the first it does not. None is, unless a dialect says so."""
        return at

    def chunk(self, **fields: Any) -> dict[str, Any]:
        """An OpenAI chunk with this stream's id, model and timestamp."""
        return completion.chunk(
            id=self.id, model=self.model or "unknown", created=self.ctx.created, **fields
        )

    def emit(
        self,
        *,
        content: str | None = None,
        reasoning: str | None = None,
        tool_calls: list[dict[str, Any]] | None = None,
        finish: str | None = None,
        usage: dict[str, Any] | None = None,
        index: int = 0,
    ) -> list[dict[str, Any]]:
        """The chunk for one piece of an answer, or none when the piece carries nothing.

        The first chunk of each choice also says `role: assistant`; a `finish` marks the
        stream finished.
        """
        delta: dict[str, Any] = {}
        if content:
            delta["content"] = content
        if reasoning:
            delta["reasoning_content"] = reasoning
        if tool_calls:
            delta["tool_calls"] = tool_calls
        if not delta and finish is None and usage is None:
            return []
        if index not in self._opened:
            self._opened.add(index)
            delta = {"role": "assistant", **delta}
        if finish is not None:
            self.finished = True
        return [self.chunk(delta=delta, finish=finish, usage=usage, index=index)]

    def choice(
        self,
        index: int,
        text: str | None,
        reasoning: str | None,
        calls: list[dict[str, Any]] | None,
        finish: str | None,
        usage: dict[str, Any] | None,
    ) -> list[dict[str, Any]]:
        """`emit` for one choice of an event that carries several, and the event's usage: that
        goes out with the choice's finish only."""
        usage = usage if finish is not None else None
        return self.emit(
            content=text,
            reasoning=reasoning,
            tool_calls=calls,
            finish=finish,
            usage=usage,
            index=index,
        )


class Dialect(ABC):
    """One provider format. Subclasses set the class defaults and override what differs."""

    name: ClassVar[str]
    framing: ClassVar[Literal["sse", "ndjson"]] = "sse"
    health_check: ClassVar[str] = ""
    choices_path: ClassVar[str] = "choices"
    content_path: ClassVar[str] = "message.content"
    max_tokens_field: ClassVar[str] = "max_tokens"
    auth_header: ClassVar[str] = "Authorization"  # the header a key goes in by default
    speaks: ClassVar[str | None] = None  # the client API that is this format, if any
    # Whether a trailing assistant message is continued (a prefill) rather than answered.
    prefill: ClassVar[bool] = False

    def url(self, endpoint: str, model: str, stream: bool) -> str:
        """The URL to POST to (some formats put the model or the stream flag in it)."""
        return endpoint

    def needs_model(self, endpoint: str) -> bool:
        """Whether a request to `endpoint` must name a model (in its body or its URL): a
        provider that knows none is then skipped rather than sent a request without one."""
        return True

    def model_in_url(self, endpoint: str) -> bool:
        """Whether `url` puts the model in a path segment of `endpoint`'s URL (then a model
        whose `path_model` would not stay one segment, `convert.one_segment`, is never
        sent)."""
        return False

    def path_model(self, model: str) -> str:
        """What of a model's name `url` puts in the path."""
        return model

    def headers(self) -> dict[str, str]:
        """Fixed headers the format needs besides auth and content type."""
        return {}

    def stream_headers(self) -> dict[str, str]:
        """Headers the format needs on stream requests only, on top of `headers()`."""
        return {}

    def for_endpoint(self, endpoint: str) -> Dialect:
        """The dialect for one provider's endpoint: a format that has several API versions
        (Minimax v1 and v2) picks one from the URL; most formats are themselves."""
        return self

    @abstractmethod
    def body(
        self,
        request: dict[str, Any],
        model: str,
        stream: bool,
        max_tokens_field: str,
    ) -> dict[str, Any]:
        """The provider's request body for an OpenAI chat request."""

    def native_body(self, request: dict[str, Any], model: str, stream: bool) -> dict[str, Any]:
        """The body for a request that arrived in the client API this format is (`speaks`):
        the request as it came, with this provider's model and the stream flag."""
        body = {k: v for k, v in request.items() if k != "agent_reach"}
        if model:
            body["model"] = model
        body["stream"] = stream
        return body

    def home(self, body: dict[str, Any], origin: str | None) -> dict[str, Any]:
        """A native body with the reasoning artifacts of earlier turns sorted for the provider
        whose origin is `origin` (`artifacts.homed`); None: all left out, for a provider that
        refused them (`artifact_rejected`)."""
        return body

    def count_url(self, endpoint: str) -> str | None:
        """Where the format counts a request's input tokens (Messages' `count_tokens`), if
        anywhere."""
        return None

    def count_body(self, request: dict[str, Any], model: str) -> dict[str, Any]:
        """The body that asks `count_url` to count `request` (in the format's own API)."""
        return self.native_body(request, model, False)

    def left_out(self, request: dict[str, Any]) -> tuple[str, ...]:
        """What `native_body` leaves out of `request` (names for `X-Agent-Reach-Dropped`)."""
        return ()

    def error_of(self, body: Any) -> ErrorInfo | None:
        """The error a provider reported in `body`, if any."""
        return openai_error(body)

    @abstractmethod
    def normalize(self, raw: Any, ctx: Context) -> dict[str, Any]:
        """The provider's JSON answer as an OpenAI `chat.completion` (raises `Mismatch`)."""

    def plain(self, raw: Any, shape: Shape) -> bool | None:
        """For an answer that is its own normalization, read at `shape`, but for nulls OpenAI's
        schema requires (and with nothing in it `completion.malformed` refuses): those nulls
        added to it, and whether it lacked none. None for any other answer (`normalize` it)."""
        return None

    @abstractmethod
    def decoder(self, ctx: Context) -> Decoder:
        """A fresh stream decoder for one attempt."""


class Verbatim(dict[str, Any]):
    """A provider's answer (or stream chunk) as parsed, with the bytes it was parsed from
    (`raw`), when those say exactly it: a face sends them as they are rather than serializing
    the dict again. A decoder gives a chunk so only when it needs no change and holds text at
    most (no tool call, reasoning or usage), so nothing in it is left to check."""

    __slots__ = ("raw",)
    raw: bytes

    @classmethod
    def of(cls, parsed: dict[str, Any], raw: bytes) -> Verbatim:
        made = cls(parsed)  # no __init__ of its own: this runs once per stream chunk
        made.raw = raw
        return made


def loads(data: bytes) -> Any:
    """Parse JSON or raise `Mismatch` with a short reason."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise Mismatch(f"invalid JSON: {exc}") from None


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
