"""OpenAI's Responses API (`POST /v1/responses`), both ways: the wire format of Codex CLI.

As a provider format (`format: responses`, an upstream such as OpenAI itself): a chat request
becomes `input` items (messages keep their roles; assistant tool calls become `function_call`
items; tool results `function_call_output` items), flat function tools, `max_output_tokens`,
`text.format` and `store: false`; the answer's `output` items become one chat message
(`output_text` parts → content, `function_call` items → `tool_calls`, `reasoning` summaries →
`reasoning_content`); its stream of named events becomes chat chunks. A request that arrived
in the Responses API itself goes as it came (`native_body`).

As the API a client speaks (`/v1/responses` in the proxy), the other way round: `request_in`
reads a Responses request as a chat request (`Inbound`), naming what a chat provider cannot
take (hosted tools such as `web_search`, `reasoning` items and effort, `input_file` parts);
`answer_out` renders a chat completion as a `response` object; `StreamOut` renders chat
chunks as the Responses event sequence, with `sequence_number`s, ending in
`response.completed` (or `response.failed` after a cut).

Every object built here validates against the official schemas (`Response`,
`ResponseStreamEvent`), which ask for more than the SDK: `output_text` parts carry
`logprobs`, usage carries `input_tokens_details.cache_write_tokens`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from ..chat import completion
from ..chat.checks import (
    BOOLEAN,
    INT64,
    INT64_MAX,
    NAME,
    OBJECT,
    STRING,
    STRINGS,
    Check,
    array_of,
    check_fields,
    either,
    integer,
    number,
    one_of,
    refused,
    shape,
    tagged,
)
from ..core.outcomes import ErrorInfo
from .artifacts import homed
from .base import Context, Decoder, Dialect, Inbound, Mismatch, ProviderError, openai_error
from .convert import (
    content_at,
    functions_of,
    is_default_shape,
    model_of,
    object_at,
    parts_of,
    put_max_tokens,
    text_of,
    tool_call,
    tool_choice_of,
    turns_last,
)

# Request fields a chat provider gets in its own words (everything else is Responses-only).
_SAMPLING = ("temperature", "top_p", "parallel_tool_calls", "user")
_FINISH = {"max_output_tokens": "length", "content_filter": "content_filter"}
_INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}
_CACHE_DETAILS = ("cached_tokens", "cache_write_tokens")  # usage's, the same in chat


def new_id(prefix: str) -> str:
    """A fresh id such as `resp_…`, `msg_…`, `fc_…`, `rs_…`."""
    return f"{prefix}_{completion.random_hex()}"


# ---------------------------------------------------------------------------------------------
# Chat → Responses (the provider direction)


def _input_parts(content: Any, role: str) -> list[dict[str, Any]]:
    text_type = "output_text" if role == "assistant" else "input_text"
    out: list[dict[str, Any]] = []
    for kind, value in parts_of(content):
        if kind == "text":
            out.append({"type": text_type, "text": value})
        else:
            out.append({"type": "input_image", "image_url": value})
    return out


def _items(messages: Any) -> Iterator[dict[str, Any]]:
    for m in messages if isinstance(messages, list) else []:
        if not isinstance(m, dict):
            continue
        role = m.get("role")
        if role == "tool":
            output = text_of(m.get("content")) or ""
            yield {
                "type": "function_call_output",
                "call_id": str(m.get("tool_call_id") or ""),
                "output": output,
            }
            continue
        role = role if role in ("user", "assistant", "system", "developer") else "user"
        parts = _input_parts(m.get("content"), role)
        if parts:
            yield {"type": "message", "role": role, "content": parts}
        for call in m.get("tool_calls") or () if role == "assistant" else ():
            fn = call.get("function") if isinstance(call, dict) else None
            if isinstance(fn, dict):
                args = fn.get("arguments")
                yield {
                    "type": "function_call",
                    "call_id": str(call.get("id") or ""),
                    "name": str(fn.get("name", "")),
                    "arguments": args if isinstance(args, str) else "{}",
                }


def _text_format(response_format: Any) -> dict[str, Any] | None:
    """A chat `response_format` as a Responses `text.format`."""
    if not isinstance(response_format, dict):
        return None
    kind = response_format.get("type")
    if kind == "json_schema":
        schema = object_at(response_format, "json_schema")
        return {"type": "json_schema", **schema}
    if kind in ("json_object", "text"):
        return {"type": kind}
    return None


class Responses(Dialect):
    """The Responses API as a provider format."""

    name = "responses"
    speaks = "responses"
    health_check = "models"  # `…/v1/responses` → `…/v1/models`
    choices_path = "output"
    content_path = "content.0.text"
    max_tokens_field = "max_output_tokens"

    def body(
        self, request: dict[str, Any], model: str, stream: bool, max_tokens_field: str
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "input": list(_items(request.get("messages"))),
            "stream": stream,
            "store": False,
        }
        if model:
            body["model"] = model
        for key in _SAMPLING:
            if key in request:
                body[key] = request[key]
        put_max_tokens(request, body, max_tokens_field)
        tools = functions_of(request)
        if tools:
            body["tools"] = [{"type": "function", **t} for t in tools]
            choice = tool_choice_of(request)
            if choice is not None:
                mode, name = choice
                body["tool_choice"] = {"type": "function", "name": name} if name else mode
        fmt = _text_format(request.get("response_format"))
        if fmt is not None:
            body["text"] = {"format": fmt}
        if isinstance(request.get("reasoning_effort"), str):
            body["reasoning"] = {"effort": request["reasoning_effort"]}
        return turns_last(body, "input")

    def native_body(self, request: dict[str, Any], model: str, stream: bool) -> dict[str, Any]:
        body = super().native_body(request, model, stream)
        body.pop("previous_response_id", None)  # the proxy's own ids, already expanded
        return body

    def home(self, body: dict[str, Any], origin: str | None) -> dict[str, Any]:
        """The `reasoning` input items, sorted by their `encrypted_content`."""
        items = body.get("input")
        if not isinstance(items, list):
            return body
        return {**body, "input": homed(items, origin)}

    def error_of(self, body: Any) -> ErrorInfo | None:
        if isinstance(body, dict) and body.get("status") == "failed":
            err = object_at(body, "error")
            return ErrorInfo(str(err.get("message") or "response failed"), _code(err.get("code")))
        return openai_error(body)

    def normalize(self, raw: Any, ctx: Context) -> dict[str, Any]:
        if not isinstance(raw, dict):
            raise Mismatch(f"expected a JSON object, got {type(raw).__name__}")
        if not is_default_shape(ctx.shape, (self.choices_path, self.content_path)):
            _, text = content_at(raw, ctx.shape)
            message = completion.message(text)
            finish = "stop"
        else:
            output = raw.get("output")
            if not isinstance(output, list):
                raise Mismatch("no output items")
            message, finish = chat_message(output, raw.get("incomplete_details"))
        return completion.completion(
            id=raw["id"] if isinstance(raw.get("id"), str) and raw["id"] else None,
            model=model_of(raw, ctx),
            created=raw["created_at"] if isinstance(raw.get("created_at"), int) else ctx.created,
            choices=[completion.choice(message, finish)],
            usage=chat_usage(raw.get("usage")),
        )

    def decoder(self, ctx: Context) -> Decoder:
        return ResponsesDecoder(ctx, self)


def chat_message(output: list[Any], incomplete: Any = None) -> tuple[dict[str, Any], str]:
    """Responses `output` items as one chat message and its finish reason."""
    text, reasoning, refusal, calls = [], [], [], []
    for item in output:
        kind = item.get("type") if isinstance(item, dict) else None
        if kind == "message":
            for part in item.get("content") or ():
                if not isinstance(part, dict):
                    continue
                if part.get("type") == "output_text" and isinstance(part.get("text"), str):
                    text.append(part["text"])
                elif part.get("type") == "refusal" and isinstance(part.get("refusal"), str):
                    refusal.append(part["refusal"])
        elif kind == "function_call" and isinstance(item.get("name"), str):
            calls.append(
                tool_call(str(item.get("call_id") or ""), item["name"], item.get("arguments"))
            )
        elif kind == "reasoning":
            for part in item.get("summary") or ():
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    reasoning.append(part["text"])
    content = "".join(text)
    message = completion.message(
        content if content or not calls else None,
        tool_calls=calls,
        reasoning="\n\n".join(reasoning) or None,
        refusal="".join(refusal) or None,
    )
    reason = incomplete.get("reason") if isinstance(incomplete, dict) else None
    finish = _FINISH.get(str(reason), "tool_calls" if calls else "stop")
    return message, finish


def chat_usage(value: Any) -> dict[str, Any] | None:
    """Responses usage (`input_tokens`, `output_tokens`, …) as chat usage."""
    if not isinstance(value, dict):
        return None
    out: dict[str, Any] | None = completion.usage(
        value.get("input_tokens"), value.get("output_tokens"), value.get("total_tokens")
    )
    if out is not None:
        given = object_at(value, "input_tokens_details")
        details = {k: given[k] for k in _CACHE_DETAILS if isinstance(given.get(k), int)}
        if details:
            out["prompt_tokens_details"] = details
        thought = object_at(value, "output_tokens_details").get("reasoning_tokens")
        if isinstance(thought, int):
            out["completion_tokens_details"] = {"reasoning_tokens": thought}
    return out


class ResponsesDecoder(Decoder):
    """Responses stream events as chat chunks."""

    def __init__(self, ctx: Context, dialect: Dialect) -> None:
        super().__init__(ctx, dialect)
        self.calls: dict[Any, int] = {}  # a function_call item's id (or output index) → index

    def feed(self, event: str | None, data: bytes) -> list[dict[str, Any]]:
        obj = self.frame_object(event, data)
        kind = obj.get("type") or event
        if kind in ("response.created", "response.in_progress"):
            response = object_at(obj, "response")
            if isinstance(response.get("id"), str) and response["id"]:
                self.id = response["id"]
            if isinstance(response.get("model"), str) and response["model"]:
                self.model = response["model"]
            return []
        if kind == "response.output_text.delta":
            return self.emit(content=str(obj.get("delta") or "") or None)
        if kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
            return self.emit(reasoning=str(obj.get("delta") or "") or None)
        if kind == "response.output_item.added":
            item = object_at(obj, "item")
            if item.get("type") != "function_call":
                return []
            n = len(self.calls)
            self.calls[item.get("id") or obj.get("output_index")] = n
            call = tool_call(str(item.get("call_id") or ""), str(item.get("name", "")), "")
            return self.emit(tool_calls=[{"index": n, **call}])
        if kind == "response.function_call_arguments.delta":
            found = self.calls.get(obj.get("item_id"), self.calls.get(obj.get("output_index")))
            if found is None:
                raise Mismatch("function_call_arguments.delta for an item never added")
            piece = {"index": found, "function": {"arguments": str(obj.get("delta") or "")}}
            return self.emit(tool_calls=[piece])
        if kind in ("response.completed", "response.incomplete"):
            response = object_at(obj, "response")
            reason = object_at(response, "incomplete_details").get("reason")
            finish = _FINISH.get(str(reason), "tool_calls" if self.calls else "stop")
            return self.emit(finish=finish, usage=chat_usage(response.get("usage")))
        if kind in ("response.failed", "error"):
            err = object_at(object_at(obj, "response"), "error") or obj
            raise ProviderError(
                ErrorInfo(str(err.get("message") or "response failed"), _code(err.get("code")))
            )
        return []  # part added/done, item done, text done and events this version ignores


def _code(value: Any) -> str | None:
    return None if value is None else str(value)


# ---------------------------------------------------------------------------------------------
# Responses → chat (the client direction)

_HOSTED = "tools"  # a hosted tool is named in `dropped` as `tools:<type>`
_TEXT_PARTS = ("input_text", "output_text", "text", "summary_text")

_TEXT = shape({"text": STRING}, ("text",))
_PART = tagged(
    "type",
    {
        **dict.fromkeys(_TEXT_PARTS, _TEXT),
        "refusal": shape({"refusal": STRING}),
        "input_image": shape({"image_url": STRING, "file_id": STRING, "detail": STRING}),
    },
    "an object with a 'type'",  # input_file and parts to come pass (then dropped)
)
_FUNCTION = shape(
    {"name": NAME, "description": STRING, "parameters": OBJECT, "strict": BOOLEAN}, ("name",)
)
_CUSTOM = shape({"name": NAME, "description": STRING, "format": OBJECT}, ("name",))
_TOOL_KINDS = {"function": _FUNCTION, "custom": _CUSTOM}
TOOLS = array_of(
    tagged(
        "type",
        {
            **_TOOL_KINDS,
            "namespace": shape(
                {
                    "name": STRING,
                    "tools": array_of(tagged("type", _TOOL_KINDS, "a tool"), "an array of tools"),
                }
            ),
        },
        "an object with a 'type'",  # hosted tools (web_search, mcp, …) pass (then dropped)
    ),
    "an array of tools",
)
_CALL = {"call_id": STRING, "name": NAME, "namespace": STRING}
_OUTPUT = shape(
    {
        "call_id": STRING,
        "output": either(
            STRING, array_of(OBJECT, ""), expected="a string or an array of content parts"
        ),
    },
    ("call_id", "output"),
)
ITEM = tagged(
    "type",
    {
        "message": shape(
            {
                "role": one_of("user", "assistant", "system", "developer"),
                "content": either(
                    STRING, array_of(_PART, ""), expected="a string or an array of parts"
                ),
            },
            ("role", "content"),
        ),
        "function_call": shape({**_CALL, "arguments": STRING}, ("call_id", "name")),
        "custom_tool_call": shape({**_CALL, "input": STRING}, ("call_id", "name")),
        "function_call_output": _OUTPUT,
        "custom_tool_call_output": _OUTPUT,
        "additional_tools": shape({"tools": TOOLS}),
    },
    "an object",  # reasoning, item_reference, hosted tool calls, … pass (then dropped)
    default="message",
)
_NAMED = shape({"name": NAME}, ("name",))
# The Responses request, field by field (`input` is also required).
FIELDS: Mapping[str, Check] = {
    "model": STRING,
    "input": either(STRING, array_of(ITEM, ""), expected="a string or an array of items"),
    "instructions": STRING,
    "tools": TOOLS,
    "tool_choice": either(
        one_of("auto", "none", "required"),
        tagged(
            "type",
            {"function": _NAMED, "custom": _NAMED, "allowed_tools": shape({"mode": STRING})},
            "",
        ),
        expected="auto, none, required or an object naming a tool",
    ),
    "parallel_tool_calls": BOOLEAN,
    "max_output_tokens": integer(16, INT64_MAX),  # the published schema's minimum
    "max_tool_calls": INT64,  # the schema declares no range (openai-python's tests send 0)
    "temperature": number(0, 2),
    "top_p": number(0, 1),
    "top_logprobs": integer(0, 20),
    "text": shape(
        {
            "format": tagged(
                "type",
                {
                    "json_schema": shape(
                        {"name": STRING, "schema": OBJECT, "strict": BOOLEAN, "description": STRING}
                    )
                },
                "an object with a 'type'",
            ),
            "verbosity": STRING,
        }
    ),
    "reasoning": shape({"effort": STRING, "summary": STRING}),
    "stream": BOOLEAN,
    "stream_options": OBJECT,
    "store": BOOLEAN,
    "background": BOOLEAN,
    "previous_response_id": STRING,
    "metadata": OBJECT,
    "include": STRINGS,
    "truncation": STRING,
    "service_tier": STRING,
    "user": STRING,
    "safety_identifier": STRING,
    "prompt_cache_key": STRING,
}


@dataclass(frozen=True, slots=True)
class Tool:
    """A client's tool as a chat provider sees it: a function. `custom` tools (free-form text
    input, such as Codex's `apply_patch` and `exec`) become functions of one string `input`;
    tools inside a `namespace` get the namespace in their chat name (`clock__sleep`), except
    for the default namespace `functions`."""

    name: str
    namespace: str | None = None
    custom: bool = False

    @property
    def chat_name(self) -> str:
        """The function name a chat provider sees (`[A-Za-z0-9_-]`, at most 64 long)."""
        plain = self.namespace in (None, "functions")
        full = self.name if plain else f"{self.namespace}__{self.name}"
        return re.sub(r"[^A-Za-z0-9_-]", "_", full)[:64]


def _tool_items(body: dict[str, Any]) -> Iterator[Any]:
    """Each tool of the request: `tools`, and those of `additional_tools` input items (as
    Codex sends them)."""
    tools = body.get("tools")
    yield from tools if isinstance(tools, list) else ()
    items = body.get("input")
    for item in items if isinstance(items, list) else ():
        if isinstance(item, dict) and item.get("type") == "additional_tools":
            yield from item.get("tools") or ()


def _flatten(tool: Any, namespace: str | None = None) -> Iterator[tuple[Tool, Any]]:
    """The function and custom tools in `tool` (a namespace holds several), with their
    definitions; a hosted tool is yielded as `tools:<type>` with no definition. `tool` is
    one `request_in` accepted."""
    kind = tool.get("type") if isinstance(tool, dict) else None
    if kind == "namespace":
        for inner in tool.get("tools") or ():
            yield from _flatten(inner, str(tool.get("name") or ""))
    elif kind in ("function", "custom"):
        yield Tool(tool["name"], namespace, kind == "custom"), tool
    elif isinstance(kind, str):
        yield Tool(f"{_HOSTED}:{kind}"), None


def tool_map(body: dict[str, Any]) -> dict[str, Tool]:
    """Chat function name → the client's tool, for every function and custom tool."""
    return {
        tool.chat_name: tool
        for given in _tool_items(body)
        for tool, spec in _flatten(given)
        if spec is not None
    }


