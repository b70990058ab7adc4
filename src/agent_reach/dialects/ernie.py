"""Baidu ERNIE (Wenxin) legacy chat API: `POST …/wenxinworkshop/chat/{model}?access_token=…`.

The model is part of the URL, not the body: an endpoint may say `{model}` where the model name
goes (`…/chat/{model}`), else it is used as is (`…/chat/completions_pro`). The access token goes
in the query through the provider's `auth_query: access_token`.

The request takes the system prompt as a top-level `system`, only user/assistant turns (which
must alternate: consecutive turns of one role are joined by a newline), `max_output_tokens`,
`temperature` in (0, 1] (clamped), `stop`, and OpenAI tools as `functions`; a tool result
becomes a `function` turn. The answer is one string, `result` (`schema_compatibility` default
`result` with an empty content path), with `finish_reason` such as "normal" and
`need_clear_history` when the input was flagged (→ `content_filter`); a `function_call` becomes
an OpenAI tool call.

The stream is SSE `data: {…, "result": "piece", "is_end": false}` with no `[DONE]`: the event
with `is_end: true` (carrying usage) ends it.

Errors come inside HTTP 200 bodies as `{"error_code": 110, "error_msg": …}`: 110/111 (access
token) and 13/14 map to 401, 4/17/18/19 and 336501-336503 (limits) to 429, other 336xxx
(request errors) to 400, 1/2/336000/336100 and unknown codes to 5xx.
"""

from __future__ import annotations

from typing import Any

from ..chat import completion
from ..core.outcomes import ErrorInfo
from .base import Context, Decoder, Dialect, Mismatch, openai_error
from .convert import (
    bounded,
    content_at,
    functions_of,
    model_of,
    object_at,
    put_max_tokens,
    split_system,
    stop_list,
    text_of,
    tool_call,
    tool_names,
    with_model,
)

_STATUS = {
    1: 500,
    2: 503,
    3: 400,
    4: 429,
    6: 403,
    13: 401,
    14: 401,
    15: 403,
    17: 429,
    18: 429,
    19: 429,
    100: 400,
    110: 401,
    111: 401,
    336000: 500,
    336100: 500,
    336501: 429,
    336502: 429,
    336503: 429,
}


def _status(code: int) -> int:
    if code in _STATUS:
        return _STATUS[code]
    return 400 if 336000 <= code < 337000 else 500


