"""Alibaba DashScope's native text-generation API (Qwen):
`POST …/api/v1/services/aigc/text-generation/generation`.

The request nests the chat under `input.messages` and every setting under `parameters`
(`result_format: "message"` always, so the answer comes as `output.choices`; the legacy
`output.text` form is read too). The output cap is `parameters.max_tokens`.

Streaming is switched on by the header `X-DashScope-SSE: enable` (`stream_headers`), not by the
body; the body then asks for `incremental_output: true`, so every event carries only the new
text (an `extra_body` that turns it off is not supported). The stream is SSE without a space
after `data:`, with `id:`/`event:` lines and `:HTTP_STATUS/200` comments, and no `[DONE]`:
`finish_reason` is the string "null" until the last event, which ends the stream. Usage is
cumulative, so it is sent once, on the last chunk.

Errors are `{"code": "InvalidApiKey", "message": …, "request_id": …}`, also as an `error`
event inside a stream; the code maps to a status (InvalidApiKey 401, Throttling.* 429,
Arrearage 402, InvalidParameter 400, …).
"""

from __future__ import annotations

from typing import Any

from ..chat import completion
from ..core.outcomes import ErrorInfo
from .base import Context, Decoder, Dialect, Mismatch, openai_error
from .convert import (
    content_at,
    is_default_shape,
    model_of,
    object_at,
    put_max_tokens,
    require_object,
    stop_list,
    text_of,
    tool_call,
)

_PARAMETERS = (
    "temperature",
    "top_p",
    "top_k",
    "seed",
    "presence_penalty",
    "repetition_penalty",
    "n",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "response_format",
    "enable_thinking",
    "thinking_budget",
    "enable_search",
    "logprobs",
    "top_logprobs",
)
_MESSAGE_KEYS = ("role", "name", "tool_calls", "tool_call_id", "partial")

_STATUS = {
    "InvalidApiKey": 401,
    "AccessDenied": 403,
    "Arrearage": 402,
    "InvalidParameter": 400,
    "DataInspectionFailed": 400,
    "ModelNotFound": 404,
    "InternalError": 500,
    "SystemError": 500,
    "ServiceUnavailable": 503,
    "RequestTimeOut": 504,
}
_STATUS_PREFIXES = (("Throttling", 429), ("InternalError", 500), ("AccessDenied", 403))


def _status(code: str) -> int | None:
    if code in _STATUS:
        return _STATUS[code]
    for prefix, status in _STATUS_PREFIXES:
        if code.startswith(prefix):
            return status
    return None


def _messages(messages: Any) -> list[dict[str, Any]]:
    out = []
    for m in messages if isinstance(messages, list) else []:
        if isinstance(m, dict):
            msg = {k: m[k] for k in _MESSAGE_KEYS if m.get(k) is not None}
            msg["content"] = text_of(m.get("content")) or ""
            out.append(msg)
    return out


def _usage(value: Any) -> dict[str, Any] | None:
    if not isinstance(value, dict):
        return None
    out: dict[str, Any] | None = completion.usage(
        value.get("input_tokens"), value.get("output_tokens"), value.get("total_tokens")
    )
    details = value.get("output_tokens_details")
    if out is not None and isinstance(details, dict) and "reasoning_tokens" in details:
        out["completion_tokens_details"] = {"reasoning_tokens": details["reasoning_tokens"]}
    cached = value.get("prompt_tokens_details")
    if out is not None and isinstance(cached, dict) and "cached_tokens" in cached:
        out["prompt_tokens_details"] = {"cached_tokens": cached["cached_tokens"]}
    return out


def _tool_calls(calls: Any, stream: bool = False) -> list[dict[str, Any]] | None:
    """DashScope's OpenAI-shaped tool calls, with ids and string arguments made sure of
    (as stream deltas: with their `index`, and only the fields that came)."""
    if not isinstance(calls, list) or not calls:
        return None
    out = []
    for i, call in enumerate(calls):
        if not isinstance(call, dict):
            continue
        fn = object_at(call, "function")
        if stream:
            piece: dict[str, Any] = {"index": call.get("index", i)}
            if call.get("id"):
                piece["id"], piece["type"] = str(call["id"]), "function"
            piece["function"] = {k: str(fn[k]) for k in ("name", "arguments") if fn.get(k)}
            out.append(piece)
        else:
            out.append(
                tool_call(
                    str(call.get("id") or f"call_{i}"),
                    str(fn.get("name", "")),
                    fn.get("arguments", "{}"),
                )
            )
    return out or None


