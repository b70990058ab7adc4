"""Provider formats ("dialects"): one small module each, all with the same few functions.

A dialect turns an OpenAI chat request into its provider's body (`body`), finds an error in a
provider's body (`error_of`), normalizes a response to an OpenAI `chat.completion`
(`normalize`) and converts its stream to OpenAI chunks (`decoder`). Dialects are pure: no I/O,
no clock (the engine passes `created`). Adding a format means adding one module here and one
line to `_MODULES`.
"""

from __future__ import annotations

import importlib

from .base import Context, Decoder, Dialect, Inbound, Mismatch, ProviderError, Shape

__all__ = [
    "FORMATS",
    "Context",
    "Decoder",
    "Dialect",
    "Inbound",
    "Mismatch",
    "ProviderError",
    "Shape",
    "get",
]

_MODULES = {
    "openai": "openai",
    "responses": "responses",
    "ollama": "ollama",
    "dashscope": "dashscope",
    "minimax": "minimax",
    "ernie": "ernie",
    "anthropic": "anthropic",
    "gemini": "gemini",
}
FORMATS = tuple(_MODULES)
_loaded: dict[str, Dialect] = {}


def get(name: str) -> Dialect:
    """The dialect for a provider's `format` (ValueError for one this version lacks)."""
    dialect = _loaded.get(name)
    if dialect is None:
        module = _MODULES.get(name)
        if module is None:
            available = ", ".join(FORMATS)
            raise ValueError(f"format {name!r} is not available (available: {available})")
        dialect = importlib.import_module(f"{__name__}.{module}").DIALECT
        _loaded[name] = dialect
    return dialect
