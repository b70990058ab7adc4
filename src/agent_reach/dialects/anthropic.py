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
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .. import completion
from ..outcomes import ErrorInfo
from .base import (
    Context,
    Decoder,
    Dialect,
    Mismatch,
    ProviderError,
    arguments_of,
    bounded,
    content_at,
    data_url,
    functions_of,
    is_default_shape,
    loads,
    max_tokens_of,
    merge_turns,
    model_of,
    object_at,
    openai_error,
    parts_of,
    require_object,
    split_system,
    stop_list,
    text_of,
    tool_call,
    tool_choice_of,
)

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
    for kind, value in parts_of(content):
        if kind == "text":
            out.append({"type": "text", "text": value})
            continue
        inline = data_url(value)
        source: dict[str, str] = (
            {"type": "base64", "media_type": inline[0], "data": inline[1]}
            if inline
            else {"type": "url", "url": value}
        )
        out.append({"type": "image", "source": source})
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
    cached = value.get("cache_read_input_tokens")
    if out is not None and isinstance(cached, int) and cached:
        out["prompt_tokens_details"] = {"cached_tokens": cached}
    return out


class Anthropic(Dialect):
    """Anthropic's Messages format."""

    name = "anthropic"
    auth_header = "x-api-key"
    choices_path = "content"
    content_path = "text"

    def headers(self) -> dict[str, str]:
        return {"anthropic-version": VERSION}

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
        if cap is not None and max_tokens_field != "max_tokens":
            body[max_tokens_field] = cap
        if system:
            body["system"] = system
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
        if isinstance(request.get("user"), str):
            body["metadata"] = {"user_id": request["user"]}
        return body

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
