"""The three validation levels of protocol §8. Pure.

- `lenient`: the content is a non-empty string, or the message carries `tool_calls`.
- `usage`:   lenient, and `usage.total_tokens > 0` after normalization.
- `strict`:  usage, and `object == "chat.completion"` in the provider's own body, and the
             response's model is the requested model or its `model_map` target.
Each check returns None when it passes, else a short detail for a `schema_mismatch`.
"""

from __future__ import annotations

from collections.abc import Collection
from enum import StrEnum
from typing import Any


class Level(StrEnum):
    LENIENT = "lenient"
    USAGE = "usage"
    STRICT = "strict"


def has_answer(message: Any) -> bool:
    """A message with a non-empty string content or with tool calls."""
    if not isinstance(message, dict):
        return False
    content = message.get("content")
    return (isinstance(content, str) and content.strip() != "") or bool(message.get("tool_calls"))


def validate(
    level: Level,
    normalized: dict[str, Any],
    raw: Any,
    accepted_models: Collection[str],
) -> str | None:
    """Why `normalized` (built from the provider's `raw` body) fails `level`, or None."""
    choices = normalized.get("choices") or [{}]
    if not has_answer(choices[0].get("message")):
        return "no content in the response"
    if level is Level.LENIENT:
        return None
    total = (normalized.get("usage") or {}).get("total_tokens")
    if not isinstance(total, int) or total <= 0:
        return "no usage.total_tokens > 0 (validation: usage)"
    if level is Level.USAGE:
        return None
    if not isinstance(raw, dict) or raw.get("object") != "chat.completion":
        return "provider body has no object: chat.completion (validation: strict)"
    model = normalized.get("model")
    if accepted_models and model not in accepted_models:
        expected = " or ".join(sorted(accepted_models))
        return f"model {model!r} is not {expected} (validation: strict)"
    return None
