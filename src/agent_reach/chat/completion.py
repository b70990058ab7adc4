"""OpenAI-shaped bodies that agent-reach emits: completions, chunks and errors (protocol §7). Pure.

Every dict built here validates against the official schemas (`CreateChatCompletionResponse`,
`CreateChatCompletionStreamResponse`, `ErrorResponse`), which require more than the Python SDK
does: `message.refusal`, `choices[].logprobs` and `error.param`/`error.code` must be present.
"""

from __future__ import annotations

import os
from typing import Any

from ..core.errors import RequestError
from .checks import INT64, OBJECT, STRING, Check, array_of, either, shape

FINISH_REASONS = frozenset({"stop", "length", "tool_calls", "content_filter", "function_call"})
_FINISH_ALIASES = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "eos": "stop",
    "normal": "stop",
    "max_tokens": "length",
    "max_output_tokens": "length",
    "tool_use": "tool_calls",
    "sensitive": "content_filter",
    "safety": "content_filter",
    "blocked": "content_filter",
    "refusal": "content_filter",  # Anthropic
    "recitation": "content_filter",  # Gemini, and the rest of its safety stops
    "blocklist": "content_filter",
    "prohibited_content": "content_filter",
    "spii": "content_filter",
    "image_safety": "content_filter",
}


_POOL = 4096  # random bytes read at a time: one read serves 341 ids
_random = bytearray()


def random_hex(n: int = 12) -> str:
    """`n` bytes from the OS's random source as hex, the source read `_POOL` bytes at a time
    (a read per id cost 1 us, a few per request); a forked child starts with none of them."""
    if len(_random) < n:
        _random[:] = os.urandom(_POOL)
    taken = _random[-n:]
    del _random[-n:]
    return taken.hex()


os.register_at_fork(after_in_child=_random.clear)


def new_id() -> str:
    """A fresh `chatcmpl-…` id."""
    return "chatcmpl-" + random_hex()


def finish_reason(value: Any, default: str | None = "stop") -> str | None:
    """A provider's finish reason as one of OpenAI's values (`default` when unknown)."""
    if not isinstance(value, str) or not value or value == "null":
        return default
    name = value.lower()
    if name in FINISH_REASONS:
        return name
    return _FINISH_ALIASES.get(name, default)


def usage(prompt: Any, completion: Any, total: Any = None) -> dict[str, int] | None:
    """An OpenAI usage object from token counts, or None when the provider reported none."""
    p = prompt if isinstance(prompt, int) else None
    c = completion if isinstance(completion, int) else None
    t = total if isinstance(total, int) else None
    if p is None and c is None and t is None:
        return None
    p, c = p or 0, c or 0
    return {
        "prompt_tokens": p,
        "completion_tokens": c,
        "total_tokens": t if t is not None else p + c,
    }


def message(
    content: str | None,
    *,
    tool_calls: list[Any] | None = None,
    reasoning: str | None = None,
    refusal: str | None = None,
) -> dict[str, Any]:
    """An assistant message; `reasoning_content` and `tool_calls` only when given."""
    msg: dict[str, Any] = {"role": "assistant", "content": content, "refusal": refusal}
    if tool_calls:
        msg["tool_calls"] = tool_calls
    if reasoning:
        msg["reasoning_content"] = reasoning
    return msg


