"""Anthropic's Messages API: `POST https://api.anthropic.com/v1/messages`.

Every request carries the header `anthropic-version: 2023-06-01`; the key goes in `x-api-key`
(the default `auth_header` of this format). The body takes the system prompt as a top-level
`system`, and `max_tokens` is required: it is always sent, 4096 when the request sets no cap (a
`max_tokens_field` other than `max_tokens` gets the request's cap as well). Turns of one role
in a row are joined (tool results of one step become one user turn of `tool_result` blocks;
assistant tool calls become `tool_use` blocks); images are `image` blocks (base64 for `data:`
URLs, else by URL). `temperature` is clamped to Anthropic's [0, 1]; `stop` becomes
`stop_sequences`; OpenAI tools become `{name, description, input_schema}` and `tool_choice`
maps to auto/any/none/tool.

The answer is a list of content blocks: `text` blocks make the content, `thinking` blocks the
`reasoning_content`, `tool_use` blocks OpenAI `tool_calls` (their `input` serialized to a JSON
string). `stop_reason` maps end_turn/stop_sequence → stop, max_tokens → length, tool_use →
tool_calls, refusal → content_filter. Usage counts cached input tokens as prompt tokens.

The stream is named SSE events without `[DONE]`: message_start, content_block_start/delta/stop
(text_delta, thinking_delta, input_json_delta), ping (ignored), message_delta (stop_reason and
usage; the answer is complete here), message_stop. An `error` event ends the stream as a
provider error. Error bodies are `{"type": "error", "error": {"type", "message"}}`:
authentication_error → 401, permission_error → 403, rate_limit_error → 429, api_error → 500,
overloaded_error → 529, …

The other direction, for clients that speak Messages to the proxy (Claude Code, protocol §10.1):
`read_request` reads a Messages request as the engine's chat request (an `Inbound` naming what
a chat provider will not see), `message_of` renders a `chat.completion` as a Messages `message`,
`MessageEvents` turns chat chunks into the Messages stream events, and `estimate_tokens` is the
local count behind `count_tokens` (when no provider of this format counts, `count_body`). A
provider of this format gets a Messages request natively (`native_body`): as it came, thinking
blocks, `cache_control` and unknown fields kept, Claude Code's `system` turns folded into
`system`, and a `metadata.user_id` only where the endpoint takes it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import urlsplit

from ..chat import completion
from ..chat.checks import (
    BOOLEAN,
    INT32_MAX,
    INT64_MAX,
    NAME,
    OBJECT,
    STRING,
    STRINGS,
    TOKENS,
    Check,
    array_of,
    check_fields,
    either,
    integer,
    number,
    refused,
    shape,
    tagged,
)
from ..core.errors import RequestError
from ..core.outcomes import ErrorInfo
from .artifacts import homed
from .base import Context, Decoder, Dialect, Inbound, Mismatch, ProviderError, loads, openai_error
from .convert import (
    arguments_of,
    bounded,
    cache_mark,
    content_at,
    data_url,
    functions_of,
    is_default_shape,
    marked_parts,
    max_tokens_of,
    merge_turns,
    model_of,
    object_at,
    put_max_tokens,
    require_object,
    split_system,
    stop_list,
    text_of,
    tool_call,
    tool_choice_of,
    turns_last,
)
from .tokens import input_tokens

VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 4096

_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}
_TOOL_CHOICE = {"auto": "auto", "required": "any", "none": "none", "function": "tool"}


def _blocks(content: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for kind, value, mark in marked_parts(content):
        if kind == "text":
            block: dict[str, Any] = {"type": "text", "text": value}
        else:
            inline = data_url(value)
            source: dict[str, str] = (
                {"type": "base64", "media_type": inline[0], "data": inline[1]}
                if inline
                else {"type": "url", "url": value}
            )
            block = {"type": "image", "source": source}
        if mark is not None:
            block["cache_control"] = mark
        out.append(block)
    return out


def _turns(messages: list[dict[str, Any]]) -> Iterator[tuple[str, list[Any]]]:
    for m in messages:
        role = m.get("role")
        if role == "tool":
            result = {
                "type": "tool_result",
                "tool_use_id": str(m.get("tool_call_id") or ""),
                "content": text_of(m.get("content")) or "",
            }
            mark = cache_mark(m.get("content"))
            if mark is not None:
                result["cache_control"] = mark
            yield "user", [result]
        elif role == "assistant":
            blocks = _blocks(m.get("content"))
            for call in m.get("tool_calls") or ():
                fn = call.get("function") if isinstance(call, dict) else None
                if isinstance(fn, dict):
                    blocks.append(
                        {
                            "type": "tool_use",
                            "id": str(call.get("id") or ""),
                            "name": str(fn.get("name", "")),
                            "input": arguments_of(call),
                        }
                    )
            yield "assistant", blocks
        else:
            yield "user", _blocks(m.get("content"))


def _messages(turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for role, blocks in merge_turns(_turns(turns)):
        single_text = len(blocks) == 1 and blocks[0]["type"] == "text"
        out.append({"role": role, "content": blocks[0]["text"] if single_text else blocks})
    return out


def _is_unsigned(block: Any) -> bool:
    return (
        isinstance(block, dict) and block.get("type") == "thinking" and not block.get("signature")
    )


def _unsigned(message: Any) -> bool:
    content = message.get("content") if isinstance(message, dict) else None
    return isinstance(content, list) and any(_is_unsigned(b) for b in content)


def _without_unsigned(message: dict[str, Any]) -> dict[str, Any]:
    return {**message, "content": [b for b in message["content"] if not _is_unsigned(b)]}


def _homed(message: Any, origin: str | None) -> Any:
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list):
        return message
    kept = homed(content, origin)
    return message if kept is content else {**message, "content": kept}


def _marked_system(request: dict[str, Any], text: str) -> str | list[dict[str, Any]]:
    """The top-level `system` of a chat request whose system text is `text`: one text block
    with the last `cache_control` of its system and developer messages, if any."""
    messages = request.get("messages")
    turns = messages if isinstance(messages, list) else ()
    marks = [cache_mark(m.get("content")) for m in turns if _role(m) in ("system", "developer")]
    mark = next((m for m in reversed(marks) if m is not None), None)
    return text if mark is None else [{"type": "text", "text": text, "cache_control": mark}]


def _role(message: Any) -> Any:
    return message.get("role") if isinstance(message, dict) else None


def _fold_system(body: dict[str, Any]) -> dict[str, Any]:
    """`body` with the text of its `system` turns appended to its top-level `system`."""
    system = body.get("system")
    blocks: list[Any] = list(system) if isinstance(system, list) else []
    if isinstance(system, str) and system:
        blocks.append({"type": "text", "text": system})
    turns = []
    for m in body["messages"]:
        if _role(m) != "system":
            turns.append(m)
            continue
        content = m.get("content")
        if isinstance(content, str):
            blocks.append({"type": "text", "text": content})
        elif isinstance(content, list):
            blocks += [b for b in content if isinstance(b, dict) and b.get("type") == "text"]
    return {**body, "system": blocks, "messages": turns}


def _tool_choice(request: dict[str, Any]) -> dict[str, Any] | None:
    choice = tool_choice_of(request)
    out: dict[str, Any] | None = None
    if choice is not None:
        mode, name = choice
        out = {"type": _TOOL_CHOICE[mode]}
        if name:
            out["name"] = name
    if request.get("parallel_tool_calls") is False and (out or {}).get("type") != "none":
        out = {"type": "auto", **(out or {}), "disable_parallel_tool_use": True}
    return out


# Messages usage's cache counts → chat usage's `prompt_tokens_details` (`cache_write_tokens` is
# the Responses API's name; chat has none of its own).
_CACHE_FIELDS = {
    "cache_read_input_tokens": "cached_tokens",
    "cache_creation_input_tokens": "cache_write_tokens",
}


def _usage(value: Any) -> dict[str, Any] | None:
    """Anthropic usage: `input_tokens` leaves out cached tokens, which OpenAI counts."""
    if not isinstance(value, dict):
        return None
    inputs = [
        value[k]
        for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
        if isinstance(value.get(k), int)
    ]
    out: dict[str, Any] | None = completion.usage(
        sum(inputs) if inputs else None, value.get("output_tokens")
    )
    details = {
        chat: value[key]
        for key, chat in _CACHE_FIELDS.items()
        if isinstance(value.get(key), int) and value[key]
    }
    if out is not None and details:
        out["prompt_tokens_details"] = details
    return out


class Anthropic(Dialect):
    """Anthropic's Messages format: Anthropic's own endpoint (`official`), or one of the
    compatible endpoints (DeepSeek, Kimi, Z.ai, …), which refuse a `metadata.user_id` such as
    Claude Code's (`for_endpoint`)."""

    name = "anthropic"
    auth_header = "x-api-key"
    choices_path = "content"
    content_path = "text"
    speaks = "messages"
    prefill = True

    def __init__(self, official: bool = True) -> None:
        self.official = official

    def for_endpoint(self, endpoint: str) -> Dialect:
        return DIALECT if urlsplit(endpoint).hostname == "api.anthropic.com" else COMPATIBLE

    def headers(self) -> dict[str, str]:
        return {"anthropic-version": VERSION}

    def count_url(self, endpoint: str) -> str | None:
        """`…/v1/messages/count_tokens` beside a `…/messages` endpoint."""
        base, sep, query = endpoint.partition("?")
        if not base.rstrip("/").endswith("/messages"):
            return None
        return base.rstrip("/") + "/count_tokens" + sep + query

    def count_body(self, request: dict[str, Any], model: str) -> dict[str, Any]:
        """The `count_tokens` body of a Messages request, as `native_body` would send it."""
        body = self.native_body(request, model, False)
        return {k: v for k, v in body.items() if k in _COUNTED}

    def takes_user_id(self, user_id: Any) -> bool:
        """Whether `metadata.user_id` may be sent: to Anthropic, any; elsewhere only one of
        the characters DeepSeek's endpoint allows (Claude Code's JSON is refused)."""
        return isinstance(user_id, str) and (self.official or bool(_USER_ID.fullmatch(user_id)))

    def left_out(self, request: dict[str, Any]) -> tuple[str, ...]:
        user_id = object_at(request, "metadata").get("user_id")
        return () if user_id is None or self.takes_user_id(user_id) else ("metadata.user_id",)

    def body(
        self, request: dict[str, Any], model: str, stream: bool, max_tokens_field: str
    ) -> dict[str, Any]:
        system, turns = split_system(request.get("messages"))
        cap = max_tokens_of(request)
        body: dict[str, Any] = {
            "messages": _messages(turns),
            "max_tokens": cap if isinstance(cap, int) and cap > 0 else DEFAULT_MAX_TOKENS,
            "stream": stream,
        }
        if model:
            body["model"] = model
        put_max_tokens(request, body, max_tokens_field, {"max_tokens": None})  # set above
        if system:
            body["system"] = _marked_system(request, system)
        for key in ("temperature", "top_p"):
            value = bounded(request.get(key), 0.0, 1.0)
            if value is not None:
                body[key] = value
        if isinstance(request.get("top_k"), int):
            body["top_k"] = request["top_k"]
        stop = stop_list(request)
        if stop:
            body["stop_sequences"] = stop
        tools = functions_of(request)
        if tools:
            body["tools"] = [
                {
                    "name": t["name"],
                    "description": t["description"],
                    "input_schema": t["parameters"],
                }
                for t in tools
            ]
            choice = _tool_choice(request)
            if choice:
                body["tool_choice"] = choice
        if self.takes_user_id(request.get("user")):
            body["metadata"] = {"user_id": request["user"]}
        return turns_last(body)

    def native_body(self, request: dict[str, Any], model: str, stream: bool) -> dict[str, Any]:
        """The Messages request as it came, except: thinking blocks without a signature (a
        chat provider's reasoning that `message_of` rendered, which Anthropic would refuse as
        forged) are left out; `system` turns inside `messages` (Claude Code's) go to the end of
        the top-level `system`, as Anthropic and vLLM take only user and assistant turns; a
        `metadata.user_id` the endpoint refuses is left out (`left_out`)."""
        body = super().native_body(request, model, stream)
        messages = body.get("messages")
        if isinstance(messages, list) and any(_unsigned(m) for m in messages):
            body["messages"] = [_without_unsigned(m) if _unsigned(m) else m for m in messages]
        if isinstance(messages, list) and any(_role(m) == "system" for m in messages):
            body = _fold_system(body)
        if self.left_out(body):
            metadata = {k: v for k, v in body["metadata"].items() if k != "user_id"}
            body["metadata"] = metadata
            if not metadata:
                del body["metadata"]
        return body

    def home(self, body: dict[str, Any], origin: str | None) -> dict[str, Any]:
        """The `thinking` and `redacted_thinking` blocks of every turn, sorted."""
        messages = body.get("messages")
        if not isinstance(messages, list):
            return body
        return {**body, "messages": [_homed(m, origin) for m in messages]}

    def error_of(self, body: Any) -> ErrorInfo | None:
        err = body.get("error") if isinstance(body, dict) else None
        if isinstance(err, dict) and (body.get("type") == "error" or err.get("type") in _STATUS):
            kind = err.get("type")
            code = kind if isinstance(kind, str) else None
            status = _STATUS.get(code) if code else None
            return ErrorInfo(str(err.get("message") or code or err), code, status)
        return openai_error(body)

    def normalize(self, raw: Any, ctx: Context) -> dict[str, Any]:
        raw = require_object(raw)
        if is_default_shape(ctx.shape, (self.choices_path, self.content_path)):
            blocks = raw.get("content")
            if not isinstance(blocks, list):
                raise Mismatch("no content blocks")
            message, finish = self._message(blocks, raw.get("stop_reason"))
        else:
            _, text = content_at(raw, ctx.shape)
            message = completion.message(text)
            finish = completion.finish_reason(raw.get("stop_reason"))
        return completion.completion(
            id=raw["id"] if isinstance(raw.get("id"), str) and raw["id"] else None,
            model=model_of(raw, ctx),
            created=ctx.created,
            choices=[completion.choice(message, finish)],
            usage=_usage(raw.get("usage")),
        )

    @staticmethod
    def _message(blocks: list[Any], stop_reason: Any) -> tuple[dict[str, Any], str | None]:
        text, thinking, calls = [], [], []
        for b in blocks:
            kind = b.get("type") if isinstance(b, dict) else None
            if kind == "text" and isinstance(b.get("text"), str):
                text.append(b["text"])
            elif kind == "thinking" and isinstance(b.get("thinking"), str):
                thinking.append(b["thinking"])
            elif kind == "tool_use" and isinstance(b.get("name"), str):
                calls.append(tool_call(str(b.get("id") or ""), b["name"], b.get("input")))
        content = "".join(text)
        message = completion.message(
            content if content or not calls else None,
            tool_calls=calls,
            reasoning="".join(thinking) or None,
        )
        finish = completion.finish_reason(stop_reason)
        return message, "tool_calls" if calls and finish == "stop" else finish

    def decoder(self, ctx: Context) -> Decoder:
        return AnthropicDecoder(ctx, self)