_CUSTOM_PARAMETERS = {
    "type": "object",
    "properties": {
        "input": {"type": "string", "description": "The tool's raw input, as its description says."}
    },
    "required": ["input"],
}


def _chat_tools(body: dict[str, Any], dropped: set[str]) -> list[dict[str, Any]]:
    """The request's function and custom tools as chat tools; hosted ones go to `dropped`."""
    out = []
    for given in _tool_items(body):
        for tool, spec in _flatten(given):
            if spec is None:
                dropped.add(tool.name)
                continue
            fn: dict[str, Any] = {"name": tool.chat_name}
            if isinstance(spec.get("description"), str):
                fn["description"] = spec["description"]
            if tool.custom:
                fn["parameters"] = _CUSTOM_PARAMETERS
            else:
                params = spec.get("parameters")
                fn["parameters"] = params if isinstance(params, dict) else {"type": "object"}
            out.append({"type": "function", "function": fn})
    return out


def _message_content(content: str | list[Any], role: str, dropped: set[str]) -> Any:
    """A Responses message's content as chat content: a string, or parts when there are
    images; `input_file` parts are dropped."""
    if isinstance(content, str):
        return content
    texts: list[str] = []
    parts: list[dict[str, Any]] = []
    for part in content:
        kind = part["type"]
        if kind in _TEXT_PARTS:
            texts.append(part["text"])
            parts.append({"type": "text", "text": part["text"]})
        elif kind == "refusal":
            texts.append(str(part.get("refusal") or ""))
            parts.append({"type": "text", "text": texts[-1]})
        elif kind == "input_image" and role == "user":
            url = part.get("image_url")
            if not isinstance(url, str) or not url:
                dropped.add("input_image:file_id")
                continue
            image: dict[str, Any] = {"url": url}
            if part.get("detail") in ("low", "high", "auto"):
                image["detail"] = part["detail"]
            parts.append({"type": "image_url", "image_url": image})
        else:
            dropped.add(kind)
    if all(p["type"] == "text" for p in parts):
        return "".join(texts)
    return parts


