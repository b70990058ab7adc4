"""Ollama's native API: `POST /api/chat`, NDJSON streams, sampling under `options`.

Ollama streams by default, so the body always says `stream` explicitly. Its tool calls carry
arguments as an object and no id; its usage is `prompt_eval_count` / `eval_count`.
"""

from __future__ import annotations

from typing import Any

import orjson

from ..chat import completion
from .base import Context, Decoder, Dialect
from .convert import content_at, model_of, parts_of, put_max_tokens, text_of

_OPTIONS = ("temperature", "top_p", "seed", "frequency_penalty", "presence_penalty", "top_k")


def _messages(messages: Any) -> list[dict[str, Any]]:
    out = []
    for m in messages if isinstance(messages, list) else []:
        if not isinstance(m, dict):
            continue
        msg = {k: v for k, v in m.items() if k not in ("content", "name")}
        content = m.get("content")
        msg["content"] = text_of(content) or ""
        if isinstance(content, list):
            images = [url.split(",", 1)[-1] for kind, url in parts_of(content) if kind == "image"]
            if images:
                msg["images"] = images
        out.append(msg)
    return out


def _tool_calls(calls: Any) -> list[dict[str, Any]] | None:
    if not isinstance(calls, list) or not calls:
        return None
    out = []
    for i, call in enumerate(calls):
        fn = call.get("function", {}) if isinstance(call, dict) else {}
        args = fn.get("arguments", {})
        out.append(
            {
                "id": call.get("id") or f"call_{i}",
                "type": "function",
                "function": {
                    "name": str(fn.get("name", "")),
                    "arguments": args if isinstance(args, str) else orjson.dumps(args).decode(),
                },
            }
        )
    return out


def _usage(raw: dict[str, Any]) -> dict[str, int] | None:
    return completion.usage(raw.get("prompt_eval_count"), raw.get("eval_count"))


class Ollama(Dialect):
    name = "ollama"
    framing = "ndjson"
    health_check = "tags"
    choices_path = "message"
    content_path = "content"
    max_tokens_field = "num_predict"

    def body(
        self, request: dict[str, Any], model: str, stream: bool, max_tokens_field: str
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"messages": _messages(request.get("messages")), "stream": stream}
        if model:
            body["model"] = model
        options = {k: request[k] for k in _OPTIONS if request.get(k) is not None}
        stop = request.get("stop")
        if stop is not None:
            options["stop"] = [stop] if isinstance(stop, str) else stop
        put_max_tokens(request, body, max_tokens_field, {"num_predict": options})
        if options:
            body["options"] = options
        fmt = request.get("response_format")
        if isinstance(fmt, dict) and fmt.get("type") in ("json_object", "json_schema"):
            schema = (fmt.get("json_schema") or {}).get("schema")
            body["format"] = schema if isinstance(schema, dict) else "json"
        if request.get("tools"):
            body["tools"] = request["tools"]
        return body

    def normalize(self, raw: Any, ctx: Context) -> dict[str, Any]:
        found, content = content_at(raw, ctx.shape)
        msg = found if isinstance(found, dict) else {}
        thinking = msg.get("thinking")
        return completion.completion(
            model=model_of(raw, ctx),
            created=ctx.created,
            choices=[
                completion.choice(
                    completion.message(
                        content,
                        tool_calls=_tool_calls(msg.get("tool_calls")),
                        reasoning=thinking if isinstance(thinking, str) else None,
                    ),
                    "tool_calls"
                    if msg.get("tool_calls")
                    else completion.finish_reason(raw.get("done_reason")),
                )
            ],
            usage=_usage(raw),
        )

    def decoder(self, ctx: Context) -> Decoder:
        return OllamaDecoder(ctx, self)


class OllamaDecoder(Decoder):
    def __init__(self, ctx: Context, dialect: Dialect) -> None:
        super().__init__(ctx, dialect)
        self.started = False

    def feed(self, event: str | None, data: bytes) -> list[dict[str, Any]]:
        obj = self.frame_object(event, data)
        msg: dict[str, Any] = obj["message"] if isinstance(obj.get("message"), dict) else {}
        delta: dict[str, Any] = {}
        if not self.started:
            delta["role"] = "assistant"
            self.started = True
        if isinstance(msg.get("content"), str) and msg["content"]:
            delta["content"] = msg["content"]
        if isinstance(msg.get("thinking"), str) and msg["thinking"]:
            delta["reasoning_content"] = msg["thinking"]
        calls = _tool_calls(msg.get("tool_calls"))
        if calls:
            delta["tool_calls"] = [{"index": i, **c} for i, c in enumerate(calls)]
        if not obj.get("done"):
            return [self.chunk(delta=delta)] if delta else []
        self.finished = True
        finish = "tool_calls" if calls else completion.finish_reason(obj.get("done_reason"))
        return [self.chunk(delta=delta, finish=finish, usage=_usage(obj))]


DIALECT = Ollama()