class AnthropicDecoder(Decoder):
    """Anthropic's named stream events as OpenAI chunks."""

    def __init__(self, ctx: Context, dialect: Dialect) -> None:
        super().__init__(ctx, dialect)
        self.tools: dict[int, int] = {}  # content block index → tool call index
        self.usage: dict[str, Any] = {}  # message_start's usage, updated by message_delta

    def feed(self, event: str | None, data: bytes) -> list[dict[str, Any]]:
        obj = loads(data)
        if not isinstance(obj, dict):
            raise Mismatch("stream event is not a JSON object")
        kind = obj.get("type") or event
        if kind == "error" or event == "error":
            raise ProviderError(self.dialect.error_of(obj) or ErrorInfo(str(obj)[:300]))
        if kind == "message_start":
            msg = object_at(obj, "message")
            if isinstance(msg.get("id"), str) and msg["id"]:
                self.id = msg["id"]
            if isinstance(msg.get("model"), str) and msg["model"]:
                self.model = msg["model"]
            if isinstance(msg.get("usage"), dict):
                self.usage.update(msg["usage"])
            return []
        if kind == "content_block_start":
            return self._block_start(obj)
        if kind == "content_block_delta":
            return self._block_delta(obj)
        if kind == "message_delta":
            delta = object_at(obj, "delta")
            if isinstance(obj.get("usage"), dict):
                self.usage.update({k: v for k, v in obj["usage"].items() if v is not None})
            finish = completion.finish_reason(delta.get("stop_reason"))
            if self.tools and finish == "stop":
                finish = "tool_calls"
            return self.emit(finish=finish, usage=_usage(self.usage))
        if kind == "message_stop":
            self.finished = True
        return []  # ping, content_block_stop, and events this version does not know

    def _block_start(self, obj: dict[str, Any]) -> list[dict[str, Any]]:
        block = object_at(obj, "content_block")
        kind = block.get("type")
        if kind == "tool_use":
            n = len(self.tools)
            self.tools[obj.get("index", n)] = n
            call = tool_call(str(block.get("id") or ""), str(block.get("name", "")), "")
            return self.emit(tool_calls=[{"index": n, **call}])
        if kind == "text":
            return self.emit(content=block.get("text") or None)
        if kind == "thinking":
            return self.emit(reasoning=block.get("thinking") or None)
        return []

    def _block_delta(self, obj: dict[str, Any]) -> list[dict[str, Any]]:
        delta = object_at(obj, "delta")
        kind = delta.get("type")
        if kind == "text_delta" and isinstance(delta.get("text"), str):
            return self.emit(content=delta["text"])
        if kind == "thinking_delta" and isinstance(delta.get("thinking"), str):
            return self.emit(reasoning=delta["thinking"])
        if kind == "input_json_delta" and delta.get("partial_json"):
            n = self.tools.get(obj.get("index", -1))
            if n is None:
                raise Mismatch("input_json_delta for a block that is not a tool_use")
            piece = {"index": n, "function": {"arguments": str(delta["partial_json"])}}
            return self.emit(tool_calls=[piece])
        return []  # signature_delta and others carry nothing for OpenAI