def _output_text(parts: list[Any], dropped: set[str]) -> str:
    """A tool output given as content parts, as text (other parts go to `dropped`)."""
    texts = []
    for part in parts:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_text", "output_text", "text") and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif isinstance(kind, str):
            dropped.add(f"tool_output:{kind}")
    return "\n".join(texts)


class _Reader:
    """Reads a Responses request's `input` into chat messages."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.dropped: set[str] = set()

    def message(self, item: dict[str, Any]) -> None:
        role = item["role"]
        content = _message_content(item["content"], role, self.dropped)
        chat_role = "system" if role == "developer" else role
        self.messages.append({"role": chat_role, "content": content})

    def function_call(self, item: dict[str, Any]) -> None:
        call_id, name, namespace = item["call_id"], item["name"], item.get("namespace")
        if item.get("type") == "custom_tool_call":
            args = orjson.dumps({"input": str(item.get("input") or "")}).decode()
        else:
            given = item.get("arguments")
            args = given if isinstance(given, str) else "{}"
        call = tool_call(call_id, Tool(name, namespace).chat_name, args)
        last = self.messages[-1] if self.messages else None
        if last is not None and last["role"] == "assistant" and "tool_call_id" not in last:
            last.setdefault("tool_calls", []).append(call)
            if last.get("content") == "":
                last["content"] = None
        else:
            self.messages.append({"role": "assistant", "content": None, "tool_calls": [call]})

    def function_output(self, item: dict[str, Any]) -> None:
        output = item["output"]
        if isinstance(output, list):
            output = _output_text(output, self.dropped)
        self.messages.append({"role": "tool", "tool_call_id": item["call_id"], "content": output})

    def read(self, items: list[dict[str, Any]]) -> None:
        for item in items:
            kind = item.get("type", "message")
            if kind == "message":
                self.message(item)
            elif kind in ("function_call", "custom_tool_call"):
                self.function_call(item)
            elif kind in ("function_call_output", "custom_tool_call_output"):
                self.function_output(item)
            elif kind != "additional_tools":  # those are read by `_chat_tools`
                self.dropped.add(kind)  # reasoning, item_reference, hosted tool calls, …


def _tool_choice(choice: Any, tools: dict[str, Tool]) -> Any:
    """A `tool_choice` the table accepted, for a chat provider."""
    if not isinstance(choice, dict):
        return choice  # None, auto, none or required
    kind = choice["type"]
    if kind in ("function", "custom"):
        names = {t.name: chat for chat, t in tools.items()}
        if choice["name"] not in names:
            raise refused("tool_choice", "names no tool of the request", choice["name"])
        return {"type": "function", "function": {"name": names[choice["name"]]}}
    if kind == "allowed_tools":
        return "required" if choice.get("mode") == "required" else "auto"
    raise refused("tool_choice", "forces a hosted tool, which chat providers do not have", kind)


def request_in(body: dict[str, Any]) -> Inbound:
    """A Responses request (its `previous_response_id` already expanded into `input`) as a
    chat request; `RequestError` (400, with `param`) for what is malformed (`FIELDS`).

    No `input`, or one with nothing but instructions, is the schema's to allow and the
    provider's to judge: it is sent as the conversation there is (none, or the system prompt)."""
    check_fields(body, FIELDS)
    reader = _Reader()
    instructions = body.get("instructions")
    if instructions:
        reader.messages.append({"role": "system", "content": instructions})
    given = body.get("input")
    if isinstance(given, str):
        reader.messages.append({"role": "user", "content": given})
    elif given is not None:
        reader.read(given)
    chat: dict[str, Any] = {"messages": reader.messages}
    model = body.get("model")
    if model:
        chat["model"] = model
    tools = _chat_tools(body, reader.dropped)
    if tools:
        chat["tools"] = tools
    choice = _tool_choice(body.get("tool_choice"), tool_map(body))
    if choice is not None and tools:
        chat["tool_choice"] = choice
    for key in _SAMPLING:
        if body.get(key) is not None:
            chat[key] = body[key]
    cap = body.get("max_output_tokens")
    if cap is not None:
        chat["max_tokens"] = cap
    fmt = object_at(body.get("text"), "format")
    if fmt.get("type") == "json_schema":
        schema = {k: v for k, v in fmt.items() if k in ("name", "schema", "strict", "description")}
        chat["response_format"] = {"type": "json_schema", "json_schema": schema}
    elif fmt.get("type") == "json_object":
        chat["response_format"] = {"type": "json_object"}
    if object_at(body, "reasoning").get("effort") is not None:
        reader.dropped.add("reasoning.effort")
    for key in ("stream", "agent_reach"):
        if key in body:
            chat[key] = body[key]
    if body.get("stream") is True:  # so that `response.completed` carries the usage
        chat["stream_options"] = {"include_usage": True}
    return Inbound(chat, tuple(sorted(reader.dropped)))


