"""Conversions several dialects share. Pure.

Taking the system prompt out of the messages, joining consecutive turns of one role, reading
message parts (text, images), converting tool definitions and tool calls between OpenAI's shape
and the provider's, clamping sampling values to a provider's range, putting the output cap
where a provider reads it, filling a model name into an endpoint template, and finding the
answer's text and model in a provider's body.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal
from urllib.parse import quote, unquote

from ..chat import paths
from .base import Context, Mismatch, Shape, loads


def max_tokens_of(request: dict[str, Any]) -> Any:
    """The request's output cap, whichever OpenAI field carries it."""
    value = request.get("max_completion_tokens")
    return request.get("max_tokens") if value is None else value


def put_max_tokens(
    request: dict[str, Any],
    body: dict[str, Any],
    field: str,
    nested: Mapping[str, dict[str, Any] | None] | None = None,
) -> None:
    """Put the request's output cap, if it sets one, where the provider reads it: at `field`
    of `body`, or, for a field `nested` names, in the object given for it (Ollama's
    `options.num_predict`, DashScope's `parameters.max_tokens`, Gemini's
    `generationConfig.maxOutputTokens`). A provider configured with another field gets that
    one at the top level. `None` for a field means the dialect has put it there itself
    (Anthropic's required `max_tokens`)."""
    cap = max_tokens_of(request)
    if cap is None:
        return
    target = nested.get(field, body) if nested else body
    if target is not None:
        target[field] = cap


def turns_last(body: dict[str, Any], key: str = "messages") -> dict[str, Any]:
    """`body` with its conversation (`key`) as the last field: what stays the same from turn to
    turn (model, system prompt, tools, settings) comes first, so one more turn only appends to
    the bytes a provider cached (protocol §10.1, cache-stable translation)."""
    if key in body:
        body[key] = body.pop(key)
    return body


def text_of(content: Any) -> str | None:
    """Message content as text: a string as is, a list of parts joined by their text (parts
    without a `type`, as DashScope's `[{"text": …}]`, count as text)."""
    if isinstance(content, str) or content is None:
        return content
    if isinstance(content, list):
        return "".join(
            str(p.get("text", ""))
            for p in content
            if isinstance(p, dict) and p.get("type", "text") == "text"
        )
    return None


def is_default_shape(shape: Shape, *defaults: tuple[str, str]) -> bool:
    """Whether `shape` is one of a format's default (choices_path, content_path) pairs, so
    that the dialect reads the whole native body instead of one path."""
    return (shape.choices_path, shape.content_path) in defaults


_JSON_KINDS = {list: "an array", str: "a string", int: "a number", float: "a number"}


def require_object(raw: Any) -> dict[str, Any]:
    """`raw` when it is a JSON object; `Mismatch` saying what it is in JSON's words otherwise."""
    if not isinstance(raw, dict):
        kind = "null" if raw is None else "true/false" if isinstance(raw, bool) else None
        raise Mismatch(
            f"expected a JSON object, got {kind or _JSON_KINDS.get(type(raw), 'a value')}"
        )
    return raw


def content_at(raw: Any, shape: Shape) -> tuple[Any, str]:
    """(choice, content) at the shape's paths; `Mismatch` when there is no string there."""
    raw = require_object(raw)
    choice, content = paths.extract(raw, shape.choices_path, shape.content_path)
    content = text_of(content)
    if not isinstance(content, str):
        raise Mismatch(f"no text at {shape.choices_path} → {shape.content_path}")
    return choice, content


def model_of(raw: dict[str, Any], ctx: Context, native: str = "") -> str:
    """The response's model at `model_field` (or at the format's own `native` field, e.g.
    Gemini's `modelVersion`), else the model that was asked for."""
    for path in (ctx.shape.model_field, native):
        value = paths.get(raw, path) if path else None
        if isinstance(value, str) and value:
            return value
    return ctx.model or "unknown"


def object_at(value: Any, key: str) -> dict[str, Any]:
    """`value[key]` when `value` is an object and that is an object too, else `{}`."""
    found = value.get(key) if isinstance(value, dict) else None
    return found if isinstance(found, dict) else {}