DIALECT = Anthropic()
COMPATIBLE = Anthropic(official=False)


# ---------------------------------------------------------------------------------------------
# Inbound: a client that speaks Messages to the proxy (protocol §10.1).

# Fields `read_request` translates or looks at; any other top-level field is only for a
# provider of this format and is named in `Inbound.dropped`.
_READ = frozenset(
    {
        "model",
        "messages",
        "max_tokens",
        "system",
        "stream",
        "temperature",
        "top_p",
        "top_k",
        "stop_sequences",
        "metadata",
        "thinking",
        "tools",
        "tool_choice",
        "agent_reach",
    }
)
_TEXT = shape({"text": STRING}, ("text",))
_IMAGE = shape({"source": OBJECT}, ("source",))
_BLOCKS = "a string or an array of content blocks"
# Content blocks of types not named here (documents, server tool results, …) pass.
BLOCK = tagged(
    "type",
    {
        "text": _TEXT,
        "image": _IMAGE,
        "tool_use": shape({"id": STRING, "name": NAME, "input": OBJECT}, ("id", "name", "input")),
        "tool_result": shape(
            {
                "tool_use_id": STRING,
                "content": either(
                    STRING,
                    array_of(tagged("type", {"text": _TEXT, "image": _IMAGE}, "a block"), ""),
                    expected=_BLOCKS,
                ),
                "is_error": BOOLEAN,
            },
            ("tool_use_id",),
        ),
        "thinking": shape({"thinking": STRING, "signature": STRING}),
    },
    "an object with a 'type'",
)
_MESSAGE = shape({"content": either(STRING, array_of(BLOCK, ""), expected=_BLOCKS)}, ("content",))
_CHOICE = shape({"disable_parallel_tool_use": BOOLEAN})
# The Messages request, field by field (`messages` and, but for count_tokens, `max_tokens`
# are also required). `system` is a role too: Claude Code sends system messages mid-way.
FIELDS: Mapping[str, Check] = {
    "model": STRING,
    "messages": array_of(
        tagged(
            "role",
            dict.fromkeys(("user", "assistant", "system"), _MESSAGE),
            "an object with a 'role'",
            closed=True,
        ),
        "a non-empty array of messages",
        nonempty=True,
    ),
    "max_tokens": TOKENS,
    "system": either(
        STRING,
        array_of(tagged("type", {"text": _TEXT}, "a text block"), ""),
        expected="a string or an array of text blocks",
    ),
    "temperature": number(0, 1),
    "top_p": number(0, 1),
    "top_k": integer(0, INT32_MAX),
    "stop_sequences": STRINGS,
    "stream": BOOLEAN,
    "metadata": shape({"user_id": STRING}),
    "tools": array_of(
        tagged(
            "type",
            {
                "custom": shape(
                    {"name": NAME, "description": STRING, "input_schema": OBJECT},
                    ("name", "input_schema"),
                )
            },
            "an object",  # server tools (web_search_20250305, …) pass (then dropped)
            default="custom",
        ),
        "an array of tools",
    ),
    "tool_choice": tagged(
        "type",
        {
            "auto": _CHOICE,
            "any": _CHOICE,
            "none": _CHOICE,
            "tool": shape({"name": NAME, "disable_parallel_tool_use": BOOLEAN}, ("name",)),
        },
        "an object with a 'type'",
    ),
    # adaptive, disabled and types to come pass
    "thinking": tagged(
        "type",
        {"enabled": shape({"budget_tokens": integer(1024, INT64_MAX)}, ("budget_tokens",))},
        "an object",
    ),
    "service_tier": STRING,
}
_BILLING = "x-anthropic-billing-header:"
_TOOL_FIELDS = frozenset({"type", "name", "description", "input_schema"})
_CHAT_TOOL_CHOICE = {"auto": "auto", "any": "required", "none": "none"}
_STOP_REASON = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}
_UNSAFE_ID = re.compile(r"[^A-Za-z0-9_-]")
# The fields `count_tokens` takes.
_COUNTED = frozenset({"model", "messages", "system", "tools", "tool_choice", "thinking"})
_USER_ID = re.compile(r"[A-Za-z0-9_-]+")  # what DeepSeek's Anthropic endpoint allows
_JOIN = "\n\n"  # text blocks of one turn become one chat text, as paragraphs