# ---------------------------------------------------------------------------------------------
# Chat → Responses (the client direction)


def response_usage(usage: Any) -> dict[str, Any] | None:
    """Chat usage as Responses usage, details included."""
    if not isinstance(usage, dict):
        return None
    prompt = usage.get("prompt_tokens") or 0
    output = usage.get("completion_tokens") or 0
    details = object_at(usage, "prompt_tokens_details")
    cached = details.get("cached_tokens") or 0
    written = details.get("cache_write_tokens") or 0
    thought = object_at(usage, "completion_tokens_details").get("reasoning_tokens") or 0
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": written},
        "output_tokens": output,
        "output_tokens_details": {"reasoning_tokens": thought},
        "total_tokens": usage.get("total_tokens") or prompt + output,
    }


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def message_item(id: str, text: str, status: str = "completed") -> dict[str, Any]:
    """An assistant `message` output item with one `output_text` part (none while empty)."""
    content = [_text_part(text)] if text or status == "completed" else []
    return {"type": "message", "id": id, "status": status, "role": "assistant", "content": content}


def reasoning_item(id: str, text: str) -> dict[str, Any]:
    """A `reasoning` output item whose summary is the provider's reasoning text."""
    summary = [{"type": "summary_text", "text": text}] if text else []
    return {"type": "reasoning", "id": id, "summary": summary}


