"""What providers say, as the fakes say it: OpenAI chat completions and chunks, SSE events."""

from __future__ import annotations

from typing import Any

import orjson

CREATED = 1_700_000_000
# The Gemini API's answer to a key it does not take (PROVIDERS.md).
GEMINI_BAD_KEY = {
    "error": {
        "code": 400,
        "message": "API key not valid. Please pass a valid API key.",
        "status": "INVALID_ARGUMENT",
        "details": [{"reason": "API_KEY_INVALID"}],
    }
}


def completion(content: str, model: str = "gpt-test", id: str = "chatcmpl-test") -> dict[str, Any]:
    """A whole `chat.completion` with `content`."""
    return {
        "id": id,
        "object": "chat.completion",
        "created": CREATED,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
    }


def chunk(
    delta: dict[str, Any],
    finish: str | None = None,
    *,
    model: str = "gpt-test",
    id: str = "chatcmpl-stream",
    **fields: Any,
) -> dict[str, Any]:
    """One `chat.completion.chunk` carrying `delta` (and any other top-level `fields`)."""
    return {
        "id": id,
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": model,
        **fields,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def sse(*events: Any, event: str | None = None, space: bool = True) -> bytes:
    """`data: <json>` SSE events (a str or bytes event as it is; `event:` lines when `event` is
    given)."""
    out = bytearray()
    for obj in events:
        if event:
            out += b"event: " + event.encode() + b"\n"
        out += b"data: " if space else b"data:"
        out += (
            obj.encode()
            if isinstance(obj, str)
            else obj
            if isinstance(obj, bytes)
            else orjson.dumps(obj)
        )
        out += b"\n\n"
    return bytes(out)


def named(name: str, data: dict[str, Any]) -> bytes:
    """One named event of Anthropic's or the Responses API's streams (its `type`: its name)."""
    return sse({"type": name, **data}, event=name)
