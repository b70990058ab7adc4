"""Answers both ways: a provider's generateContent answer as a chat completion, a choice per
candidate (`decode_answer`), and a chat completion as a generateContent response for a client
(`encode_answer`)."""

from __future__ import annotations

from typing import Any

from ...chat import completion
from ..base import Context, Mismatch
from ..convert import (
    arguments_of,
    content_at,
    is_default_shape,
    model_of,
    object_at,
    require_object,
    text_of,
    tool_call,
)


def chat_usage(value: Any) -> dict[str, Any] | None:
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


def pieces(candidate: Any) -> tuple[str, str, list[dict[str, Any]]]:
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


def finish_of(candidate: dict[str, Any], called: bool, default: str | None) -> str | None:
    finish = completion.finish_reason(candidate.get("finishReason"), default)
    return "tool_calls" if called and finish == "stop" else finish


def decode_answer(raw: Any, ctx: Context, default: tuple[str, str]) -> dict[str, Any]:
    """A provider's generateContent answer as a chat completion, a choice per candidate;
    or the text at the provider's own `shape` when it is not the format's `default` one."""
    raw = require_object(raw)
    candidates = raw.get("candidates")
    if not isinstance(candidates, list) or not candidates:
        raise Mismatch("no candidates")
    if is_default_shape(ctx.shape, default):
        choices = [_choice(c, i) for i, c in enumerate(candidates)]
    else:
        found, text = content_at(raw, ctx.shape)
        finish = finish_of(found, False, "stop") if isinstance(found, dict) else "stop"
        choices = [completion.choice(completion.message(text), finish)]
    response_id = raw.get("responseId")
    return completion.completion(
        id=response_id if isinstance(response_id, str) and response_id else None,
        model=model_of(raw, ctx, native="modelVersion"),
        created=ctx.created,
        choices=choices,
        usage=chat_usage(raw.get("usageMetadata")),
    )


def _choice(candidate: Any, i: int) -> dict[str, Any]:
    if not isinstance(candidate, dict):
        raise Mismatch(f"candidates[{i}] is not an object")
    text, thought, found = pieces(candidate)
    calls = [
        tool_call(str(fc.get("id") or f"call_{n}"), str(fc.get("name", "")), fc.get("args"))
        for n, fc in enumerate(found)
    ]
    message = completion.message(
        text if text or not calls else None, tool_calls=calls, reasoning=thought or None
    )
    index = candidate["index"] if isinstance(candidate.get("index"), int) else i
    return completion.choice(message, finish_of(candidate, bool(calls), "stop"), index)


_FINISH_OUT = {"length": "MAX_TOKENS", "content_filter": "SAFETY"}


def encode_answer(response: dict[str, Any]) -> dict[str, Any]:
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
        parts += [function_call(c) for c in msg.get("tool_calls") or ()]
        candidates.append(candidate(parts or [{"text": ""}], choice.get("finish_reason"), i))
    return response_body(candidates, response.get("usage"), response)


def function_call(call: dict[str, Any]) -> dict[str, Any]:
    fn = object_at(call, "function")
    found: dict[str, Any] = {"name": str(fn.get("name") or ""), "args": arguments_of(call)}
    if isinstance(call.get("id"), str) and call["id"]:
        found = {"id": call["id"], **found}
    return {"functionCall": found}


def candidate(parts: list[dict[str, Any]], finish: Any, index: int) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": index}
    if finish:
        candidate["finishReason"] = _FINISH_OUT.get(str(finish), "STOP")
    return candidate


def response_body(
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