def read_request(request: Any) -> Inbound:
    """A Messages request as the engine's chat request; `RequestError` (a 400) names what is
    wrong. What a chat provider cannot be sent is named in `dropped`: top-level fields
    (`top_k`, `thinking`, `service_tier`, …), block types (`thinking`, `document`, …),
    `cache_control`, server tools as `tools:<name>`, tool fields as `tool.<field>` and
    tool_result parts as `tool_result:<what>`."""
    messages = _checked(request, ("messages", "max_tokens"))
    dropped: dict[str, None] = dict.fromkeys(k for k in request if k not in _READ)
    body: dict[str, Any] = {"messages": _conversation(request, messages, dropped, False)}
    for key in ("model", "max_tokens", "temperature", "top_p", "agent_reach"):
        if request.get(key) is not None:
            body[key] = request[key]
    if request.get("stream") is True:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    stop = request.get("stop_sequences")
    if isinstance(stop, list) and stop:
        body["stop"] = [s for s in stop if isinstance(s, str)]
    user = object_at(request, "metadata").get("user_id")
    if isinstance(user, str) and user:
        body["user"] = user
    if request.get("top_k") is not None:
        dropped["top_k"] = None
    if object_at(request, "thinking").get("type", "disabled") != "disabled":
        dropped["thinking"] = None
    _tools(request, body, dropped)
    marked = None
    if "cache_control" in dropped:
        marked = {**body, "messages": _conversation(request, messages, {}, True)}
    return Inbound(body, tuple(dropped), marked)


