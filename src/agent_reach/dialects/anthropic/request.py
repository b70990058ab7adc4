"""Requests both ways: a chat request as a Messages request for a `format: anthropic` provider
(`encode_request`: the system prompt as a top-level `system`, `max_tokens` always sent, turns
of one role joined, tool calls and results as `tool_use` / `tool_result` blocks, images as
`image` blocks, `temperature` clamped to [0, 1], `stop` as `stop_sequences`), and a client's
Messages request read as a chat request (`decode_request`, an `Inbound` naming what a chat
provider will not see)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from ..base import Inbound
from ..convert import (
    arguments_of,
    bounded,
    cache_mark,
    data_url,
    functions_of,
    marked_parts,
    max_tokens_of,
    merge_turns,
    object_at,
    put_max_tokens,
    split_system,
    stop_list,
    text_of,
    tool_call,
    tool_choice_of,
    turns_last,
)
from .schema import READ, checked

DEFAULT_MAX_TOKENS = 4096
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


def _marked_system(request: dict[str, Any], text: str) -> str | list[dict[str, Any]]:
    """The top-level `system` of a chat request whose system text is `text`: one text block
    with the last `cache_control` of its system and developer messages, if any."""
    messages = request.get("messages")
    turns = messages if isinstance(messages, list) else ()
    marks = [cache_mark(m.get("content")) for m in turns if role_of(m) in ("system", "developer")]
    mark = next((m for m in reversed(marks) if m is not None), None)
    return text if mark is None else [{"type": "text", "text": text, "cache_control": mark}]


def role_of(message: Any) -> Any:
    return message.get("role") if isinstance(message, dict) else None


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


def encode_request(
    request: dict[str, Any], model: str, stream: bool, max_tokens_field: str, official: bool
) -> dict[str, Any]:
    """A chat request as a Messages request (see the package's docstring); a `user` goes as
    `metadata.user_id` where the endpoint takes it (`official`, or `takes_user_id`)."""
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
    if takes_user_id(request.get("user"), official):
        body["metadata"] = {"user_id": request["user"]}
    return turns_last(body)


def takes_user_id(user_id: Any, official: bool) -> bool:
    """Whether `metadata.user_id` may be sent: to Anthropic (`official`), any; elsewhere only
    one of the characters DeepSeek's endpoint allows (Claude Code's JSON is refused)."""
    return isinstance(user_id, str) and (official or bool(_USER_ID.fullmatch(user_id)))


_BILLING = "x-anthropic-billing-header:"
_TOOL_FIELDS = frozenset({"type", "name", "description", "input_schema"})
_CHAT_TOOL_CHOICE = {"auto": "auto", "any": "required", "none": "none"}
_USER_ID = re.compile(r"[A-Za-z0-9_-]+")  # what DeepSeek's Anthropic endpoint allows
_JOIN = "\n\n"  # text blocks of one turn become one chat text, as paragraphs


def decode_request(request: Any) -> Inbound:
    """A Messages request as the engine's chat request; `RequestError` (a 400) names what is
    wrong. What a chat provider cannot be sent is named in `dropped`: top-level fields
    (`top_k`, `thinking`, `service_tier`, …), block types (`thinking`, `document`, …),
    `cache_control`, server tools as `tools:<name>`, tool fields as `tool.<field>` and
    tool_result parts as `tool_result:<what>`."""
    messages = checked(request, ("messages", "max_tokens"))
    dropped: dict[str, None] = dict.fromkeys(k for k in request if k not in READ)
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