def completion(
    *,
    model: str,
    created: int,
    choices: list[dict[str, Any]],
    id: str | None = None,
    usage: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A `chat.completion`. `choices` are (message, finish_reason) already normalized."""
    body: dict[str, Any] = {
        "id": id or new_id(),
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": choices,
    }
    if usage is not None:
        body["usage"] = usage
    if extra:
        body.update(extra)
    return body


def choice(msg: dict[str, Any], finish: str | None, index: int = 0) -> dict[str, Any]:
    """One completion choice."""
    return {"index": index, "message": msg, "logprobs": None, "finish_reason": finish or "stop"}


def chunk(
    *,
    id: str,
    model: str,
    created: int,
    delta: dict[str, Any] | None = None,
    finish: str | None = None,
    usage: dict[str, Any] | None = None,
    index: int = 0,
) -> dict[str, Any]:
    """A `chat.completion.chunk` with one choice (or none, for a usage-only chunk)."""
    body: dict[str, Any] = {
        "id": id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": []
        if delta is None
        else [{"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }
    if usage is not None:
        body["usage"] = usage
    return body


def error(
    message: str,
    type: str,
    code: str | None = None,
    param: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """An OpenAI error body: `{"error": {"message", "type", "param", "code", …}}`."""
    return {"error": {"message": message, "type": type, "param": param, "code": code, **extra}}


def has_content(chunk_body: dict[str, Any]) -> bool:
    """Whether a chunk carries part of the answer (not just a role or an empty delta)."""
    for c in chunk_body.get("choices") or ():
        delta = c.get("delta") or {}
        if (
            delta.get("content")
            or delta.get("reasoning_content")
            or delta.get("tool_calls")
            or delta.get("refusal")
            or delta.get("function_call")
        ):
            return True
    return False


def filtered(choices: Any) -> bool:
    """Whether an answer's (or a stream's) choices say only that the provider filtered it:
    `finish_reason: content_filter`, with no content and no tool calls."""
    said = False
    for c in choices:
        said = said or c.get("finish_reason") == "content_filter"
        part = c.get("message") or c.get("delta") or {}
        if part.get("content") or part.get("tool_calls"):
            return False
    return said


def as_chunks(body: dict[str, Any]) -> list[dict[str, Any]]:
    """A whole `chat.completion` as the chunks a stream of it would have sent."""
    out = []
    for c in body["choices"]:
        msg = c["message"]
        delta = {k: v for k, v in msg.items() if v is not None and k != "refusal"}
        if delta.get("tool_calls"):
            delta["tool_calls"] = [{"index": i, **t} for i, t in enumerate(delta["tool_calls"])]
        out.append(
            chunk(
                id=body["id"],
                model=body["model"],
                created=body["created"],
                delta=delta,
                finish=c["finish_reason"],
                index=c["index"],
            )
        )
    if body.get("usage") is not None:
        out.append(
            chunk(id=body["id"], model=body["model"], created=body["created"], usage=body["usage"])
        )
    return out


# -- what a provider's answer must be for agent-reach to carry it --------------------------------
# The fields the faces read (a chat client gets them; the Responses and Messages faces translate
# them), in the words of `checks`. An answer or chunk that fails is a `schema_mismatch`: failed
# over before the first byte, an error event after it, never a crash or a silent cut.


def _answer_checks() -> tuple[Check, Check]:
    text = either(STRING, array_of(OBJECT, "parts"), expected="a string or an array of parts")
    function = shape({"name": STRING, "arguments": either(STRING, OBJECT, expected="a string")})
    call = shape({"id": STRING, "type": STRING, "function": function})
    message = shape(
        {
            "content": text,
            "reasoning_content": STRING,
            "refusal": STRING,
            "tool_calls": array_of(call, "an array of tool calls"),
        }
    )
    common = {"finish_reason": STRING, "index": INT64}
    usage = shape(
        {
            "prompt_tokens": INT64,
            "completion_tokens": INT64,
            "total_tokens": INT64,
            "prompt_tokens_details": shape({"cached_tokens": INT64}),
            "completion_tokens_details": shape({"reasoning_tokens": INT64}),
        }
    )
    whole = shape(
        {
            "choices": array_of(
                shape({"message": message, **common}, ("message",)),
                "a non-empty array of choices",
                nonempty=True,
            ),
            "usage": usage,
        },
        ("choices",),
    )
    delta_call = shape({"index": INT64, "id": STRING, "function": function})
    delta = shape(
        {
            "content": text,
            "reasoning_content": STRING,
            "tool_calls": array_of(delta_call, "an array of tool calls"),
        }
    )
    chunked = shape(
        {
            "choices": array_of(shape({"delta": delta, **common}), "an array of choices"),
            "usage": usage,
        }
    )
    return whole, chunked


_WHOLE, _CHUNK = _answer_checks()


def malformed(body: dict[str, Any], chunk: bool = False) -> str | None:
    """What in an answer (or, with `chunk`, a stream chunk) the faces cannot carry, if anything:
    `'answer.choices[0].message.tool_calls[0]' must be an object (got 'x')`."""
    check = _CHUNK if chunk else _WHOLE
    if check.ok(body):
        return None
    try:
        check(body, "answer")
    except RequestError as exc:
        return str(exc)
    return "the answer is malformed"