def _conversation(
    request: dict[str, Any], messages: list[dict[str, Any]], dropped: dict[str, None], marks: bool
) -> list[dict[str, Any]]:
    """The system prompt and turns as chat messages; with `marks`, text keeps the client's
    `cache_control` (as text parts), for a provider that takes it."""
    chat: list[dict[str, Any]] = []
    system = _system(request.get("system"), dropped, marks)
    if system:
        chat.append({"role": "system", "content": system})
    for m in messages:
        content = m["content"]
        if isinstance(content, str):
            chat.append({"role": m["role"], "content": content})
        elif m["role"] == "system":  # mid-conversation: kept in place (a cached prefix stays)
            chat.append({"role": "system", "content": _texts(content, dropped, "", marks)})
        elif m["role"] == "assistant":
            chat.append(_assistant(content, dropped, marks))
        else:
            chat.extend(_user(content, dropped, marks))
    return chat


def _checked(request: Any, required: tuple[str, ...]) -> list[dict[str, Any]]:
    """The request's messages, after checking its fields (`FIELDS`); `required` must be
    given."""
    if not isinstance(request, dict):
        raise RequestError("the request must be a JSON object")
    for name in required:
        if request.get(name) is None:
            raise refused(name, f"is required: {FIELDS[name].expected}")
    check_fields(request, FIELDS)
    messages: list[dict[str, Any]] = request["messages"]
    return messages


