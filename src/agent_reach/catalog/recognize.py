"""Recognising an endpoint that is not in the catalog (protocol §13 compatibility levels), in three
small steps, each a function here so that `probe` only does the I/O:
- `endpoint_of_base`: the endpoint a base URL (`…/v1`, `…/anthropic`) stands for;
- `formats_for_url`: the formats an endpoint's URL suggests (`/api/chat` → ollama,
  `/v1/messages` → anthropic, …), `openai` last;
- `formats_for_answer`: the formats whose dialect reads an answer the endpoint gave;
- `content_paths`: for an answer no format reads, the `schema_compatibility` paths of its first
  non-empty string.
`level_of` names the level that follows. Pure.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from .. import dialects
from ..chat import paths, validation
from ..dialects import Context, Mismatch, Shape
from .entries import Level


def formats_for_url(url: str) -> tuple[str, ...]:
    """The formats an endpoint URL suggests, most likely first, always ending with `openai`
    (what most APIs speak): `/chat/completions` → openai, `/responses` → responses,
    `/api/chat` → ollama, `/messages` →
    anthropic, `:generateContent`, a models collection (`…/models`) or a `generativelanguage`
    host → gemini, `/services/aigc/` → dashscope, `chatcompletion` → minimax,
    `wenxinworkshop` → ernie."""
    parts = urlsplit(url)
    path = parts.path.lower()
    host = (parts.hostname or "").lower()
    rules = (
        (path.rstrip("/").endswith("/chat/completions"), "openai"),
        (path.rstrip("/").endswith("/anthropic"), "anthropic"),  # a Messages base URL
        (path.rstrip("/").endswith("/responses"), "responses"),
        ("/api/chat" in path or "/api/generate" in path, "ollama"),
        (path.rstrip("/").endswith("/messages"), "anthropic"),
        (
            "generatecontent" in path
            or path.rstrip("/").endswith("/models")
            or ("generativelanguage" in host and "/openai" not in path),
            "gemini",
        ),
        ("/services/aigc/" in path, "dashscope"),
        ("chatcompletion" in path, "minimax"),
        ("wenxinworkshop" in path, "ernie"),
    )
    found = [fmt for matched, fmt in rules if matched]
    if "openai" not in found:
        found.append("openai")
    return tuple(found)


def endpoint_of_base(url: str, fmt: str | None = None) -> tuple[str, str] | None:
    """(format, endpoint) for a base URL, as the SDKs, LiteLLM's `api_base` and Claude Code's
    `ANTHROPIC_BASE_URL` take one: `…/anthropic` (the Anthropic-compatible endpoints of DeepSeek,
    Zhipu, Kimi, MiniMax, DashScope) → `…/anthropic/v1/messages`; `…/v1` (any `/vN`) →
    `…/v1/chat/completions` (`…/v1/messages` when `fmt` is anthropic). None for a URL that
    names its endpoint already."""
    parts = urlsplit(url)
    path = parts.path.rstrip("/")
    if path.lower().endswith("/anthropic"):
        fmt, tail = "anthropic", "/v1/messages"
    elif re.search(r"/v\d+$", path):
        fmt, tail = (
            ("anthropic", "/messages") if fmt == "anthropic" else ("openai", "/chat/completions")
        )
    else:
        return None
    return fmt, urlunsplit(parts._replace(path=path + tail))


# The order in which an answer's shape is tried: minimax last, since it also reads OpenAI's.
_SHAPE_ORDER = (
    "openai",
    "responses",
    "ollama",
    "anthropic",
    "gemini",
    "dashscope",
    "ernie",
    "minimax",
)


def formats_for_answer(raw: Any, endpoint: str) -> tuple[str, ...]:
    """The formats whose dialect reads `raw` (an endpoint's parsed JSON answer) as an answer
    with content, at their default paths."""
    found = []
    for name in _SHAPE_ORDER:
        dialect = dialects.get(name).for_endpoint(endpoint)
        ctx = Context("", 0, Shape(dialect.choices_path, dialect.content_path))
        if dialect.error_of(raw) is not None:
            continue
        try:
            normalized = dialect.normalize(raw, ctx)
        except (Mismatch, AttributeError, TypeError, KeyError, IndexError, ValueError):
            continue
        choices = normalized.get("choices") or [{}]
        if validation.has_answer(choices[0].get("message")):
            found.append(name)
    return tuple(found)


def level_of(fmt: str, custom_paths: bool = False) -> Level:
    """The compatibility level (protocol §13) of an endpoint read with `fmt`: `full` for the OpenAI
    format at its default paths, `partial` for another built-in format, `manual` when it needs
    its own `schema_compatibility` paths (or a hook)."""
    if custom_paths:
        return "manual"
    return "full" if fmt == "openai" else "partial"


# Keys whose strings describe an answer rather than carry it.
_META_KEYS = frozenset(
    {
        "id",
        "object",
        "model",
        "role",
        "type",
        "created",
        "created_at",
        "request_id",
        "status",
        "finish_reason",
        "stop_reason",
        "done_reason",
        "system_fingerprint",
        "sender_type",
        "modelversion",
        "responseid",
    }
)

Segment = tuple[str, bool]  # (key or index, is a list index)


def _strings(value: Any, at: tuple[Segment, ...]) -> Iterator[tuple[tuple[Segment, ...], str]]:
    """Every non-empty string in `value`, depth first in document order, with its path."""
    if isinstance(value, str):
        if value.strip():
            yield at, value
    elif isinstance(value, dict):
        for key, item in value.items():
            if str(key).lower() not in _META_KEYS:
                yield from _strings(item, (*at, (str(key), False)))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _strings(item, (*at, (str(i), True)))


def content_paths(raw: Any) -> tuple[str, str] | None:
    """(`choices_path`, `content_path`) that extract the first non-empty string of an answer
    no format reads (protocol §7): the path up to the first list (whose first element is the
    choice) and the rest; without a list, the string's parent and its key. Dot paths, or JSON
    Pointers when a key has a dot or a slash. None when the answer is not a JSON object or has
    no string (then only a `post_process_hook` can read it)."""
    if not isinstance(raw, dict):
        return None
    for at, _ in _strings(raw, ()):
        split = next((i for i, (k, is_index) in enumerate(at) if is_index and k == "0"), None)
        if split is not None:
            choice, content = at[:split], at[split + 1 :]
        else:
            choice, content = at[:-1], at[-1:]
        keys = [k for k, _ in at]
        pointer = any("." in k or k.startswith("/") or not k for k in keys)
        return _path(choice, pointer), _path(content, pointer)
    return None


def _path(segments: tuple[Segment, ...], pointer: bool) -> str:
    if not segments:
        return ""
    if pointer:
        return "/" + "/".join(k.replace("~", "~0").replace("/", "~1") for k, _ in segments)
    return ".".join(k for k, _ in segments)


def extracts(raw: Any, choices_path: str, content_path: str) -> str | None:
    """The string that `choices_path` / `content_path` extract from `raw`, if any."""
    _, content = paths.extract(raw, choices_path, content_path)
    return content if isinstance(content, str) else None


# ---------------------------------------------------------------------------------------------
# Writing config entries


def ollama_base(value: str | None) -> str:
    """The base URL of the local Ollama from `$OLLAMA_HOST`, read as Ollama reads it: `host`,
    `host:port` or a URL; no port means 11434 (80 or 443 after an explicit scheme); unset
    means `http://127.0.0.1:11434`."""
    text = (value or "").strip()
    scheme, sep, rest = text.partition("://")
    if not sep:
        scheme, rest, port = "http", text, 11434
    else:
        port = 443 if scheme == "https" else 80
    hostport = rest.split("/", 1)[0]
    parts = urlsplit(f"//{hostport}")
    host = parts.hostname or "127.0.0.1"
    with contextlib.suppress(ValueError):  # a port that is not a number: the default
        port = parts.port or port
    if ":" in host:
        host = f"[{host}]"
    default = {"http": 80, "https": 443}.get(scheme)
    return f"{scheme}://{host}" + ("" if port == default else f":{port}")