def _messages(turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    names = tool_names(turns)
    out: list[dict[str, Any]] = []
    for m in turns:
        text = text_of(m.get("content")) or ""
        if m.get("role") == "tool":
            name = names.get(str(m.get("tool_call_id")), str(m.get("name") or ""))
            out.append({"role": "function", "name": name, "content": text})
            continue
        role = "assistant" if m.get("role") == "assistant" else "user"
        calls = m.get("tool_calls") if role == "assistant" else None
        if isinstance(calls, list) and calls and isinstance(calls[0], dict):
            fn = object_at(calls[0], "function")
            call = {"name": str(fn.get("name", "")), "arguments": fn.get("arguments") or "{}"}
            out.append({"role": "assistant", "content": text, "function_call": call})
        elif out and out[-1]["role"] == role and "function_call" not in out[-1]:
            out[-1]["content"] = "\n".join(t for t in (out[-1]["content"], text) if t)
        else:
            out.append({"role": role, "content": text})
    return out


def _usage(value: Any) -> dict[str, int] | None:
    if not isinstance(value, dict):
        return None
    return completion.usage(
        value.get("prompt_tokens"), value.get("completion_tokens"), value.get("total_tokens")
    )


def _calls(raw: dict[str, Any], index: int | None = None) -> list[dict[str, Any]] | None:
    """ERNIE's one `function_call` as OpenAI tool calls (as a stream delta with `index`)."""
    fn = raw.get("function_call")
    if not isinstance(fn, dict) or not fn.get("name"):
        return None
    call = tool_call(f"call_{raw.get('id') or 0}", str(fn["name"]), fn.get("arguments", "{}"))
    return [call if index is None else {"index": index, **call}]


def _finish(raw: dict[str, Any], calls: list[dict[str, Any]] | None) -> str | None:
    if calls:
        return "tool_calls"
    if raw.get("need_clear_history") is True:
        return "content_filter"
    if raw.get("is_truncated") is True and not raw.get("finish_reason"):
        return "length"
    return completion.finish_reason(raw.get("finish_reason"))


class Ernie(Dialect):
    """ERNIE's legacy `result` format."""

    name = "ernie"
    choices_path = "result"
    content_path = ""
    max_tokens_field = "max_output_tokens"

    def url(self, endpoint: str, model: str, stream: bool) -> str:
        return with_model(endpoint, model)

    def needs_model(self, endpoint: str) -> bool:
        return self.model_in_url(endpoint)

    def model_in_url(self, endpoint: str) -> bool:
        return "{model}" in endpoint  # ERNIE's model is its URL's last segment

    def body(
        self, request: dict[str, Any], model: str, stream: bool, max_tokens_field: str
    ) -> dict[str, Any]:
        system, turns = split_system(request.get("messages"))
        body: dict[str, Any] = {"messages": _messages(turns), "stream": stream}
        if system:
            body["system"] = system
        for key, low, high in (("temperature", 0.01, 1.0), ("top_p", 0.0, 1.0)):
            value = bounded(request.get(key), low, high)
            if value is not None:
                body[key] = value
        stop = stop_list(request)
        if stop:
            body["stop"] = stop
        put_max_tokens(request, body, max_tokens_field)
        functions = functions_of(request)
        if functions:
            body["functions"] = functions
        if isinstance(request.get("user"), str):
            body["user_id"] = request["user"]
        fmt = request.get("response_format")
        if isinstance(fmt, dict) and fmt.get("type") in ("json_object", "json_schema"):
            body["response_format"] = "json_object"
        return body

    def error_of(self, body: Any) -> ErrorInfo | None:
        if isinstance(body, dict) and body.get("error_code") not in (None, 0, "0"):
            raw = body["error_code"]
            code = int(raw) if isinstance(raw, int) or str(raw).isdigit() else None
            message = str(body.get("error_msg") or f"ERNIE error {raw}")
            return ErrorInfo(message, str(raw), _status(code) if code is not None else None)
        return openai_error(body)

    def normalize(self, raw: Any, ctx: Context) -> dict[str, Any]:
        _, content = content_at(raw, ctx.shape)
        calls = _calls(raw)
        return completion.completion(
            id=raw["id"] if isinstance(raw.get("id"), str) and raw["id"] else None,
            model=model_of(raw, ctx),
            created=raw["created"] if isinstance(raw.get("created"), int) else ctx.created,
            choices=[
                completion.choice(
                    completion.message(content if content or not calls else None, tool_calls=calls),
                    _finish(raw, calls),
                )
            ],
            usage=_usage(raw.get("usage")),
        )

    def decoder(self, ctx: Context) -> Decoder:
        return ErnieDecoder(ctx, self)


class ErnieDecoder(Decoder):
    """ERNIE `data:` events (`result` pieces until `is_end`) as OpenAI chunks."""

    def __init__(self, ctx: Context, dialect: Dialect) -> None:
        super().__init__(ctx, dialect)
        self.called = False

    def feed(self, event: str | None, data: bytes) -> list[dict[str, Any]]:
        obj = self.frame_object(event, data)
        if "result" not in obj and "is_end" not in obj:
            raise Mismatch("stream event has neither result nor is_end")
        if isinstance(obj.get("id"), str) and obj["id"]:
            self.id = obj["id"]
        calls = _calls(obj, 0)
        self.called = self.called or bool(calls)
        end = obj.get("is_end") is True
        result = obj.get("result")
        return self.emit(
            content=result if isinstance(result, str) else None,
            tool_calls=calls,
            finish=("tool_calls" if self.called else _finish(obj, None)) if end else None,
            usage=_usage(obj.get("usage")) if end else None,
        )


DIALECT = Ernie()
