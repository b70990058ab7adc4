"""Answers both ways: a provider's Responses answer as a chat completion (`decode_answer`:
`output_text` parts become content, `function_call` items `tool_calls`, `reasoning`
summaries `reasoning_content`), and a chat completion as a `response` object for a client
(`encode_answer`)."""

from __future__ import annotations

from typing import Any

import orjson

from ...chat import completion
from ..base import Context, Mismatch
from ..convert import content_at, is_default_shape, model_of, object_at, tool_call
from .tools import Tool, tool_map

FINISH = {"max_output_tokens": "length", "content_filter": "content_filter"}
_INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}
_CACHE_DETAILS = ("cached_tokens", "cache_write_tokens")  # usage's, the same in chat


def new_id(prefix: str) -> str:
    """A fresh id such as `resp_…`, `msg_…`, `fc_…`, `rs_…`."""
    return f"{prefix}_{completion.random_hex()}"


def chat_message(output: list[Any], incomplete: Any = None) -> tuple[dict[str, Any], str]:
    """Responses `output` items as one chat message and its finish reason."""
    text, reasoning, refusal, calls = [], [], [], []
    for item in output:
        kind = item.get("type") if isinstance(item, dict) else None
        if kind == "message":
            for part in item.get("content") or ():
                if not isinstance(part, dict):
                    continue
                if part.get("type") == "output_text" and isinstance(part.get("text"), str):
                    text.append(part["text"])
                elif part.get("type") == "refusal" and isinstance(part.get("refusal"), str):
                    refusal.append(part["refusal"])
        elif kind == "function_call" and isinstance(item.get("name"), str):
            calls.append(
                tool_call(str(item.get("call_id") or ""), item["name"], item.get("arguments"))
            )
        elif kind == "reasoning":
            for part in item.get("summary") or ():
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    reasoning.append(part["text"])
    content = "".join(text)
    message = completion.message(
        content if content or not calls else None,
        tool_calls=calls,
        reasoning="\n\n".join(reasoning) or None,
        refusal="".join(refusal) or None,
    )
    reason = incomplete.get("reason") if isinstance(incomplete, dict) else None
    finish = FINISH.get(str(reason), "tool_calls" if calls else "stop")
    return message, finish


def chat_usage(value: Any) -> dict[str, Any] | None:
    """Responses usage (`input_tokens`, `output_tokens`, …) as chat usage."""
    if not isinstance(value, dict):
        return None
    out: dict[str, Any] | None = completion.usage(
        value.get("input_tokens"), value.get("output_tokens"), value.get("total_tokens")
    )
    if out is not None:
        given = object_at(value, "input_tokens_details")
        details = {k: given[k] for k in _CACHE_DETAILS if isinstance(given.get(k), int)}
        if details:
            out["prompt_tokens_details"] = details
        thought = object_at(value, "output_tokens_details").get("reasoning_tokens")
        if isinstance(thought, int):
            out["completion_tokens_details"] = {"reasoning_tokens": thought}
    return out


def response_usage(usage: Any) -> dict[str, Any] | None:
    """Chat usage as Responses usage, details included."""
    if not isinstance(usage, dict):
        return None
    prompt = usage.get("prompt_tokens") or 0
    output = usage.get("completion_tokens") or 0
    details = object_at(usage, "prompt_tokens_details")
    cached = details.get("cached_tokens") or 0
    written = details.get("cache_write_tokens") or 0
    thought = object_at(usage, "completion_tokens_details").get("reasoning_tokens") or 0
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": written},
        "output_tokens": output,
        "output_tokens_details": {"reasoning_tokens": thought},
        "total_tokens": usage.get("total_tokens") or prompt + output,
    }


def text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def message_item(id: str, text: str, status: str = "completed") -> dict[str, Any]:
    """An assistant `message` output item with one `output_text` part (none while empty)."""
    content = [text_part(text)] if text or status == "completed" else []
    return {"type": "message", "id": id, "status": status, "role": "assistant", "content": content}


def reasoning_item(id: str, text: str) -> dict[str, Any]:
    """A `reasoning` output item whose summary is the provider's reasoning text."""
    summary = [{"type": "summary_text", "text": text}] if text else []
    return {"type": "reasoning", "id": id, "summary": summary}


def call_item(
    call_id: str, chat_name: str, arguments: str, tools: dict[str, Tool], done: bool = True
) -> dict[str, Any]:
    """The output item of a chat tool call: a `function_call`, or a `custom_tool_call` whose
    `input` is the call's `input` argument; with the tool's own name and namespace."""
    tool = tools.get(chat_name) or Tool(chat_name)
    item: dict[str, Any] = {"call_id": call_id, "name": tool.name}
    if tool.namespace is not None:
        item["namespace"] = tool.namespace
    if tool.custom:
        item["input"] = custom_input(arguments)
        return {"type": "custom_tool_call", "id": new_id("ctc"), **item}
    item["arguments"] = arguments
    item["status"] = "completed" if done else "in_progress"
    return {"type": "function_call", "id": new_id("fc"), **item}


def custom_input(arguments: str) -> str:
    """A custom tool's input from the chat call's arguments (`{"input": …}`, else as is)."""
    try:
        value = orjson.loads(arguments) if arguments else {}
    except orjson.JSONDecodeError:
        return arguments
    text = value.get("input") if isinstance(value, dict) else None
    return text if isinstance(text, str) else arguments