def _part(block: dict[str, Any], marks: bool) -> dict[str, Any]:
    """A text block as a chat text part, with its `cache_control` when `marks`."""
    part = {"type": "text", "text": str(block.get("text", ""))}
    if marks and "cache_control" in block:
        part["cache_control"] = block["cache_control"]
    return part


def _plain(parts: list[dict[str, Any]]) -> bool:
    return all(p["type"] == "text" and "cache_control" not in p for p in parts)


def _texts(
    blocks: list[Any], dropped: dict[str, None], where: str = "", marks: bool = False
) -> str | list[dict[str, Any]]:
    """The text of `text` blocks joined (as parts when `marks` keeps a `cache_control`);
    other blocks named in `dropped` (with `where`)."""
    parts = []
    for b in blocks:
        if not isinstance(b, dict):
            continue
        if "cache_control" in b:
            dropped["cache_control"] = None
        if b.get("type") == "text":
            parts.append(_part(b, marks))
        else:
            dropped[f"{where}{b.get('type')}"] = None
    return _JOIN.join(p["text"] for p in parts) if _plain(parts) else parts


def _system(system: Any, dropped: dict[str, None], marks: bool) -> str | list[dict[str, Any]]:
    """The system prompt as one text, without Claude Code's billing line (meant for
    Anthropic, noise to any other model)."""
    if isinstance(system, list):
        blocks = [
            b
            for b in system
            if not (isinstance(b, dict) and str(b.get("text", "")).startswith(_BILLING))
        ]
        return _texts(blocks, dropped, "", marks)
    return system or ""


def _image_url(block: dict[str, Any]) -> str | None:
    source = object_at(block, "source")
    if source.get("type") == "base64" and isinstance(source.get("data"), str):
        return f"data:{source.get('media_type') or 'image/png'};base64,{source['data']}"
    url = source.get("url")
    return url if source.get("type") == "url" and isinstance(url, str) else None


def _user(
    blocks: list[dict[str, Any]], dropped: dict[str, None], marks: bool
) -> list[dict[str, Any]]:
    """A user turn: its tool results first (chat wants them right after the calls), then
    one user message with the rest."""
    out: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for b in blocks:
        if "cache_control" in b:
            dropped["cache_control"] = None
        kind = b["type"]
        if kind == "tool_result":
            result = b.get("content")
            text: str | list[dict[str, Any]] = result if isinstance(result, str) else ""
            if isinstance(result, list):
                text = _texts(result, dropped, "tool_result:", marks)
            if marks and "cache_control" in b and isinstance(text, str):
                text = [_part({"text": text, "cache_control": b["cache_control"]}, marks)]
            if b.get("is_error"):
                dropped["tool_result:is_error"] = None
            out.append(
                {"role": "tool", "tool_call_id": str(b.get("tool_use_id") or ""), "content": text}
            )
        elif kind == "text":
            parts.append(_part(b, marks))
        elif kind == "image" and (url := _image_url(b)):
            parts.append({"type": "image_url", "image_url": {"url": url}})
        else:
            dropped[kind] = None
    if parts or not out:  # a turn of dropped blocks only stays a turn: the roles still alternate
        content: Any = _JOIN.join(p["text"] for p in parts) if _plain(parts) else parts
        out.append({"role": "user", "content": content})
    return out


