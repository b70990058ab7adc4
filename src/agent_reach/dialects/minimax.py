"""Minimax chat completions, both API versions under one `minimax` format.

The version comes from the endpoint's path (`for_endpoint`, asked once per provider when the
router starts): a path ending in `_v2`
(`…/v1/text/chatcompletion_v2`) is v2, anything else (`…/v1/text/chatcompletion?GroupId=…`)
is v1. Only the request differs between them; answers and streams of either version are
recognised by their shape, so reading them needs no version.

- v1 request: `messages` of `{"sender_type": "USER"|"BOT", "text"}` (tool results are sent as
  USER turns), the system prompt as `prompt` (with a `role_meta`), the cap in
  `tokens_to_generate`, and for a stream `use_standard_sse: true` (without it the stream is not
  blank-line separated SSE). v1 has no stop sequences.
- v2 request: the OpenAI body (see the `openai` dialect) with the cap in
  `max_completion_tokens` (v1's `tokens_to_generate`, the format default, is moved there).
- Both: `temperature` and `top_p` are clamped to Minimax's (0, 1].

Answers: v1 has `reply` and `choices[].messages[].text` (older models `choices[].text`), usage
with only `total_tokens`, and `output_sensitive: true` when the answer was filtered (→
`content_filter`); v2 is OpenAI-like with `reasoning_content`. Streams: v1 sends `delta` as a
string (or `messages[0].text`), its last event carries `finish_reason`, `reply` and usage; v2
sends OpenAI chunks and, last, a whole `chat.completion` with `message` and usage. In both, a
last event that repeats the whole answer is not sent again; only what it adds is.

Errors come inside HTTP 200 bodies (and stream events) as `base_resp.status_code != 0`:
1004/2049 → 401, 1002/1008/1039/1041 → 429, 1026/1027/2013 → 400, 1000/1001/1013/1024 → 500.
"""

from __future__ import annotations

import dataclasses
from typing import Any
from urllib.parse import urlsplit

from ..chat import completion
from ..core.outcomes import ErrorInfo
from ..core.trace import Reason
from . import openai
from .base import Context, Decoder, Dialect, Mismatch, Shape, openai_error
from .convert import (
    bounded,
    content_at,
    is_default_shape,
    model_of,
    object_at,
    put_max_tokens,
    require_object,
    split_system,
    text_of,
    tool_call,
)

_STATUS = {
    1000: 500,
    1001: 500,
    1002: 429,
    1004: 401,
    1008: 429,
    1013: 500,
    1024: 500,
    1026: 400,
    1027: 400,
    1039: 429,
    1041: 429,
    2013: 400,
    2045: 429,
    2049: 401,
}
_SENSITIVE = frozenset({1026, 1027})  # the input / the output was judged sensitive
_V1_SHAPE = ("choices", "messages.0.text")
_V2_SHAPE = ("choices", "message.content")


def _usage(value: Any) -> dict[str, int] | None:
    if not isinstance(value, dict):
        return None
    return completion.usage(
        value.get("prompt_tokens"), value.get("completion_tokens"), value.get("total_tokens")
    )


def _v1_text(choice: Any) -> str | None:
    """The text of a v1 choice: `messages[0].text`, else `text`."""
    if not isinstance(choice, dict):
        return None
    messages = choice.get("messages")
    if isinstance(messages, list) and messages and isinstance(messages[0], dict):
        text = messages[0].get("text")
        if isinstance(text, str):
            return text
    return choice["text"] if isinstance(choice.get("text"), str) else None


def _unseen(seen: str, whole: str) -> str:
    """What a closing event's whole text adds to the text already streamed."""
    if whole == seen:
        return ""
    return whole[len(seen) :] if seen and whole.startswith(seen) else whole


class Minimax(Dialect):
    """Minimax v1 (`chatcompletion`); `for_endpoint` gives v2 for a `_v2` path."""

    name = "minimax"
    choices_path, content_path = _V1_SHAPE
    max_tokens_field = "tokens_to_generate"

    def for_endpoint(self, endpoint: str) -> Dialect:
        return V2 if urlsplit(endpoint).path.rstrip("/").endswith("_v2") else V1

    def body(
        self, request: dict[str, Any], model: str, stream: bool, max_tokens_field: str
    ) -> dict[str, Any]:
        system, turns = split_system(request.get("messages"))
        body: dict[str, Any] = {
            "messages": [
                {
                    "sender_type": "BOT" if m.get("role") == "assistant" else "USER",
                    "text": text_of(m.get("content")) or "",
                }
                for m in turns
            ],
            "stream": stream,
        }
        if model:
            body["model"] = model
        if system:
            body["prompt"] = system
            body["role_meta"] = {"user_name": "user", "bot_name": "assistant"}
        if stream:
            body["use_standard_sse"] = True
        put_max_tokens(request, body, max_tokens_field)
        return _clamped(body, request)

    def error_of(self, body: Any) -> ErrorInfo | None:
        resp = body.get("base_resp") if isinstance(body, dict) else None
        if isinstance(resp, dict) and resp.get("status_code") not in (None, 0, "0"):
            raw = resp["status_code"]
            code = int(raw) if isinstance(raw, int) or str(raw).isdigit() else None
            message = str(resp.get("status_msg") or f"Minimax error {raw}")
            status = _STATUS.get(code) if code is not None else None
            blocked = Reason.CONTENT_BLOCKED if code in _SENSITIVE else None
            return ErrorInfo(message, str(raw), status, blocked)
        return openai_error(body)

    def normalize(self, raw: Any, ctx: Context) -> dict[str, Any]:
        raw = require_object(raw)
        choices = raw.get("choices")
        first = choices[0] if isinstance(choices, list) and choices else None
        if isinstance(first, dict) and isinstance(first.get("message"), dict):  # v2
            if is_default_shape(ctx.shape, _V1_SHAPE, _V2_SHAPE):
                ctx = dataclasses.replace(ctx, shape=Shape(*_V2_SHAPE, ctx.shape.model_field))
            return openai.DIALECT.normalize(raw, ctx)
        try:
            found, content = content_at(raw, ctx.shape)
        except Mismatch:
            found, text = first, _v1_text(first)
            text = text if text is not None else raw.get("reply")
            if not isinstance(text, str):
                raise Mismatch("no text at choices → messages.0.text, and no reply") from None
            content = text
        finish = found.get("finish_reason") if isinstance(found, dict) else None
        rid = raw.get("id") or raw.get("request_id")
        return completion.completion(
            id=rid if isinstance(rid, str) and rid else None,
            model=model_of(raw, ctx),
            created=raw["created"] if isinstance(raw.get("created"), int) else ctx.created,
            choices=[
                completion.choice(
                    completion.message(content),
                    "content_filter"
                    if raw.get("output_sensitive") is True
                    else completion.finish_reason(finish),
                )
            ],
            usage=_usage(raw.get("usage")),
        )

    def decoder(self, ctx: Context) -> Decoder:
        return MinimaxDecoder(ctx, self)


