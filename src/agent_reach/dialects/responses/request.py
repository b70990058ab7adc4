"""Requests both ways: a chat request as a Responses request, for a `format: responses` provider
(`encode_request`), and a client's Responses request read as a chat request (`decode_request`),
naming what a chat provider cannot take (hosted tools such as `web_search`, `reasoning` items
and effort, `input_file` parts)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson

from ...chat.checks import check_fields, refused
from ..base import Inbound
from ..convert import (
    functions_of,
    object_at,
    parts_of,
    put_max_tokens,
    text_of,
    tool_call,
    tool_choice_of,
    turns_last,
)
from .schema import FIELDS, TEXT_PARTS
from .tools import Tool, flattened, tool_items, tool_map

# Request fields a chat provider gets in its own words (everything else is Responses-only).
_SAMPLING = ("temperature", "top_p", "parallel_tool_calls", "user")


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


def encode_request(
    request: dict[str, Any], model: str, stream: bool, max_tokens_field: str
) -> dict[str, Any]:
    """A chat request as a Responses request: messages as `input` items (assistant tool calls
    as `function_call` items, tool results as `function_call_output` items), flat function
    tools, `max_output_tokens`, `text.format` and `store: false`."""
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
    for given in tool_items(body):
        for tool, spec in flattened(given):
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
        if kind in TEXT_PARTS:
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


def decode_request(body: dict[str, Any]) -> Inbound:
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