def call_item(
    call_id: str, chat_name: str, arguments: str, tools: dict[str, Tool], done: bool = True
) -> dict[str, Any]:
    """The output item of a chat tool call: a `function_call`, or a `custom_tool_call` whose
    `input` is the call's `input` argument; with the tool's own name and namespace."""
    tool = tools.get(chat_name) or Tool(chat_name)
    item: dict[str, Any] = {"call_id": call_id, "name": tool.name}
    if tool.namespace is not None:
        item["namespace"] = tool.namespace
    if tool.custom:
        item["input"] = custom_input(arguments)
        return {"type": "custom_tool_call", "id": new_id("ctc"), **item}
    item["arguments"] = arguments
    item["status"] = "completed" if done else "in_progress"
    return {"type": "function_call", "id": new_id("fc"), **item}


def custom_input(arguments: str) -> str:
    """A custom tool's input from the chat call's arguments (`{"input": …}`, else as is)."""
    try:
        value = orjson.loads(arguments) if arguments else {}
    except orjson.JSONDecodeError:
        return arguments
    text = value.get("input") if isinstance(value, dict) else None
    return text if isinstance(text, str) else arguments


def output_items(message: dict[str, Any], tools: dict[str, Tool]) -> list[dict[str, Any]]:
    """A chat message as Responses output items: reasoning, message, tool calls."""
    items = []
    if message.get("reasoning_content"):
        items.append(reasoning_item(new_id("rs"), message["reasoning_content"]))
    if message.get("content"):
        items.append(message_item(new_id("msg"), message["content"]))
    elif message.get("refusal"):
        refusal = {"type": "refusal", "refusal": message["refusal"]}
        items.append({**message_item(new_id("msg"), ""), "content": [refusal]})
    for call in message.get("tool_calls") or ():
        fn = call.get("function") or {}
        args = fn.get("arguments")
        call_id = str(call.get("id") or new_id("call"))
        arguments = args if isinstance(args, str) else "{}"
        items.append(call_item(call_id, str(fn.get("name", "")), arguments, tools))
    return items


