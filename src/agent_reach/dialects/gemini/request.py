"""Requests both ways: a chat request as a generateContent request for a `format: gemini`
provider (`encode_request`), and a client's generateContent request read as a chat request
(`decode_request`, the model from the URL; an `Inbound` naming what a chat provider will
not see)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson

from ...chat.checks import check_fields, refused
from ...core.errors import RequestError
from ..base import Inbound, Mismatch, loads
from ..convert import (
    arguments_of,
    bounded,
    data_url,
    functions_of,
    merge_turns,
    object_at,
    parts_of,
    put_max_tokens,
    split_system,
    stop_list,
    text_of,
    tool_call,
    tool_choice_of,
    tool_names,
)
from ..tokens import input_tokens
from .schema import FIELDS

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


MAX_TOKENS_FIELD = "maxOutputTokens"


def encode_request(request: dict[str, Any], max_tokens_field: str) -> dict[str, Any]:
    """A chat request as a generateContent request: `contents` of user and model turns,
    the system prompt as `systemInstruction`, sampling and the output cap in
    `generationConfig`, function tools as `functionDeclarations`."""
    system, turns = split_system(request.get("messages"))
    body: dict[str, Any] = {
        "contents": [{"role": r, "parts": p} for r, p in merge_turns(_turns(turns))]
    }
    if system:
        body["systemInstruction"] = {"parts": [{"text": system}]}
    config = _generation_config(request)
    put_max_tokens(request, body, max_tokens_field, {MAX_TOKENS_FIELD: config})
    if config:
        body["generationConfig"] = config
    functions = functions_of(request)
    if functions:
        body["tools"] = [{"functionDeclarations": functions}]
        tool_config = _tool_config(request)
        if tool_config:
            body["toolConfig"] = tool_config
    return body


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


def decode_request(request: Any, model: str, stream: bool) -> Inbound:
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


def estimate_tokens(request: Any) -> int:
    """`countTokens`' local estimate (no provider is asked) of a request's input: its
    `contents`, or those of its `generateContentRequest`, read as the chat request they
    become (`tokens.input_tokens`)."""
    if isinstance(request, dict) and isinstance(request.get("generateContentRequest"), dict):
        request = request["generateContentRequest"]
    return input_tokens(decode_request(request, "", False).body)
