"""Answers both ways: a provider's Messages answer as a chat completion (`decode_answer`:
`text` blocks the content, `thinking` blocks the `reasoning_content`, `tool_use` blocks
`tool_calls`; `stop_reason` end_turn/stop_sequence → stop, max_tokens → length, tool_use →
tool_calls, refusal → content_filter; cached input counted as prompt tokens), and a chat
completion as a Messages `message` for a client (`encode_answer`)."""

from __future__ import annotations

import re
from typing import Any

from ...chat import completion
from ..base import Context, Mismatch
from ..convert import (
    arguments_of,
    content_at,
    is_default_shape,
    model_of,
    object_at,
    require_object,
    text_of,
    tool_call,
)

# Messages usage's cache counts → chat usage's `prompt_tokens_details` (`cache_write_tokens` is
# the Responses API's name; chat has none of its own).
_CACHE_FIELDS = {
    "cache_read_input_tokens": "cached_tokens",
    "cache_creation_input_tokens": "cache_write_tokens",
}


def chat_usage(value: Any) -> dict[str, Any] | None:
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


def decode_answer(raw: Any, ctx: Context, default: tuple[str, str]) -> dict[str, Any]:
    """A provider's Messages answer as a chat completion: `text` blocks the content,
    `thinking` blocks the `reasoning_content`, `tool_use` blocks `tool_calls`; or the text
    at the provider's own `shape` when it is not the format's `default` one."""
    raw = require_object(raw)
    if is_default_shape(ctx.shape, default):
        blocks = raw.get("content")
        if not isinstance(blocks, list):
            raise Mismatch("no content blocks")
        message, finish = _chat_message(blocks, raw.get("stop_reason"))
    else:
        _, text = content_at(raw, ctx.shape)
        message = completion.message(text)
        finish = completion.finish_reason(raw.get("stop_reason"))
    return completion.completion(
        id=raw["id"] if isinstance(raw.get("id"), str) and raw["id"] else None,
        model=model_of(raw, ctx),
        created=ctx.created,
        choices=[completion.choice(message, finish)],
        usage=chat_usage(raw.get("usage")),
    )


def _chat_message(blocks: list[Any], stop_reason: Any) -> tuple[dict[str, Any], str | None]:
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


_STOP_REASON = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}
_UNSAFE_ID = re.compile(r"[^A-Za-z0-9_-]")


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


def message_id() -> str:
    return "msg_" + completion.random_hex()


def encode_answer(response: dict[str, Any]) -> dict[str, Any]:
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
        "id": message_id(),
        "type": "message",
        "role": "assistant",
        "model": response.get("model") or "unknown",
        "content": content,
        "stop_reason": stop_reason(choice.get("finish_reason"), bool(calls)),
        "stop_sequence": None,
        "usage": message_usage(response.get("usage")),
    }