def _assistant(
    blocks: list[dict[str, Any]], dropped: dict[str, None], marks: bool
) -> dict[str, Any]:
    parts, calls = [], []
    for b in blocks:
        if "cache_control" in b:
            dropped["cache_control"] = None
        kind = b["type"]
        if kind == "text":
            parts.append(_part(b, marks))
        elif kind == "tool_use":
            calls.append(tool_call(str(b.get("id") or ""), str(b.get("name", "")), b.get("input")))
        else:
            dropped[kind] = None  # thinking, redacted_thinking, server tool blocks, …
    content: Any = _JOIN.join(p["text"] for p in parts) if _plain(parts) else parts
    message: dict[str, Any] = {
        "role": "assistant",
        "content": content if parts else None if calls else "",
    }
    if calls:
        message["tool_calls"] = calls
    return message


def _tools(request: dict[str, Any], body: dict[str, Any], dropped: dict[str, None]) -> None:
    """Custom tools as chat functions, and `tool_choice`; server tools are named dropped."""
    tools: list[dict[str, Any]] = []
    for t in request.get("tools") or ():
        if t.get("type", "custom") != "custom":
            dropped[f"tools:{t.get('name') or t.get('type')}"] = None
            continue
        for key in t:
            if key not in _TOOL_FIELDS:
                dropped["cache_control" if key == "cache_control" else f"tool.{key}"] = None
        schema = t.get("input_schema")
        fn: dict[str, Any] = {
            "name": t["name"],
            "parameters": schema if isinstance(schema, dict) else {"type": "object"},
        }
        if isinstance(t.get("description"), str):
            fn["description"] = t["description"]
        tools.append({"type": "function", "function": fn})
    choice = object_at(request, "tool_choice")
    kind = choice.get("type")
    if not tools:
        if kind in ("any", "tool"):
            dropped["tool_choice"] = None
        return
    body["tools"] = tools
    if kind in _CHAT_TOOL_CHOICE:
        body["tool_choice"] = _CHAT_TOOL_CHOICE[kind]
    elif kind == "tool":
        if any(t["function"]["name"] == choice.get("name") for t in tools):
            body["tool_choice"] = {"type": "function", "function": {"name": choice["name"]}}
        else:
            dropped["tool_choice"] = None
    if choice.get("disable_parallel_tool_use") is True and kind != "none":
        body["parallel_tool_calls"] = False


def tool_use_id(call_id: Any) -> str:
    """A chat tool call's id as a Messages `toolu_…` id (the characters Anthropic allows);
    the same id always gives the same result, so a conversation's calls and results match."""
    if not isinstance(call_id, str) or not call_id:
        return "toolu_" + completion.random_hex()
    safe = _UNSAFE_ID.sub("_", call_id)
    return safe if safe.startswith("toolu_") else "toolu_" + safe


def stop_reason(finish: Any, tool_calls: bool) -> str:
    """A chat finish reason as a Messages `stop_reason` (tool calls make `end_turn`
    `tool_use`). A chat answer does not say whether a stop sequence ended it: `end_turn`."""
    reason = _STOP_REASON.get(finish, "end_turn") if isinstance(finish, str) else "end_turn"
    return "tool_use" if tool_calls and reason == "end_turn" else reason


def message_usage(value: Any) -> dict[str, int]:
    """Chat usage as Messages usage: prompt tokens read from or written to the cache are not
    `input_tokens` there but `cache_read_input_tokens` and `cache_creation_input_tokens`."""
    usage = value if isinstance(value, dict) else {}
    prompt = usage.get("prompt_tokens")
    output = usage.get("completion_tokens")
    details = object_at(usage, "prompt_tokens_details")
    cache = {
        key: n
        for key, chat in _CACHE_FIELDS.items()
        if isinstance(n := details.get(chat), int) and n > 0
    }
    out = {
        "input_tokens": max((prompt if isinstance(prompt, int) else 0) - sum(cache.values()), 0),
        "output_tokens": output if isinstance(output, int) else 0,
    }
    return out | cache


def _message_id() -> str:
    return "msg_" + completion.random_hex()


def message_of(response: dict[str, Any]) -> dict[str, Any]:
    """A `chat.completion` (its first choice) as a Messages `message`."""
    choice = response["choices"][0]
    msg = choice["message"]
    content: list[dict[str, Any]] = []
    reasoning = msg.get("reasoning_content")
    if isinstance(reasoning, str) and reasoning:
        # No signature: one from a chat provider would be a forgery (see `native_body`).
        content.append({"type": "thinking", "thinking": reasoning, "signature": ""})
    text = text_of(msg.get("content")) or msg.get("refusal")
    if isinstance(text, str) and text:
        content.append({"type": "text", "text": text})
    calls = msg.get("tool_calls") or ()
    for call in calls:
        fn = object_at(call, "function")
        content.append(
            {
                "type": "tool_use",
                "id": tool_use_id(call.get("id")),
                "name": str(fn.get("name", "")),
                "input": arguments_of(call),
            }
        )
    return {
        "id": _message_id(),
        "type": "message",
        "role": "assistant",
        "model": response.get("model") or "unknown",
        "content": content,
        "stop_reason": stop_reason(choice.get("finish_reason"), bool(calls)),
        "stop_sequence": None,
        "usage": message_usage(response.get("usage")),
    }