class MinimaxV2(Minimax):
    """Minimax v2 (`chatcompletion_v2`): an OpenAI request body."""

    choices_path, content_path = _V2_SHAPE
    max_tokens_field = "max_completion_tokens"

    def body(
        self, request: dict[str, Any], model: str, stream: bool, max_tokens_field: str
    ) -> dict[str, Any]:
        if max_tokens_field == Minimax.max_tokens_field:
            max_tokens_field = self.max_tokens_field
        return _clamped(openai.DIALECT.body(request, model, stream, max_tokens_field), request)


def _clamped(body: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
    for key in ("temperature", "top_p"):
        value = bounded(request.get(key), 0.01, 1.0)
        if value is not None:
            body[key] = value
    return body


class MinimaxDecoder(Decoder):
    """Minimax v1 and v2 stream events as OpenAI chunks."""

    def __init__(self, ctx: Context, dialect: Dialect) -> None:
        super().__init__(ctx, dialect)
        self.text: dict[int, str] = {}
        self.thought: dict[int, str] = {}
        self.calls: dict[int, int] = {}

    def feed(self, event: str | None, data: bytes) -> list[dict[str, Any]]:
        if data.strip() == b"[DONE]":
            self.finished = True
            return []
        obj = self.frame_object(event, data)
        rid = obj.get("id") or obj.get("request_id")
        if isinstance(rid, str) and rid:
            self.id = rid
        self.model = model_of(obj, self.ctx)
        usage = _usage(obj.get("usage"))
        whole = obj.get("object") == "chat.completion"  # v2's closing event
        if whole and self.finished:
            return [self.chunk(usage=usage)] if usage else []
        choices = obj.get("choices")
        reply = obj.get("reply")
        if not choices and isinstance(reply, str) and reply:  # a v1 closing event, reply only
            choices = [{"messages": [{"text": reply}], "finish_reason": "stop"}]
        out = []
        for i, c in enumerate(choices if isinstance(choices, list) else []):
            if not isinstance(c, dict):
                raise Mismatch("stream choice is not an object")
            index = c["index"] if isinstance(c.get("index"), int) else i
            finish = completion.finish_reason(c.get("finish_reason"), "stop" if whole else None)
            if finish is not None and obj.get("output_sensitive") is True:
                finish = "content_filter"
            text, thought, calls = self._piece(c, index, closing=finish is not None)
            self.text[index] = self.text.get(index, "") + (text or "")
            self.thought[index] = self.thought.get(index, "") + (thought or "")
            self.calls[index] = self.calls.get(index, 0) + len(calls or ())
            if finish == "stop" and self.calls[index]:
                finish = "tool_calls"
            out += self.choice(index, text, thought, calls, finish, usage)
        return out

    def _piece(
        self, c: dict[str, Any], index: int, closing: bool
    ) -> tuple[str | None, str | None, list[dict[str, Any]] | None]:
        """(text, reasoning, tool call deltas) that one choice adds: a `delta` is new text;
        a whole `message` (or v1 `messages`) on a closing event may repeat what was sent."""
        delta = c.get("delta")
        if isinstance(delta, str):
            return delta, None, None
        if isinstance(delta, dict):
            calls = delta.get("tool_calls")
            return (
                text_of(delta.get("content")),
                text_of(delta.get("reasoning_content")),
                [{"index": n, **t} if "index" not in t else t for n, t in enumerate(calls)]
                if isinstance(calls, list) and all(isinstance(t, dict) for t in calls)
                else None,
            )
        msg = c.get("message")
        if isinstance(msg, dict):
            text, thought = text_of(msg.get("content")), text_of(msg.get("reasoning_content"))
            calls = None
            if not self.calls.get(index) and isinstance(msg.get("tool_calls"), list):
                calls = [
                    {"index": n, **tool_call(str(t.get("id") or f"call_{n}"), *_fn(t))}
                    for n, t in enumerate(msg["tool_calls"])
                    if isinstance(t, dict)
                ]
        else:
            text, thought, calls = _v1_text(c), None, None
        if closing:
            text = _unseen(self.text.get(index, ""), text or "")
            thought = _unseen(self.thought.get(index, ""), thought or "")
        return text, thought, calls


def _fn(call: dict[str, Any]) -> tuple[str, Any]:
    fn = object_at(call, "function")
    return str(fn.get("name", "")), fn.get("arguments", "{}")


V1 = Minimax()
V2 = MinimaxV2()
DIALECT = V1