class DashScope(Dialect):
    """DashScope's native text-generation format."""

    name = "dashscope"
    choices_path = "output.choices"
    content_path = "message.content"

    def stream_headers(self) -> dict[str, str]:
        return {"X-DashScope-SSE": "enable"}

    def body(
        self, request: dict[str, Any], model: str, stream: bool, max_tokens_field: str
    ) -> dict[str, Any]:
        params: dict[str, Any] = {"result_format": "message"}
        params.update({k: request[k] for k in _PARAMETERS if request.get(k) is not None})
        stop = stop_list(request)
        if stop:
            params["stop"] = stop
        if stream:
            params["incremental_output"] = True
        body: dict[str, Any] = {
            "input": {"messages": _messages(request.get("messages"))},
            "parameters": params,
        }
        if model:
            body["model"] = model
        put_max_tokens(request, body, max_tokens_field, {self.max_tokens_field: params})
        return body

    def error_of(self, body: Any) -> ErrorInfo | None:
        if isinstance(body, dict) and "output" not in body:
            code = body.get("code")
            if isinstance(code, str) and code:
                message = body.get("message")
                return ErrorInfo(str(message or code), code, _status(code))
        return openai_error(body)

    def normalize(self, raw: Any, ctx: Context) -> dict[str, Any]:
        raw = require_object(raw)
        output = object_at(raw, "output")
        if not is_default_shape(ctx.shape, (self.choices_path, self.content_path)):
            found, content = content_at(raw, ctx.shape)
            finish = found.get("finish_reason") if isinstance(found, dict) else None
            message = completion.message(content)
            choices = [completion.choice(message, completion.finish_reason(finish))]
        elif isinstance(output.get("choices"), list) and output["choices"]:
            choices = [self._choice(c, i) for i, c in enumerate(output["choices"])]
        elif isinstance(output.get("text"), str):  # result_format "text"
            finish = completion.finish_reason(output.get("finish_reason"))
            choices = [completion.choice(completion.message(output["text"]), finish)]
        else:
            raise Mismatch("no output.choices or output.text")
        request_id = raw.get("request_id")
        return completion.completion(
            id=request_id if isinstance(request_id, str) and request_id else None,
            model=model_of(raw, ctx),
            created=ctx.created,
            choices=choices,
            usage=_usage(raw.get("usage")),
        )

    @staticmethod
    def _choice(c: Any, i: int) -> dict[str, Any]:
        if not isinstance(c, dict) or not isinstance(c.get("message"), dict):
            raise Mismatch(f"output.choices[{i}] has no message")
        msg = c["message"]
        calls = _tool_calls(msg.get("tool_calls"))
        finish = "tool_calls" if calls else completion.finish_reason(c.get("finish_reason"))
        message = completion.message(
            text_of(msg.get("content")),
            tool_calls=calls,
            reasoning=text_of(msg.get("reasoning_content")),
        )
        return completion.choice(
            message, finish, c["index"] if isinstance(c.get("index"), int) else i
        )

    def decoder(self, ctx: Context) -> Decoder:
        return DashScopeDecoder(ctx, self)


class DashScopeDecoder(Decoder):
    """DashScope events (incremental output) as OpenAI chunks."""

    def __init__(self, ctx: Context, dialect: Dialect) -> None:
        super().__init__(ctx, dialect)
        self.calls = False

    def feed(self, event: str | None, data: bytes) -> list[dict[str, Any]]:
        obj = self.frame_object(event, data)
        if isinstance(obj.get("request_id"), str) and obj["request_id"]:
            self.id = obj["request_id"]
        output = obj.get("output")
        if not isinstance(output, dict):
            raise Mismatch("stream event has no output")
        usage = _usage(obj.get("usage"))
        if isinstance(output.get("choices"), list):
            out = []
            for i, c in enumerate(output["choices"]):
                if not isinstance(c, dict):
                    raise Mismatch("stream choice is not an object")
                msg = object_at(c, "message")
                calls = _tool_calls(msg.get("tool_calls"), stream=True)
                self.calls = self.calls or bool(calls)
                finish = completion.finish_reason(c.get("finish_reason"), None)
                if finish == "stop" and self.calls:
                    finish = "tool_calls"
                index = c["index"] if isinstance(c.get("index"), int) else i
                text, reasoning = text_of(msg.get("content")), text_of(msg.get("reasoning_content"))
                out += self.choice(index, text, reasoning, calls, finish, usage)
            return out
        finish = completion.finish_reason(output.get("finish_reason"), None)
        return self.choice(0, text_of(output.get("text")), None, None, finish, usage)


DIALECT = DashScope()
