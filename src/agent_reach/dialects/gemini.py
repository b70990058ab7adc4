"""Google Gemini's `generateContent` API (Generative Language, `v1beta`).

The model and the stream flag are in the URL: `…/models/{model}:generateContent`, and for a
stream `…/models/{model}:streamGenerateContent?alt=sse`. The endpoint in the config may be:

- the models collection, `https://generativelanguage.googleapis.com/v1beta/models` (the usual
  form): the model of each request is appended;
- a template with `{model}`, e.g. `…/v1beta/models/{model}:generateContent`;
- a full URL for one model, `…/v1beta/models/gemini-2.0-flash:generateContent`.

In each case the method becomes `streamGenerateContent` plus `alt=sse` for stream requests.
The key goes in the header `x-goog-api-key` (the default `auth_header` of this format) or in the
query (`auth_query: key`).

The body takes the system prompt as `systemInstruction`, the turns as `contents` with `parts`
and the roles `user` and `model` (turns of one role in a row are joined; a tool result is a
`functionResponse` part of a user turn, an assistant tool call a `functionCall` part; images
are `inlineData` for `data:` URLs, else `fileData`), and the settings in `generationConfig`
(`temperature`, `topP`, `maxOutputTokens`, `stopSequences`, `candidateCount`, …). OpenAI
tools become `functionDeclarations`, `tool_choice` a `functionCallingConfig`.

The answer is `candidates[].content.parts[]`: text parts make the content (parts marked
`thought` the `reasoning_content`), `functionCall` parts OpenAI tool calls. `finishReason`
STOP → stop, MAX_TOKENS → length, SAFETY/RECITATION/… → content_filter. Usage comes from
`usageMetadata` (thought tokens count as completion tokens and as reasoning tokens); the model
from `modelVersion`. A prompt that Gemini blocks comes back without candidates and with
`promptFeedback.blockReason`: that is `content_blocked`, naming the block reason (as an answer
whose content was filtered away, `finishReason: SAFETY` with no text, is).

The stream (`alt=sse`) is `data: {GenerateContentResponse}` events with no terminal marker: the
event whose candidate has a `finishReason` ends it. Errors are
`{"error": {"code": 400, "status": "INVALID_ARGUMENT", "message", "details": [{"reason"}]}}`;
a bad key is HTTP 400 with reason `API_KEY_INVALID` (→ 401, `auth_failed`), quota is
`RESOURCE_EXHAUSTED` (→ 429).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

from .. import completion
from ..outcomes import ErrorInfo
from ..trace import Reason
from .base import (
    Context,
    Decoder,
    Dialect,
    Mismatch,
    loads,
    openai_error,
)
from .convert import (
    arguments_of,
    bounded,
    content_at,
    data_url,
    functions_of,
    is_default_shape,
    merge_turns,
    model_of,
    parts_of,
    put_max_tokens,
    require_object,
    split_system,
    stop_list,
    text_of,
    tool_call,
    tool_choice_of,
    tool_names,
    with_model,
)

_METHOD = re.compile(r":(?:streamGenerateContent|generateContent)$")
_REASON_STATUS = {
    "API_KEY_INVALID": 401,
    "API_KEY_EXPIRED": 401,
    "API_KEY_SERVICE_BLOCKED": 403,
    "SERVICE_DISABLED": 403,
    "RATE_LIMIT_EXCEEDED": 429,
}
_STATUS = {
    "INVALID_ARGUMENT": 400,
    "FAILED_PRECONDITION": 400,
    "OUT_OF_RANGE": 400,
    "UNAUTHENTICATED": 401,
    "PERMISSION_DENIED": 403,
    "NOT_FOUND": 404,
    "RESOURCE_EXHAUSTED": 429,
    "INTERNAL": 500,
    "UNAVAILABLE": 503,
    "DEADLINE_EXCEEDED": 504,
}
_CALLING_MODE = {"auto": "AUTO", "required": "ANY", "none": "NONE", "function": "ANY"}
_CONFIG = (
    ("top_k", "topK"),
    ("n", "candidateCount"),
    ("seed", "seed"),
    ("presence_penalty", "presencePenalty"),
    ("frequency_penalty", "frequencyPenalty"),
)


def _parts(content: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for kind, value in parts_of(content):
        if kind == "text":
            out.append({"text": value})
        elif inline := data_url(value):
            out.append({"inlineData": {"mimeType": inline[0], "data": inline[1]}})
        else:
            out.append({"fileData": {"fileUri": value}})
    return out


def _response(content: Any) -> dict[str, Any]:
    """A tool result as the object `functionResponse.response` wants."""
    text = text_of(content) or ""
    try:
        value = loads(text.encode())
    except Mismatch:
        value = None
    return value if isinstance(value, dict) else {"content": text}


def _turns(messages: list[dict[str, Any]]) -> Iterator[tuple[str, list[Any]]]:
    names = tool_names(messages)
    for m in messages:
        role = m.get("role")
        if role == "tool":
            name = names.get(str(m.get("tool_call_id")), str(m.get("name") or ""))
            part = {"functionResponse": {"name": name, "response": _response(m.get("content"))}}
            yield "user", [part]
        elif role == "assistant":
            parts = _parts(m.get("content"))
            for call in m.get("tool_calls") or ():
                fn = call.get("function") if isinstance(call, dict) else None
                if isinstance(fn, dict):
                    parts.append(
                        {
                            "functionCall": {
                                "name": str(fn.get("name", "")),
                                "args": arguments_of(call),
                            }
                        }
                    )
            yield "model", parts
        else:
            yield "user", _parts(m.get("content"))


def _generation_config(request: dict[str, Any]) -> dict[str, Any]:
    config: dict[str, Any] = {}
    for key, name, high in (("temperature", "temperature", 2.0), ("top_p", "topP", 1.0)):
        value = bounded(request.get(key), 0.0, high)
        if value is not None:
            config[name] = value
    config.update({name: request[key] for key, name in _CONFIG if request.get(key) is not None})
    stop = stop_list(request)
    if stop:
        config["stopSequences"] = stop
    fmt = request.get("response_format")
    if isinstance(fmt, dict) and fmt.get("type") in ("json_object", "json_schema"):
        config["responseMimeType"] = "application/json"
    return config


def _tool_config(request: dict[str, Any]) -> dict[str, Any] | None:
    choice = tool_choice_of(request)
    if choice is None:
        return None
    mode, name = choice
    calling: dict[str, Any] = {"mode": _CALLING_MODE[mode]}
    if name:
        calling["allowedFunctionNames"] = [name]
    return {"functionCallingConfig": calling}


def _usage(value: Any) -> dict[str, Any] | None:
    if not isinstance(value, dict):
        return None
    outputs = [
        value[k]
        for k in ("candidatesTokenCount", "thoughtsTokenCount")
        if isinstance(value.get(k), int)
    ]
    out: dict[str, Any] | None = completion.usage(
        value.get("promptTokenCount"),
        sum(outputs) if outputs else None,
        value.get("totalTokenCount"),
    )
    if out is None:
        return None
    if isinstance(value.get("thoughtsTokenCount"), int):
        out["completion_tokens_details"] = {"reasoning_tokens": value["thoughtsTokenCount"]}
    if isinstance(value.get("cachedContentTokenCount"), int):
        out["prompt_tokens_details"] = {"cached_tokens": value["cachedContentTokenCount"]}
    return out


def _block_reason(raw: dict[str, Any]) -> str | None:
    feedback = raw.get("promptFeedback")
    reason = feedback.get("blockReason") if isinstance(feedback, dict) else None
    return str(reason) if reason else None


def _blocked(raw: dict[str, Any]) -> ErrorInfo | None:
    """A prompt Gemini blocked: no candidates, and `promptFeedback.blockReason`."""
    reason = _block_reason(raw)
    if reason is None or raw.get("candidates"):
        return None
    message = f"Gemini blocked the prompt (promptFeedback.blockReason {reason})"
    return ErrorInfo(message, reason, None, Reason.CONTENT_BLOCKED)


def _pieces(candidate: Any) -> tuple[str, str, list[dict[str, Any]]]:
    """(text, thought text, functionCall objects) of one candidate."""
    content = candidate.get("content") if isinstance(candidate, dict) else None
    parts = content.get("parts") if isinstance(content, dict) else None
    text: list[str] = []
    thought: list[str] = []
    calls: list[dict[str, Any]] = []
    for p in parts if isinstance(parts, list) else []:
        if not isinstance(p, dict):
            continue
        if isinstance(p.get("functionCall"), dict):
            calls.append(p["functionCall"])
        elif isinstance(p.get("text"), str):
            (thought if p.get("thought") is True else text).append(p["text"])
    return "".join(text), "".join(thought), calls


def _finish(candidate: dict[str, Any], called: bool, default: str | None) -> str | None:
    finish = completion.finish_reason(candidate.get("finishReason"), default)
    return "tool_calls" if called and finish == "stop" else finish


class Gemini(Dialect):
    """Gemini's generateContent format."""

    name = "gemini"
    auth_header = "x-goog-api-key"
    choices_path = "candidates"
    content_path = "content.parts.0.text"
    max_tokens_field = "maxOutputTokens"

    def url(self, endpoint: str, model: str, stream: bool) -> str:
        base, _, query = endpoint.partition("?")
        model = model.removeprefix("models/")
        if "{model}" in base:
            base = with_model(base, model)
        elif not _METHOD.search(base):
            base = f"{base.rstrip('/')}/{quote(model, safe='')}:generateContent"
        base = _METHOD.sub(":streamGenerateContent" if stream else ":generateContent", base)
        params = [query] if query else []
        if stream and not re.search(r"(^|&)alt=", query):
            params.append("alt=sse")
        return base + ("?" + "&".join(params) if params else "")

    def needs_model(self, endpoint: str) -> bool:
        base = endpoint.partition("?")[0]
        return "{model}" in base or not _METHOD.search(base)

    def body(
        self, request: dict[str, Any], model: str, stream: bool, max_tokens_field: str
    ) -> dict[str, Any]:
        system, turns = split_system(request.get("messages"))
        body: dict[str, Any] = {
            "contents": [{"role": r, "parts": p} for r, p in merge_turns(_turns(turns))]
        }
        if system:
            body["systemInstruction"] = {"parts": [{"text": system}]}
        config = _generation_config(request)
        put_max_tokens(request, body, max_tokens_field, {self.max_tokens_field: config})
        if config:
            body["generationConfig"] = config
        functions = functions_of(request)
        if functions:
            body["tools"] = [{"functionDeclarations": functions}]
            tool_config = _tool_config(request)
            if tool_config:
                body["toolConfig"] = tool_config
        return body

    def error_of(self, body: Any) -> ErrorInfo | None:
        if isinstance(body, list) and body and isinstance(body[0], dict):
            body = body[0]  # the non-SSE stream form is a JSON array of responses
        err = body.get("error") if isinstance(body, dict) else None
        if not isinstance(err, dict):
            return (_blocked(body) if isinstance(body, dict) else None) or openai_error(body)
        name = err.get("status") if isinstance(err.get("status"), str) else None
        details = err["details"] if isinstance(err.get("details"), list) else []
        reason = next(
            (
                d["reason"]
                for d in details
                if isinstance(d, dict) and isinstance(d.get("reason"), str)
            ),
            None,
        )
        number = err.get("code") if isinstance(err.get("code"), int) else None
        status = _REASON_STATUS.get(reason or "") or _STATUS.get(name or "")
        if status is None and number is not None and number >= 400:
            status = number
        code = reason or name or (str(number) if number is not None else None)
        return ErrorInfo(str(err.get("message") or code or err), code, status)

    def normalize(self, raw: Any, ctx: Context) -> dict[str, Any]:
        raw = require_object(raw)
        candidates = raw.get("candidates")
        if not isinstance(candidates, list) or not candidates:
            raise Mismatch("no candidates")
        if is_default_shape(ctx.shape, (self.choices_path, self.content_path)):
            choices = [self._choice(c, i) for i, c in enumerate(candidates)]
        else:
            found, text = content_at(raw, ctx.shape)
            finish = _finish(found, False, "stop") if isinstance(found, dict) else "stop"
            choices = [completion.choice(completion.message(text), finish)]
        response_id = raw.get("responseId")
        return completion.completion(
            id=response_id if isinstance(response_id, str) and response_id else None,
            model=model_of(raw, ctx, native="modelVersion"),
            created=ctx.created,
            choices=choices,
            usage=_usage(raw.get("usageMetadata")),
        )

    @staticmethod
    def _choice(candidate: Any, i: int) -> dict[str, Any]:
        if not isinstance(candidate, dict):
            raise Mismatch(f"candidates[{i}] is not an object")
        text, thought, found = _pieces(candidate)
        calls = [
            tool_call(str(fc.get("id") or f"call_{n}"), str(fc.get("name", "")), fc.get("args"))
            for n, fc in enumerate(found)
        ]
        message = completion.message(
            text if text or not calls else None, tool_calls=calls, reasoning=thought or None
        )
        index = candidate["index"] if isinstance(candidate.get("index"), int) else i
        return completion.choice(message, _finish(candidate, bool(calls), "stop"), index)

    def decoder(self, ctx: Context) -> Decoder:
        return GeminiDecoder(ctx, self)