def with_model(endpoint: str, model: str) -> str:
    """`endpoint` with a `{model}` placeholder filled in (URL-quoted)."""
    return endpoint.replace("{model}", quote(model, safe=""))


def one_segment(name: str) -> bool:
    """Whether `name`, put in a URL as a path segment, stays one segment of that path: it is
    not `.` or `..` and holds no `/` or `\\`, once percent-decoded as often as it decodes
    (`%2e%2e`, `%252F`: a server, or a proxy before it, may decode it). A model named `..`
    would send the request, and its `access_token`, to the endpoint's parent path."""
    for _ in range(len(name)):  # each decoding that changes it makes it shorter
        decoded = unquote(name)
        if decoded == name:
            break
        name = decoded
    return name not in (".", "..") and "/" not in name and "\\" not in name


def bounded(value: Any, low: float, high: float) -> float | None:
    """A sampling value clamped to a provider's range (None when it is not a number)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return min(max(float(value), low), high)


def stop_list(request: dict[str, Any]) -> list[str] | None:
    """The request's `stop` as a list of strings, or None."""
    stop = request.get("stop")
    if isinstance(stop, str):
        return [stop] if stop else None
    if isinstance(stop, list):
        out = [s for s in stop if isinstance(s, str) and s]
        return out or None
    return None


def split_system(messages: Any) -> tuple[str | None, list[dict[str, Any]]]:
    """(system prompt, the other messages) for formats that take the system prompt apart
    (Anthropic, ERNIE, Gemini, Minimax v1). System and developer messages are joined by a
    blank line, wherever they are; messages that are not objects are dropped."""
    system: list[str] = []
    turns: list[dict[str, Any]] = []
    for m in messages if isinstance(messages, list) else []:
        if not isinstance(m, dict):
            continue
        if m.get("role") in ("system", "developer"):
            text = text_of(m.get("content"))
            if text:
                system.append(text)
        else:
            turns.append(m)
    return ("\n\n".join(system) or None), turns


def merge_turns(turns: Iterable[tuple[str, list[Any]]]) -> list[tuple[str, list[Any]]]:
    """Consecutive turns of one role joined into one (formats that want the roles to
    alternate, or that want all tool results of one step in one turn); empty turns dropped."""
    out: list[tuple[str, list[Any]]] = []
    for role, parts in turns:
        if not parts:
            continue
        if out and out[-1][0] == role:
            out[-1][1].extend(parts)
        else:
            out.append((role, list(parts)))
    return out


def parts_of(content: Any) -> list[tuple[Literal["text", "image"], str]]:
    """Message content as ("text", text) and ("image", url) parts, empty text left out; the
    url is `http(s)://…` or a `data:` URL (see `data_url`)."""
    return [(kind, value) for kind, value, _ in marked_parts(content)]


def marked_parts(content: Any) -> list[tuple[Literal["text", "image"], str, Any]]:
    """`parts_of` with each part's `cache_control` (None when it has none), for formats that
    take the marks (Anthropic)."""
    if isinstance(content, str):
        return [("text", content, None)] if content else []
    out: list[tuple[Literal["text", "image"], str, Any]] = []
    for p in content if isinstance(content, list) else []:
        if not isinstance(p, dict):
            continue
        kind = p.get("type", "text")
        if kind == "text" and isinstance(p.get("text"), str) and p["text"]:
            out.append(("text", p["text"], p.get("cache_control")))
        elif kind == "image_url":
            image = p.get("image_url")
            url = image.get("url") if isinstance(image, dict) else image
            if isinstance(url, str) and url:
                out.append(("image", url, p.get("cache_control")))
    return out


def cache_mark(content: Any) -> Any:
    """The last `cache_control` on the parts of a message's content, or None."""
    if not isinstance(content, list):
        return None
    marks = [p["cache_control"] for p in content if isinstance(p, dict) and "cache_control" in p]
    return marks[-1] if marks else None


def data_url(url: str) -> tuple[str, str] | None:
    """(media type, base64 data) of a `data:<type>;base64,<data>` URL, else None."""
    if not url.startswith("data:"):
        return None
    head, sep, data = url[5:].partition(",")
    if not sep or not head.endswith(";base64"):
        return None
    return head.removesuffix(";base64") or "application/octet-stream", data


