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
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import quote

import orjson

from ..chat import completion
from ..chat.checks import (
    BOOLEAN,
    INT32_MAX,
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
    refused,
    shape,
)
from ..core.errors import RequestError
from ..core.outcomes import ErrorInfo
from ..core.trace import Reason
from .base import Context, Decoder, Dialect, Inbound, Mismatch, loads, openai_error
from .convert import (
    arguments_of,
    bounded,
    content_at,
    data_url,
    functions_of,
    is_default_shape,
    merge_turns,
    model_of,
    object_at,
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
from .tokens import input_tokens

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
    speaks = "gemini"
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

    def native_body(self, request: dict[str, Any], model: str, stream: bool) -> dict[str, Any]:
        """A Gemini API request as it came: the model and the stream are in the URL."""
        return {k: v for k, v in request.items() if k != "agent_reach"}

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


# -- the other direction: clients that speak the Gemini API to the proxy (Gemini CLI) ---------

_PART = shape(
    {
        "text": STRING,
        "thought": BOOLEAN,
        "inlineData": shape({"mimeType": STRING, "data": STRING}, ("data",)),
        "fileData": shape({"mimeType": STRING, "fileUri": STRING}, ("fileUri",)),
        "functionCall": shape({"id": STRING, "name": NAME, "args": OBJECT}, ("name",)),
        "functionResponse": shape({"id": STRING, "name": STRING, "response": OBJECT}, ("name",)),
    },
    expected="a part object",
)
_CONTENT = shape(
    {"role": STRING, "parts": array_of(_PART, "an array of parts")},
    ("parts",),
    "a content object with 'parts'",
)
_DECLARATION = shape(
    {"name": NAME, "description": STRING, "parameters": OBJECT},
    ("name",),
    "a function declaration",
)
# The generateContent request, field by field (`contents` is also required), as the published
# schema types them: a value judgment it does not make is left to the provider.
FIELDS: Mapping[str, Check] = {
    "contents": array_of(_CONTENT, "a non-empty array of contents", nonempty=True),
    "systemInstruction": either(STRING, _CONTENT, expected="a content object"),
    "tools": array_of(
        shape({"functionDeclarations": array_of(_DECLARATION, "an array of declarations")}),
        "an array of tools",
    ),
    "toolConfig": shape(
        {"functionCallingConfig": shape({"mode": STRING, "allowedFunctionNames": STRINGS})}
    ),
    "generationConfig": shape(
        {
            "temperature": number(0, 2),
            "topP": number(0, 1),
            "topK": number(0, INT32_MAX),
            "candidateCount": integer(1, INT32_MAX),
            "maxOutputTokens": integer(-INT32_MAX - 1, INT32_MAX),  # an int32, no range
            "stopSequences": STRINGS,
            "seed": integer(-INT32_MAX - 1, INT32_MAX),
            "presencePenalty": number(-2, 2),
            "frequencyPenalty": number(-2, 2),
            "responseMimeType": STRING,
            "responseSchema": OBJECT,
            "thinkingConfig": OBJECT,
        }
    ),
}
_READ = frozenset({"contents", "systemInstruction", "tools", "toolConfig", "generationConfig"})
_SAMPLING = (
    ("temperature", "temperature"),
    ("topP", "top_p"),
    ("seed", "seed"),
    ("presencePenalty", "presence_penalty"),
    ("frequencyPenalty", "frequency_penalty"),
    ("maxOutputTokens", "max_tokens"),
    ("stopSequences", "stop"),
)
_GENERATION_READ = frozenset(
    {name for name, _ in _SAMPLING}
    | {"candidateCount", "responseMimeType", "responseSchema", "responseJsonSchema"}
)
_CHAT_MODE = {"AUTO": "auto", "ANY": "required", "VALIDATED": "auto", "NONE": "none"}
_FINISH_OUT = {"length": "MAX_TOKENS", "content_filter": "SAFETY"}
# Google's status names for the HTTP statuses the proxy answers (google.rpc.Code).
STATUS_NAMES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    405: "INVALID_ARGUMENT",
    408: "DEADLINE_EXCEEDED",
    409: "ABORTED",
    413: "INVALID_ARGUMENT",
    415: "INVALID_ARGUMENT",
    417: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


def read_request(request: Any, model: str, stream: bool) -> Inbound:
    """A generateContent request for `model` (from its URL) as the engine's chat request;
    `RequestError` (a 400) names what is wrong. What a chat provider is not sent is named in
    `dropped`: top-level fields (`safetySettings`, `cachedContent`, …), `generationConfig`
    fields (`topK`, `thinkingConfig`, …), thought parts and signatures, inline data and file
    parts that are not images (a file part without a type is taken for an image, as this
    format sends image URLs), and tools other than function declarations
    (`tools:googleSearch`)."""
    if not isinstance(request, dict):
        raise RequestError("the request must be a JSON object")
    if request.get("contents") is None:
        raise refused("contents", f"is required: {FIELDS['contents'].expected}")
    check_fields(request, FIELDS)
    dropped: dict[str, None] = dict.fromkeys(k for k in request if k not in _READ)
    chat: list[dict[str, Any]] = []
    system = _instruction(request.get("systemInstruction"), dropped)
    if system:
        chat.append({"role": "system", "content": system})
    calls: list[tuple[str, str]] = []  # (id, name) of the last model turn's calls, unanswered
    for i, content in enumerate(request["contents"]):
        if content.get("role") == "model":
            message, calls = _model_turn(i, content["parts"], dropped)
            chat.append(message)
        else:
            chat.extend(_user_turn(i, content["parts"], calls, dropped))
    body: dict[str, Any] = {"model": model, "messages": chat}
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    _read_generation(object_at(request, "generationConfig"), body, dropped)
    _read_tools(request, body, dropped)
    return Inbound(body, tuple(dropped))


def _instruction(value: Any, dropped: dict[str, None]) -> str:
    if isinstance(value, str):
        return value
    if not isinstance(value, dict):
        return ""
    texts = []
    for part in value.get("parts") or ():
        if isinstance(part.get("text"), str):
            texts.append(part["text"])
        else:
            dropped["systemInstruction.parts"] = None
    return "\n\n".join(texts)


def _call_id(part: dict[str, Any], turn: int, n: int) -> str:
    """A function call's id: its own, or one made from its place in the conversation, which
    is the same on every turn that resends it (a cached prefix stays the same bytes)."""
    given = part.get("id")
    return given if isinstance(given, str) and given else f"call_{turn}_{n}"


def _model_turn(
    turn: int, parts: list[dict[str, Any]], dropped: dict[str, None]
) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for part in parts:
        call = part.get("functionCall")
        if part.get("thought") is True:
            dropped["thought"] = None  # reasoning and its signature belong to its provider
        elif isinstance(call, dict):
            call_id = _call_id(call, turn, len(calls))
            calls.append(tool_call(call_id, str(call["name"]), call.get("args") or {}))
        elif isinstance(part.get("text"), str):
            texts.append(part["text"])
        else:
            dropped[_part_kind(part)] = None
    if any("thoughtSignature" in p for p in parts):
        dropped["thoughtSignature"] = None
    message: dict[str, Any] = {
        "role": "assistant",
        "content": "".join(texts) if texts else None if calls else "",
    }
    if calls:
        message["tool_calls"] = calls
    return message, [(c["id"], c["function"]["name"]) for c in calls]


def _user_turn(
    turn: int,
    parts: list[dict[str, Any]],
    calls: list[tuple[str, str]],
    dropped: dict[str, None],
) -> list[dict[str, Any]]:
    """A user turn: its function responses first (as tool messages answering the model's
    calls, matched by id, else by name in order), then one user message with the rest."""
    out: list[dict[str, Any]] = []
    content: list[dict[str, Any]] = []
    for n, part in enumerate(parts):
        response = part.get("functionResponse")
        inline, file = part.get("inlineData"), part.get("fileData")
        if isinstance(response, dict):
            call_id = _answered(response, calls) or _call_id(response, turn, n)
            text = orjson.dumps(response.get("response") or {}).decode()
            out.append({"role": "tool", "tool_call_id": call_id, "content": text})
        elif isinstance(part.get("text"), str):
            content.append({"type": "text", "text": part["text"]})
        elif isinstance(inline, dict) and str(inline.get("mimeType", "")).startswith("image/"):
            url = f"data:{inline['mimeType']};base64,{inline['data']}"
            content.append({"type": "image_url", "image_url": {"url": url}})
        elif isinstance(file, dict) and str(file.get("mimeType", "image/")).startswith("image/"):
            content.append({"type": "image_url", "image_url": {"url": file["fileUri"]}})
        else:
            dropped[_part_kind(part)] = None
    if content or not out:
        plain = all(p["type"] == "text" for p in content)
        joined: Any = "".join(p["text"] for p in content) if plain else content
        out.append({"role": "user", "content": joined})
    return out


def _answered(response: dict[str, Any], calls: list[tuple[str, str]]) -> str | None:
    """The id of the call `response` answers (taken off `calls`): the one with its id, else
    the first with its name."""
    given = response.get("id")
    for i, (call_id, name) in enumerate(calls):
        if call_id == given or (not given and name == response.get("name")):
            del calls[i]
            return call_id
    return None


def _part_kind(part: dict[str, Any]) -> str:
    return next((k for k in part if k not in ("thought", "thoughtSignature")), "part")


def _read_generation(
    config: dict[str, Any], body: dict[str, Any], dropped: dict[str, None]
) -> None:
    for name, chat_name in _SAMPLING:
        if config.get(name) is not None:
            body[chat_name] = config[name]
    for name in config:
        if name not in _GENERATION_READ:
            dropped[f"generationConfig.{name}"] = None
    count = config.get("candidateCount")
    if isinstance(count, int) and count > 1:
        body["n"] = count
    if config.get("responseMimeType") == "application/json":
        schema = config.get("responseJsonSchema")
        if not isinstance(schema, dict):
            schema = config.get("responseSchema")
        body["response_format"] = (
            {
                "type": "json_schema",
                "json_schema": {"name": "response", "schema": json_schema(schema)},
            }
            if isinstance(schema, dict)
            else {"type": "json_object"}
        )
    elif config.get("responseMimeType") not in (None, "text/plain"):
        dropped["generationConfig.responseMimeType"] = None


def _read_tools(request: dict[str, Any], body: dict[str, Any], dropped: dict[str, None]) -> None:
    tools: list[dict[str, Any]] = []
    for tool in request.get("tools") or ():
        for key in tool:
            if key != "functionDeclarations":
                dropped[f"tools:{key}"] = None
        for fn in tool.get("functionDeclarations") or ():
            schema = fn.get("parametersJsonSchema")
            if not isinstance(schema, dict):
                schema = fn.get("parameters")
            function: dict[str, Any] = {
                "name": fn["name"],
                "parameters": json_schema(schema)
                if isinstance(schema, dict)
                else {"type": "object", "properties": {}},
            }
            if isinstance(fn.get("description"), str):
                function["description"] = fn["description"]
            tools.append({"type": "function", "function": function})
    calling = object_at(object_at(request, "toolConfig"), "functionCallingConfig")
    if not tools:
        return
    body["tools"] = tools
    mode = calling.get("mode")
    names = calling.get("allowedFunctionNames")
    if mode in ("ANY", "VALIDATED") and isinstance(names, list) and len(names) == 1:
        body["tool_choice"] = {"type": "function", "function": {"name": names[0]}}
    elif isinstance(mode, str) and mode in _CHAT_MODE:
        body["tool_choice"] = _CHAT_MODE[mode]


def json_schema(schema: Any) -> Any:
    """A Gemini `Schema` (OpenAPI's subset, with upper-case type names: `OBJECT`, `STRING`)
    as JSON Schema (lower-case types); a JSON Schema passes unchanged. Gemini CLI sends
    upper-case names in `responseJsonSchema` too."""
    if isinstance(schema, list):
        return [json_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "type" and isinstance(value, str):
            out[key] = value.lower()
        elif key in ("properties", "$defs", "definitions") and isinstance(value, dict):
            out[key] = {name: json_schema(v) for name, v in value.items()}
        elif key in ("items", "anyOf", "oneOf", "allOf", "not", "additionalProperties"):
            out[key] = json_schema(value)
        else:
            out[key] = value
    return out


def response_of(response: dict[str, Any]) -> dict[str, Any]:
    """A `chat.completion` as a `GenerateContentResponse`: each choice a candidate, reasoning
    as `thought` parts, tool calls as `functionCall` parts (with their ids)."""
    candidates = []
    for i, choice in enumerate(response.get("choices") or ()):
        msg = object_at(choice, "message")
        parts: list[dict[str, Any]] = []
        reasoning = msg.get("reasoning_content")
        if isinstance(reasoning, str) and reasoning:
            parts.append({"text": reasoning, "thought": True})
        text = text_of(msg.get("content")) or msg.get("refusal")
        if isinstance(text, str) and text:
            parts.append({"text": text})
        parts += [_function_call(c) for c in msg.get("tool_calls") or ()]
        candidates.append(_candidate(parts or [{"text": ""}], choice.get("finish_reason"), i))
    return _response_body(candidates, response.get("usage"), response)


def _function_call(call: dict[str, Any]) -> dict[str, Any]:
    fn = object_at(call, "function")
    found: dict[str, Any] = {"name": str(fn.get("name") or ""), "args": arguments_of(call)}
    if isinstance(call.get("id"), str) and call["id"]:
        found = {"id": call["id"], **found}
    return {"functionCall": found}


def _candidate(parts: list[dict[str, Any]], finish: Any, index: int) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": index}
    if finish:
        candidate["finishReason"] = _FINISH_OUT.get(str(finish), "STOP")
    return candidate


def _response_body(
    candidates: list[dict[str, Any]], usage: Any, source: dict[str, Any]
) -> dict[str, Any]:
    body: dict[str, Any] = {"candidates": candidates}
    metadata = usage_metadata(usage)
    if metadata is not None:
        body["usageMetadata"] = metadata
    body["modelVersion"] = str(source.get("model") or "unknown")
    if isinstance(source.get("id"), str):
        body["responseId"] = source["id"]
    return body


def usage_metadata(usage: Any) -> dict[str, int] | None:
    """Chat usage as Gemini's `usageMetadata` (reasoning tokens are `thoughtsTokenCount`,
    apart from `candidatesTokenCount`; cached prompt tokens `cachedContentTokenCount`)."""
    if not isinstance(usage, dict):
        return None
    prompt = usage.get("prompt_tokens")
    output = usage.get("completion_tokens")
    prompt = prompt if isinstance(prompt, int) else 0
    output = output if isinstance(output, int) else 0
    thoughts = object_at(usage, "completion_tokens_details").get("reasoning_tokens")
    cached = object_at(usage, "prompt_tokens_details").get("cached_tokens")
    out = {
        "promptTokenCount": prompt,
        "candidatesTokenCount": output - thoughts if isinstance(thoughts, int) else output,
        "totalTokenCount": prompt + output,
    }
    if isinstance(thoughts, int) and thoughts:
        out["thoughtsTokenCount"] = thoughts
    if isinstance(cached, int) and cached:
        out["cachedContentTokenCount"] = cached
    return out


class ResponseChunks:
    """Chat chunks as Gemini's stream: `feed` each chunk, then `end` once; each returns the
    `GenerateContentResponse` objects to send. Text and thoughts go as they come; a tool call
    goes whole (Gemini sends a `functionCall` in one part), when the answer ends, with the
    finish reason and the usage."""

    def __init__(self) -> None:
        self.source: dict[str, Any] = {}  # the first chunk's id and model
        self.calls: dict[int, dict[str, Any]] = {}  # chat tool call index → the call so far
        self.finish: Any = None
        self.usage: Any = None

    def feed(self, chunk: dict[str, Any]) -> list[dict[str, Any]]:
        if not self.source:
            self.source = {"id": chunk.get("id"), "model": chunk.get("model")}
        if chunk.get("usage") is not None:
            self.usage = chunk["usage"]
        parts: list[dict[str, Any]] = []
        for c in chunk.get("choices") or ():
            if c.get("index", 0) != 0:
                continue  # one candidate: Gemini CLI asks for one
            delta = object_at(c, "delta")
            if isinstance(delta.get("reasoning_content"), str) and delta["reasoning_content"]:
                parts.append({"text": delta["reasoning_content"], "thought": True})
            text = text_of(delta.get("content"))
            if text:
                parts.append({"text": text})
            for call in delta.get("tool_calls") or ():
                self._gather(call)
            if c.get("finish_reason"):
                self.finish = c["finish_reason"]
        if not parts:
            return []
        return [_response_body([_candidate(parts, None, 0)], None, self.source)]

    def _gather(self, piece: dict[str, Any]) -> None:
        call = self.calls.setdefault(
            piece.get("index", 0), {"id": None, "function": {"name": "", "arguments": ""}}
        )
        fn = object_at(piece, "function")
        if piece.get("id"):
            call["id"] = piece["id"]
        if fn.get("name"):
            call["function"]["name"] += str(fn["name"])
        if isinstance(fn.get("arguments"), str):
            call["function"]["arguments"] += fn["arguments"]

    def end(self) -> list[dict[str, Any]]:
        parts = [_function_call(c) for _, c in sorted(self.calls.items())] or [{"text": ""}]
        last = _candidate(parts, self.finish or "stop", 0)
        return [_response_body([last], self.usage, self.source)]


def error_body(status: int, message: str, **extra: Any) -> dict[str, Any]:
    """Google's error body: `{"error": {"code", "message", "status"}}`; `extra` fields (the
    attempts) go inside `error`."""
    name = STATUS_NAMES.get(status, "UNAVAILABLE" if status >= 500 else "INVALID_ARGUMENT")
    return {"error": {"code": status, "message": message, "status": name, **extra}}


def estimate_tokens(request: Any) -> int:
    """`countTokens`' local estimate (no provider is asked) of a request's input: its
    `contents`, or those of its `generateContentRequest`, read as the chat request they
    become (`tokens.input_tokens`)."""
    if isinstance(request, dict) and isinstance(request.get("generateContentRequest"), dict):
        request = request["generateContentRequest"]
    return input_tokens(read_request(request, "", False).body)