class GeminiDecoder(Decoder):
    """Gemini `alt=sse` events (each a whole GenerateContentResponse) as OpenAI chunks."""

    def __init__(self, ctx: Context, dialect: Dialect) -> None:
        super().__init__(ctx, dialect)
        self.calls: dict[int, int] = {}  # candidate index → tool calls so far

    def feed(self, event: str | None, data: bytes) -> list[dict[str, Any]]:
        obj = self.frame_object(event, data)
        if isinstance(obj.get("responseId"), str) and obj["responseId"]:
            self.id = obj["responseId"]
        if isinstance(obj.get("modelVersion"), str) and obj["modelVersion"]:
            self.model = obj["modelVersion"]
        candidates = obj.get("candidates")
        if not isinstance(candidates, list) or not candidates:
            if not isinstance(obj.get("usageMetadata"), dict):
                raise Mismatch("no candidates")
            return []  # a usage-only event
        usage = _usage(obj.get("usageMetadata"))
        out = []
        for i, c in enumerate(candidates):
            if not isinstance(c, dict):
                raise Mismatch("stream candidate is not an object")
            index = c["index"] if isinstance(c.get("index"), int) else i
            text, thought, found = _pieces(c)
            first = self.calls.get(index, 0)
            calls = [
                {
                    "index": first + n,
                    **tool_call(
                        str(fc.get("id") or f"call_{first + n}"),
                        str(fc.get("name", "")),
                        fc.get("args"),
                    ),
                }
                for n, fc in enumerate(found)
            ]
            self.calls[index] = first + len(calls)
            finish = _finish(c, self.calls[index] > 0, None)
            out += self.choice(index, text, thought, calls, finish, usage)
        return out


DIALECT = Gemini()
