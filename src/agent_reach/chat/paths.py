"""Dot paths and JSON Pointers into parsed JSON (protocol §7). Pure.

`choices.0.message.content` and `/choices/0/message/content` name the same value. A list index
is a decimal segment; a JSON Pointer unescapes `~1` to `/` and `~0` to `~`.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

_MISSING: Any = object()


@lru_cache(maxsize=256)
def split(path: str) -> tuple[str, ...]:
    """The segments of a dot path or JSON Pointer; `""` and `"/"`-less empty mean the root."""
    if path.startswith("/"):
        return tuple(s.replace("~1", "/").replace("~0", "~") for s in path[1:].split("/"))
    return tuple(s for s in path.split(".") if s)


def get(obj: Any, path: str, default: Any = None) -> Any:
    """The value at `path` in `obj`, or `default` when any segment is missing."""
    for seg in split(path):
        if isinstance(obj, dict):
            obj = obj.get(seg, _MISSING)
        elif isinstance(obj, list) and seg.lstrip("-").isdigit():
            i = int(seg)
            obj = obj[i] if -len(obj) <= i < len(obj) else _MISSING
        else:
            return default
        if obj is _MISSING:
            return default
    return obj


def extract(raw: Any, choices_path: str, content_path: str) -> tuple[Any, Any]:
    """(choice, content): the value at `choices_path` (its first element when it is a list),
    then `content_path` read from it. Either is None when absent."""
    choice = get(raw, choices_path)
    if isinstance(choice, list):
        choice = choice[0] if choice else None
    if choice is None:
        return None, None
    return choice, get(choice, content_path)