Event = tuple[str, dict[str, Any]]


class MessageEvents:
    """Chat chunks as the Messages stream: `feed` each chunk, then `end` once; each returns
    (event name, data) pairs in the order Anthropic sends them (message_start,
    content_block_start, ping, content_block_delta…, content_block_stop, …, message_delta,
    message_stop). A new block closes the one before; a late arguments piece of an earlier
    tool call still goes to that call's block index, which is how SDKs address deltas."""

    def __init__(self) -> None:
        self.started = False
        self.block = -1  # index of the open block, -1 while none is
        self.kind: str | None = None  # the open block's type
        self.tools: dict[int, int] = {}  # chat tool call index → block index
        self.finish: str | None = None
        self.usage: Any = None

    def feed(self, chunk: dict[str, Any]) -> list[Event]:
        out = [] if self.started else self._start(chunk.get("model"))
        if chunk.get("usage") is not None:
            self.usage = chunk["usage"]
        for c in chunk.get("choices") or ():
            if c.get("index", 0) != 0:
                continue  # a Messages answer has one choice
            delta = c.get("delta") or {}
            if delta.get("reasoning_content"):
                out += self._text("thinking", delta["reasoning_content"])
            if delta.get("content"):
                out += self._text("text", delta["content"])
            for call in delta.get("tool_calls") or ():
                out += self._tool(call)
            if c.get("finish_reason"):
                self.finish = c["finish_reason"]
        return out

    def end(self) -> list[Event]:
        out = ([] if self.started else self._start(None)) + self._close()
        delta = {"stop_reason": stop_reason(self.finish, bool(self.tools)), "stop_sequence": None}
        usage = message_usage(self.usage)
        out.append(("message_delta", {"type": "message_delta", "delta": delta, "usage": usage}))
        out.append(("message_stop", {"type": "message_stop"}))
        return out

    def _start(self, model: Any) -> list[Event]:
        self.started = True
        message: dict[str, Any] = {
            "id": _message_id(),
            "type": "message",
            "role": "assistant",
            "model": model if isinstance(model, str) and model else "unknown",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 0, "output_tokens": 0},  # known at message_delta
        }
        return [("message_start", {"type": "message_start", "message": message})]

    def _close(self) -> list[Event]:
        if self.kind is None:
            return []
        self.kind = None
        return [("content_block_stop", {"type": "content_block_stop", "index": self.block})]

    def _open(self, block: dict[str, Any]) -> list[Event]:
        out = self._close()
        self.block += 1
        self.kind = block["type"]
        start = {"type": "content_block_start", "index": self.block, "content_block": block}
        out.append(("content_block_start", start))
        if self.block == 0:
            out.append(("ping", {"type": "ping"}))
        return out

    def _delta(self, index: int, delta: dict[str, Any]) -> Event:
        return (
            "content_block_delta",
            {"type": "content_block_delta", "index": index, "delta": delta},
        )

    def _text(self, kind: str, piece: Any) -> list[Event]:
        if not isinstance(piece, str):
            piece = text_of(piece) or ""
        out: list[Event] = []
        if self.kind != kind:
            empty = {"type": "text", "text": ""}
            if kind == "thinking":
                empty = {"type": "thinking", "thinking": "", "signature": ""}
            out = self._open(empty)
        field = "text" if kind == "text" else "thinking"
        out.append(self._delta(self.block, {"type": f"{field}_delta", field: piece}))
        return out

    def _tool(self, call: dict[str, Any]) -> list[Event]:
        n = call.get("index", 0)
        fn = object_at(call, "function")
        out: list[Event] = []
        if n not in self.tools:
            block = {
                "type": "tool_use",
                "id": tool_use_id(call.get("id")),
                "name": str(fn.get("name") or ""),
                "input": {},
            }
            out = self._open(block)
            self.tools[n] = self.block
        args = fn.get("arguments")
        if isinstance(args, str) and args:
            out.append(
                self._delta(self.tools[n], {"type": "input_json_delta", "partial_json": args})
            )
        return out


def estimate_tokens(request: Any) -> int:
    """`count_tokens`' local estimate of a Messages request's input tokens (no provider is
    asked), after checking its fields: `tokens.input_tokens`."""
    _checked(request, ("messages",))
    return input_tokens(request)
