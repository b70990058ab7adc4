"""What every dialect has in common: its interface, stream framing and shared helpers. Pure.

The helpers cover what several formats do alike: taking the system prompt out of the messages,
joining consecutive turns of one role, reading message parts (text, images), converting tool
definitions and tool calls between OpenAI's shape and the provider's, clamping sampling values
to a provider's range, and filling a model name into an endpoint template.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, ClassVar, Literal
from urllib.parse import quote

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
class Inbound:
    """A client's request in another API (Responses, Messages), read as a chat request.

    `body` is the OpenAI chat request the engine routes (with the client's `agent_reach`
    extension, if any); `dropped` names what a provider that does not speak the client's API
    will not see (hosted tools, thinking blocks, `cache_control`, …), for the
    `X-Agent-Reach-Dropped` header.
    """

    body: dict[str, Any]
    dropped: tuple[str, ...] = ()


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
        obj = loads(data)
        if not isinstance(obj, dict):
            raise Mismatch("stream frame is not a JSON object")
        err = self.dialect.error_of(obj)
        if err is not None or event == "error":
            raise ProviderError(err or ErrorInfo(str(obj)[:300]))
        return obj

    @abstractmethod
    def feed(self, event: str | None, data: bytes) -> list[dict[str, Any]]:
        """The OpenAI chunks for one frame."""

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

    def url(self, endpoint: str, model: str, stream: bool) -> str:
        """The URL to POST to (some formats put the model or the stream flag in it)."""
        return endpoint

    def needs_model(self, endpoint: str) -> bool:
        """Whether a request to `endpoint` must name a model (in its body or its URL): a
        provider that knows none is then skipped rather than sent a request without one."""
        return True

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
    """Message content as text: a string as is, a list of parts joined by their text (parts
    without a `type`, as DashScope's `[{"text": …}]`, count as text)."""
    if isinstance(content, str) or content is None:
        return content
    if isinstance(content, list):
        return "".join(
            str(p.get("text", ""))
            for p in content
            if isinstance(p, dict) and p.get("type", "text") == "text"
        )
    return None


def is_default_shape(shape: Shape, *defaults: tuple[str, str]) -> bool:
    """Whether `shape` is one of a format's default (choices_path, content_path) pairs, so
    that the dialect reads the whole native body instead of one path."""
    return (shape.choices_path, shape.content_path) in defaults


_JSON_KINDS = {list: "an array", str: "a string", int: "a number", float: "a number"}


def require_object(raw: Any) -> dict[str, Any]:
    """`raw` when it is a JSON object; `Mismatch` saying what it is in JSON's words otherwise."""
    if not isinstance(raw, dict):
        kind = "null" if raw is None else "true/false" if isinstance(raw, bool) else None
        raise Mismatch(
            f"expected a JSON object, got {kind or _JSON_KINDS.get(type(raw), 'a value')}"
        )
    return raw


def content_at(raw: Any, shape: Shape) -> tuple[Any, str]:
    """(choice, content) at the shape's paths; `Mismatch` when there is no string there."""
    raw = require_object(raw)
    choice, content = paths.extract(raw, shape.choices_path, shape.content_path)
    content = text_of(content)
    if not isinstance(content, str):
        raise Mismatch(f"no text at {shape.choices_path} → {shape.content_path}")
    return choice, content


def model_of(raw: dict[str, Any], ctx: Context, native: str = "") -> str:
    """The response's model at `model_field` (or at the format's own `native` field, e.g.
    Gemini's `modelVersion`), else the model that was asked for."""
    for path in (ctx.shape.model_field, native):
        value = paths.get(raw, path) if path else None
        if isinstance(value, str) and value:
            return value
    return ctx.model or "unknown"


def loads(data: bytes) -> Any:
    """Parse JSON or raise `Mismatch` with a short reason."""
    import orjson

    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise Mismatch(f"invalid JSON: {exc}") from None


def object_at(value: Any, key: str) -> dict[str, Any]:
    """`value[key]` when `value` is an object and that is an object too, else `{}`."""
    found = value.get(key) if isinstance(value, dict) else None
    return found if isinstance(found, dict) else {}


def with_model(endpoint: str, model: str) -> str:
    """`endpoint` with a `{model}` placeholder filled in (URL-quoted)."""
    return endpoint.replace("{model}", quote(model, safe=""))


def bounded(value: Any, low: float, high: float) -> float | None:
    """A sampling value clamped to a provider's range (None when it is not a number)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return min(max(float(value), low), high)


def stop_list(request: dict[str, Any]) -> list[str] | None:
    """The request's `stop` as a list of strings, or None."""
    stop = request.get("stop")
    if isinstance(stop, str):
        return [stop] if stop else None
    if isinstance(stop, list):
        out = [s for s in stop if isinstance(s, str) and s]
        return out or None
    return None


def split_system(messages: Any) -> tuple[str | None, list[dict[str, Any]]]:
    """(system prompt, the other messages) for formats that take the system prompt apart
    (Anthropic, ERNIE, Gemini, Minimax v1). System and developer messages are joined by a
    blank line, wherever they are; messages that are not objects are dropped."""
    system: list[str] = []
    turns: list[dict[str, Any]] = []
    for m in messages if isinstance(messages, list) else []:
        if not isinstance(m, dict):
            continue
        if m.get("role") in ("system", "developer"):
            text = text_of(m.get("content"))
            if text:
                system.append(text)
        else:
            turns.append(m)
    return ("\n\n".join(system) or None), turns


def merge_turns(turns: Iterable[tuple[str, list[Any]]]) -> list[tuple[str, list[Any]]]:
    """Consecutive turns of one role joined into one (formats that want the roles to
    alternate, or that want all tool results of one step in one turn); empty turns dropped."""
    out: list[tuple[str, list[Any]]] = []
    for role, parts in turns:
        if not parts:
            continue
        if out and out[-1][0] == role:
            out[-1][1].extend(parts)
        else:
            out.append((role, list(parts)))
    return out


def parts_of(content: Any) -> list[tuple[Literal["text", "image"], str]]:
    """Message content as ("text", text) and ("image", url) parts, empty text left out; the
    url is `http(s)://…` or a `data:` URL (see `data_url`)."""
    if isinstance(content, str):
        return [("text", content)] if content else []
    out: list[tuple[Literal["text", "image"], str]] = []
    for p in content if isinstance(content, list) else []:
        if not isinstance(p, dict):
            continue
        kind = p.get("type", "text")
        if kind == "text" and isinstance(p.get("text"), str) and p["text"]:
            out.append(("text", p["text"]))
        elif kind == "image_url":
            image = p.get("image_url")
            url = image.get("url") if isinstance(image, dict) else image
            if isinstance(url, str) and url:
                out.append(("image", url))
    return out


def data_url(url: str) -> tuple[str, str] | None:
    """(media type, base64 data) of a `data:<type>;base64,<data>` URL, else None."""
    if not url.startswith("data:"):
        return None
    head, sep, data = url[5:].partition(",")
    if not sep or not head.endswith(";base64"):
        return None
    return head.removesuffix(";base64") or "application/octet-stream", data


# -- tools -------------------------------------------------------------------------------------


def functions_of(request: dict[str, Any]) -> list[dict[str, Any]]:
    """The request's function tools (and legacy `functions`) as `{name, description,
    parameters}`; `parameters` defaults to an empty object schema."""
    found = [
        t.get("function")
        for t in request.get("tools") or ()
        if isinstance(t, dict) and t.get("type", "function") == "function"
    ]
    found += list(request.get("functions") or ())
    out = []
    for fn in found:
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            continue
        params = fn.get("parameters")
        out.append(
            {
                "name": fn["name"],
                "description": str(fn.get("description") or ""),
                "parameters": params
                if isinstance(params, dict)
                else {"type": "object", "properties": {}},
            }
        )
    return out


def tool_choice_of(request: dict[str, Any]) -> tuple[str, str | None] | None:
    """The request's `tool_choice` as (mode, function name): mode is `auto`, `none`,
    `required` or `function` (then with the name); None when the request sets none."""
    choice = request.get("tool_choice")
    if choice in ("auto", "none", "required"):
        return choice, None
    if isinstance(choice, dict):
        fn = choice.get("function")
        name = fn.get("name") if isinstance(fn, dict) else None
        if isinstance(name, str) and name:
            return "function", name
    return None


def arguments_of(call: Any) -> dict[str, Any]:
    """The arguments of an OpenAI tool call (a JSON string) as an object, for formats that
    take them as one (Anthropic `input`, Gemini `args`); `{}` when they are not an object."""
    fn = call.get("function") if isinstance(call, dict) else None
    args = fn.get("arguments") if isinstance(fn, dict) else None
    if isinstance(args, dict):
        return args
    if isinstance(args, str) and args.strip():
        try:
            value = loads(args.encode())
        except Mismatch:
            return {}
        return value if isinstance(value, dict) else {}
    return {}


def tool_call(id: str, name: str, arguments: Any) -> dict[str, Any]:
    """An OpenAI tool call; `arguments` is kept as a string or serialized to JSON."""
    import orjson

    if not isinstance(arguments, str):
        arguments = orjson.dumps(arguments if arguments is not None else {}).decode()
    return {"id": id, "type": "function", "function": {"name": name, "arguments": arguments}}


def tool_names(messages: Any) -> dict[str, str]:
    """tool_call id → function name, from the assistant messages' `tool_calls`, for formats
    whose tool results name the function rather than the call (Gemini, ERNIE)."""
    names: dict[str, str] = {}
    for m in messages if isinstance(messages, list) else []:
        calls = m.get("tool_calls") if isinstance(m, dict) else None
        for call in calls if isinstance(calls, list) else []:
            fn = call.get("function") if isinstance(call, dict) else None
            if isinstance(fn, dict) and isinstance(call.get("id"), str):
                names[call["id"]] = str(fn.get("name", ""))
    return names


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