def output_items(message: dict[str, Any], tools: dict[str, Tool]) -> list[dict[str, Any]]:
    """A chat message as Responses output items: reasoning, message, tool calls."""
    items = []
    if message.get("reasoning_content"):
        items.append(reasoning_item(new_id("rs"), message["reasoning_content"]))
    if message.get("content"):
        items.append(message_item(new_id("msg"), message["content"]))
    elif message.get("refusal"):
        refusal = {"type": "refusal", "refusal": message["refusal"]}
        items.append({**message_item(new_id("msg"), ""), "content": [refusal]})
    for call in message.get("tool_calls") or ():
        fn = call.get("function") or {}
        args = fn.get("arguments")
        call_id = str(call.get("id") or new_id("call"))
        arguments = args if isinstance(args, str) else "{}"
        items.append(call_item(call_id, str(fn.get("name", "")), arguments, tools))
    return items


def response_object(
    request: dict[str, Any],
    *,
    id: str,
    created: int,
    model: str,
    status: str,
    output: list[dict[str, Any]],
    usage: dict[str, Any] | None = None,
    finish: str | None = None,
    error: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A `response` object echoing the request's settings, as the API does."""
    reason = _INCOMPLETE.get(finish or "")
    if status == "completed" and reason:
        status = "incomplete"
    reasoning = object_at(request, "reasoning")
    fmt = object_at(request.get("text"), "format") or {"type": "text"}
    tools = [_echoed(t) for t in request.get("tools") or () if isinstance(t, dict)]
    body: dict[str, Any] = {
        "id": id,
        "object": "response",
        "created_at": created,
        "status": status,
        "completed_at": created if status in ("completed", "incomplete") else None,
        "error": error,
        "incomplete_details": {"reason": reason} if status == "incomplete" else None,
        "instructions": request.get("instructions")
        if isinstance(request.get("instructions"), str)
        else None,
        "max_output_tokens": request.get("max_output_tokens"),
        "model": model,
        "output": output,
        "parallel_tool_calls": request.get("parallel_tool_calls", True) is not False,
        "previous_response_id": request.get("previous_response_id"),
        "reasoning": {"effort": reasoning.get("effort"), "summary": reasoning.get("summary")}
        if reasoning
        else None,
        "store": request.get("store", True) is not False,
        "temperature": _number(request.get("temperature"), 1.0),
        "text": {"format": fmt},
        "tool_choice": request.get("tool_choice") or "auto",
        "tools": tools,
        "top_p": _number(request.get("top_p"), 1.0),
        "truncation": "disabled",
        "metadata": request.get("metadata") if isinstance(request.get("metadata"), dict) else {},
    }
    if usage is not None:
        body["usage"] = usage
    if isinstance(request.get("user"), str):
        body["user"] = request["user"]
    return body


def _echoed(tool: dict[str, Any]) -> dict[str, Any]:
    """A request's tool as a `response` echoes it: a function tool in the API's normalized form
    (`description` and `parameters` present, null when not given; `strict` true unless
    given), any other as sent."""
    if tool.get("type") != "function":
        return tool
    return {
        **tool,
        "description": tool.get("description"),
        "parameters": tool.get("parameters"),
        "strict": tool.get("strict", True),
    }


def _number(value: Any, default: float) -> float:
    return value if isinstance(value, int | float) and not isinstance(value, bool) else default


def encode_answer(
    response: dict[str, Any], request: dict[str, Any], created: int
) -> dict[str, Any]:
    """A chat completion as a `response` object for `request`."""
    choice = response["choices"][0]
    return response_object(
        request,
        id=new_id("resp"),
        created=created,
        model=response.get("model") or request.get("model") or "unknown",
        status="completed",
        output=output_items(choice["message"], tool_map(request)),
        usage=response_usage(response.get("usage")),
        finish=choice.get("finish_reason"),
    )


def decode_answer(raw: Any, ctx: Context, default: tuple[str, str]) -> dict[str, Any]:
    """A provider's Responses answer as a chat completion: its `output` items as one message
    (`output_text` parts as content, `function_call` items as `tool_calls`, `reasoning`
    summaries as `reasoning_content`), or the text at the provider's own `shape` when it is
    not the format's `default` one."""
    if not isinstance(raw, dict):
        raise Mismatch(f"expected a JSON object, got {type(raw).__name__}")
    if not is_default_shape(ctx.shape, default):
        _, text = content_at(raw, ctx.shape)
        message = completion.message(text)
        finish = "stop"
    else:
        output = raw.get("output")
        if not isinstance(output, list):
            raise Mismatch("no output items")
        message, finish = chat_message(output, raw.get("incomplete_details"))
    return completion.completion(
        id=raw["id"] if isinstance(raw.get("id"), str) and raw["id"] else None,
        model=model_of(raw, ctx),
        created=raw["created_at"] if isinstance(raw.get("created_at"), int) else ctx.created,
        choices=[completion.choice(message, finish)],
        usage=chat_usage(raw.get("usage")),
    )


def error_code(value: Any) -> str | None:
    """An error's `code` as text."""
    return None if value is None else str(value)
