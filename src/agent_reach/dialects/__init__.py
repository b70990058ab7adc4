"""Provider formats ("dialects"): one small module each, all with the same few functions.

A dialect turns an OpenAI chat request into its provider's body (`body`), finds an error in a
provider's body (`error_of`), normalizes a response to an OpenAI `chat.completion`
(`normalize`) and converts its stream to OpenAI chunks (`decoder`). Dialects are pure: no I/O,
no clock (the engine passes `created`). Adding a format means adding one module here, named
as the format, and its name to `Format`.
"""

from __future__ import annotations

import importlib
from typing import Literal, get_args

from .base import Context, Decoder, Dialect, Inbound, Mismatch, ProviderError, Shape, Verbatim

__all__ = [
    "FORMATS",
    "Context",
    "Decoder",
    "Dialect",
    "Format",
    "Inbound",
    "Mismatch",
    "ProviderError",
    "Shape",
    "Verbatim",
    "get",
]

# A provider's `format:` in the config file; each is the module of that name here.
Format = Literal[
    "openai", "responses", "ollama", "dashscope", "minimax", "ernie", "anthropic", "gemini"
]
FORMATS: tuple[str, ...] = get_args(Format)
_loaded: dict[str, Dialect] = {}


def get(name: str) -> Dialect:
    """The dialect for a provider's `format` (ValueError for one this version lacks)."""
    dialect = _loaded.get(name)
    if dialect is None:
        if name not in FORMATS:
            available = ", ".join(FORMATS)
            raise ValueError(f"format {name!r} is not available (available: {available})")
        dialect = importlib.import_module(f"{__name__}.{name}").DIALECT
        _loaded[name] = dialect
    return dialect