# -- tools -------------------------------------------------------------------------------------


def functions_of(request: dict[str, Any]) -> list[dict[str, Any]]:
    """The request's function tools (and legacy `functions`) as `{name, description,
    parameters}`; `parameters` defaults to an empty object schema."""
    found = [
        t.get("function")
        for t in request.get("tools") or ()
        if isinstance(t, dict) and t.get("type", "function") == "function"
    ]
    found += list(request.get("functions") or ())
    out = []
    for fn in found:
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            continue
        params = fn.get("parameters")
        out.append(
            {
                "name": fn["name"],
                "description": str(fn.get("description") or ""),
                "parameters": params
                if isinstance(params, dict)
                else {"type": "object", "properties": {}},
            }
        )
    return out


def tool_choice_of(request: dict[str, Any]) -> tuple[str, str | None] | None:
    """The request's `tool_choice` as (mode, function name): mode is `auto`, `none`,
    `required` or `function` (then with the name); None when the request sets none."""
    choice = request.get("tool_choice")
    if choice in ("auto", "none", "required"):
        return choice, None
    if isinstance(choice, dict):
        fn = choice.get("function")
        name = fn.get("name") if isinstance(fn, dict) else None
        if isinstance(name, str) and name:
            return "function", name
    return None


def arguments_of(call: Any) -> dict[str, Any]:
    """The arguments of an OpenAI tool call (a JSON string) as an object, for formats that
    take them as one (Anthropic `input`, Gemini `args`); `{}` when they are not an object."""
    fn = call.get("function") if isinstance(call, dict) else None
    args = fn.get("arguments") if isinstance(fn, dict) else None
    if isinstance(args, dict):
        return args
    if isinstance(args, str) and args.strip():
        try:
            value = loads(args.encode())
        except Mismatch:
            return {}
        return value if isinstance(value, dict) else {}
    return {}


def tool_call(id: str, name: str, arguments: Any) -> dict[str, Any]:
    """An OpenAI tool call; `arguments` is kept as a string or serialized to JSON."""
    import orjson

    if not isinstance(arguments, str):
        arguments = orjson.dumps(arguments if arguments is not None else {}).decode()
    return {"id": id, "type": "function", "function": {"name": name, "arguments": arguments}}


def tool_names(messages: Any) -> dict[str, str]:
    """tool_call id → function name, from the assistant messages' `tool_calls`, for formats
    whose tool results name the function rather than the call (Gemini, ERNIE)."""
    names: dict[str, str] = {}
    for m in messages if isinstance(messages, list) else []:
        calls = m.get("tool_calls") if isinstance(m, dict) else None
        for call in calls if isinstance(calls, list) else []:
            fn = call.get("function") if isinstance(call, dict) else None
            if isinstance(fn, dict) and isinstance(call.get("id"), str):
                names[call["id"]] = str(fn.get("name", ""))
    return names


CONTINUE = (
    "Your previous answer was cut off. Continue it exactly where it stopped, without repeating "
    "anything and without comment."
)


def continued(
    request: dict[str, Any], partial: str, prefill: bool, mark: bool = False
) -> dict[str, Any]:
    """`request` asking for the rest of an answer cut after `partial` (protocol §10, continuation):
    for a provider that takes a prefill, the partial answer as the last assistant message, less
    its trailing whitespace (Anthropic refuses a prefill ending in it), `mark`ed `prefix: true`
    where the format needs it said (DeepSeek's prefix completion, Mistral's); for the others,
    the partial answer followed by an explicit instruction to continue."""
    if not partial.strip():  # nothing the client kept: the answer begins again
        return request
    messages = [*request.get("messages", ())]
    if prefill:
        turn: dict[str, Any] = {"role": "assistant", "content": partial.rstrip()}
        if mark:
            turn["prefix"] = True
        messages.append(turn)
    else:
        messages += [
            {"role": "assistant", "content": partial},
            {"role": "user", "content": CONTINUE},
        ]
    return {**request, "messages": messages}