def response_object(
    request: dict[str, Any],
    *,
    id: str,
    created: int,
    model: str,
    status: str,
    output: list[dict[str, Any]],
    usage: dict[str, Any] | None = None,
    finish: str | None = None,
    error: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A `response` object echoing the request's settings, as the API does."""
    reason = _INCOMPLETE.get(finish or "")
    if status == "completed" and reason:
        status = "incomplete"
    reasoning = object_at(request, "reasoning")
    fmt = object_at(request.get("text"), "format") or {"type": "text"}
    tools = [_echoed(t) for t in request.get("tools") or () if isinstance(t, dict)]
    body: dict[str, Any] = {
        "id": id,
        "object": "response",
        "created_at": created,
        "status": status,
        "completed_at": created if status in ("completed", "incomplete") else None,
        "error": error,
        "incomplete_details": {"reason": reason} if status == "incomplete" else None,
        "instructions": request.get("instructions")
        if isinstance(request.get("instructions"), str)
        else None,
        "max_output_tokens": request.get("max_output_tokens"),
        "model": model,
        "output": output,
        "parallel_tool_calls": request.get("parallel_tool_calls", True) is not False,
        "previous_response_id": request.get("previous_response_id"),
        "reasoning": {"effort": reasoning.get("effort"), "summary": reasoning.get("summary")}
        if reasoning
        else None,
        "store": request.get("store", True) is not False,
        "temperature": _number(request.get("temperature"), 1.0),
        "text": {"format": fmt},
        "tool_choice": request.get("tool_choice") or "auto",
        "tools": tools,
        "top_p": _number(request.get("top_p"), 1.0),
        "truncation": "disabled",
        "metadata": request.get("metadata") if isinstance(request.get("metadata"), dict) else {},
    }
    if usage is not None:
        body["usage"] = usage
    if isinstance(request.get("user"), str):
        body["user"] = request["user"]
    return body


def _echoed(tool: dict[str, Any]) -> dict[str, Any]:
    """A request's tool as a `response` echoes it: a function tool in the API's normalized form
    (`description` and `parameters` present, null when not given; `strict` true unless
    given), any other as sent."""
    if tool.get("type") != "function":
        return tool
    return {
        **tool,
        "description": tool.get("description"),
        "parameters": tool.get("parameters"),
        "strict": tool.get("strict", True),
    }


def _number(value: Any, default: float) -> float:
    return value if isinstance(value, int | float) and not isinstance(value, bool) else default


def answer_out(response: dict[str, Any], request: dict[str, Any], created: int) -> dict[str, Any]:
    """A chat completion as a `response` object for `request`."""
    choice = response["choices"][0]
    return response_object(
        request,
        id=new_id("resp"),
        created=created,
        model=response.get("model") or request.get("model") or "unknown",
        status="completed",
        output=output_items(choice["message"], tool_map(request)),
        usage=response_usage(response.get("usage")),
        finish=choice.get("finish_reason"),
    )


class StreamOut:
    """Chat chunks rendered as the Responses event sequence (protocol §10.1).

    `start()` gives `response.created` and `response.in_progress`; `feed(chunk)` the events a
    chunk produces (an output item opens at its first piece and closes when another kind of
    item starts); `finish()` closes what is open and ends with `response.completed` carrying
    the whole response; `fail(message)` ends a cut stream with `response.failed`. Events are
    `(type, data)` pairs, `data` with its increasing `sequence_number`.
    """

    def __init__(self, request: dict[str, Any], created: int, model: str) -> None:
        self.request = request
        self.created = created
        self.model = model
        self.id = new_id("resp")
        self.seq = 0
        self.output: list[dict[str, Any]] = []  # items done
        self.open: dict[str, Any] | None = None  # the message or reasoning item being written
        self.text: list[str] = []
        self.tools = tool_map(request)
        self.calls: dict[int, dict[str, Any]] = {}  # chat tool call index → open item
        self.finish: str | None = None
        self.usage: dict[str, Any] | None = None

    def _event(self, kind: str, **data: Any) -> tuple[str, dict[str, Any]]:
        event = {"type": kind, "sequence_number": self.seq, **data}
        self.seq += 1
        return kind, event

    def _response(self, status: str, error: dict[str, Any] | None = None) -> dict[str, Any]:
        return response_object(
            self.request,
            id=self.id,
            created=self.created,
            model=self.model,
            status=status,
            output=list(self.output),
            usage=response_usage(self.usage) if status != "in_progress" else None,
            finish=self.finish,
            error=error,
        )

    def start(self) -> list[tuple[str, dict[str, Any]]]:
        response = self._response("in_progress")
        return [
            self._event("response.created", response=response),
            self._event("response.in_progress", response=response),
        ]

    def feed(self, chunk: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        if chunk.get("model"):
            self.model = chunk["model"]
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        out: list[tuple[str, dict[str, Any]]] = []
        for c in chunk.get("choices") or ():
            if c.get("index", 0) != 0:
                continue  # the Responses API has one answer
            delta = c.get("delta") or {}
            if delta.get("reasoning_content"):
                out += self._write("reasoning", delta["reasoning_content"])
            if delta.get("content"):
                out += self._write("message", delta["content"])
            for call in delta.get("tool_calls") or ():
                out += self._call(call)
            if c.get("finish_reason"):
                self.finish = c["finish_reason"]
        return out

    def _write(self, kind: str, text: str) -> list[tuple[str, dict[str, Any]]]:
        out: list[tuple[str, dict[str, Any]]] = []
        if self.open is None or self.open["type"] != kind:
            out += self._close()
            out += self._open(kind)
        item, index = self.open, len(self.output)
        assert item is not None
        self.text.append(text)
        seq, self.seq = self.seq, self.seq + 1  # `_event`'s, without its keywords' dicts
        if kind == "message":
            event = {
                "type": "response.output_text.delta",
                "sequence_number": seq,
                "item_id": item["id"],
                "output_index": index,
                "content_index": 0,
                "delta": text,
                "logprobs": [],
            }
        else:
            event = {
                "type": "response.reasoning_summary_text.delta",
                "sequence_number": seq,
                "item_id": item["id"],
                "output_index": index,
                "summary_index": 0,
                "delta": text,
            }
        out.append((event["type"], event))
        return out

    def _open(self, kind: str) -> list[tuple[str, dict[str, Any]]]:
        """Open a message (`kind` "message") or reasoning item and its first part."""
        index = len(self.output)
        if kind == "message":
            item = message_item(new_id("msg"), "", "in_progress")
            part = ("response.content_part.added", "content_index", _text_part(""))
        else:
            item = reasoning_item(new_id("rs"), "")
            empty = {"type": "summary_text", "text": ""}
            part = ("response.reasoning_summary_part.added", "summary_index", empty)
        self.open, self.text = item, []
        kind, at, first = part
        return [
            self._event("response.output_item.added", output_index=index, item=item),
            self._event(kind, item_id=item["id"], output_index=index, **{at: 0}, part=first),
        ]

    def _close(self) -> list[tuple[str, dict[str, Any]]]:
        """Close the open message or reasoning item, and any function calls."""
        out: list[tuple[str, dict[str, Any]]] = []
        item, index = self.open, len(self.output)
        if item is not None:
            text = "".join(self.text)
            ids = {"item_id": item["id"], "output_index": index}
            if item["type"] == "message":
                done = message_item(item["id"], text)
                out += [
                    self._event(
                        "response.output_text.done", **ids, content_index=0, text=text, logprobs=[]
                    ),
                    self._event(
                        "response.content_part.done", **ids, content_index=0, part=_text_part(text)
                    ),
                ]
            else:
                done = reasoning_item(item["id"], text)
                part = {"type": "summary_text", "text": text}
                out += [
                    self._event(
                        "response.reasoning_summary_text.done", **ids, summary_index=0, text=text
                    ),
                    self._event(
                        "response.reasoning_summary_part.done", **ids, summary_index=0, part=part
                    ),
                ]
            out.append(self._event("response.output_item.done", output_index=index, item=done))
            self.output.append(done)
            self.open = None
        for call in self.calls.values():
            out += self._call_done(call)
        self.calls = {}
        return out

    def _call(self, call: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        """A piece of a chat tool call: the item opens at its first piece; a function's
        arguments stream as they come, a custom tool's input goes out whole at the end."""
        out: list[tuple[str, dict[str, Any]]] = []
        n = call.get("index", 0)
        fn = call.get("function") or {}
        state = self.calls.get(n)
        if state is None:
            if self.open is not None:
                out += self._close()
            index = len(self.output) + len(self.calls)
            call_id = str(call.get("id") or new_id("call"))
            item = call_item(call_id, str(fn.get("name") or ""), "", self.tools, done=False)
            state = self.calls[n] = {"item": item, "index": index, "args": []}
            out.append(self._event("response.output_item.added", output_index=index, item=item))
        args = fn.get("arguments")
        if isinstance(args, str) and args:
            state["args"].append(args)
            if state["item"]["type"] == "function_call":
                out.append(
                    self._event(
                        "response.function_call_arguments.delta",
                        item_id=state["item"]["id"],
                        output_index=state["index"],
                        delta=args,
                    )
                )
        return out

    def _call_done(self, call: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        item, index, args = call["item"], call["index"], "".join(call["args"])
        ids = {"item_id": item["id"], "output_index": index}
        if item["type"] == "custom_tool_call":
            done = {**item, "input": custom_input(args)}
            events = [
                self._event("response.custom_tool_call_input.delta", **ids, delta=done["input"]),
                self._event("response.custom_tool_call_input.done", **ids, input=done["input"]),
            ]
        else:
            done = {**item, "arguments": args, "status": "completed"}
            events = [
                self._event(
                    "response.function_call_arguments.done",
                    **ids,
                    name=done["name"],
                    arguments=args,
                )
            ]
        events.append(self._event("response.output_item.done", output_index=index, item=done))
        self.output.append(done)
        return events

    def finish_events(self) -> list[tuple[str, dict[str, Any]]]:
        """Close what is open and end the stream with `response.completed`."""
        out = self._close()
        out.append(self._event("response.completed", response=self._response("completed")))
        return out

    def fail(self, message: str, code: str = "server_error") -> list[tuple[str, dict[str, Any]]]:
        """End a stream cut by its provider: `response.failed`, never `response.completed`."""
        error = {"code": code, "message": message}
        return [self._event("response.failed", response=self._response("failed", error))]

    def response(self) -> dict[str, Any]:
        """The whole response as the stream has told it so far (for storing)."""
        return self._response("completed")


DIALECT = Responses()
