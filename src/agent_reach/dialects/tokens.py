"""The local estimate of a request's input tokens (pure): `count_tokens` and `countTokens`
when no provider counts, and the context-window check before a request is sent.

Text is split into the pieces a BPE tokenizer's pre-tokenizer starts from (words, digits, CJK
characters, symbols, runs of blank space), each with a cost fitted to DeepSeek V4's tokenizer;
tool calls' input and tool definitions count as their JSON (as providers render them); an image
or document 1,600 (Anthropic's cost of a ~1.15 megapixel image); each message 3 for its framing.
bench/count_tokens.py measures it against a tokenizer's counts.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import orjson

ATTACHMENT_TOKENS = 1600  # an image or a document
MESSAGE_TOKENS = 3  # one message's framing


def input_tokens(request: Mapping[str, Any]) -> int:
    """The estimated input tokens of a request known to be well formed: a Messages one, or a
    chat one (its system messages are among its `messages`)."""
    messages = request.get("messages") or ()
    total = _tokens(request.get("system")) + _tokens(messages)
    total += sum(_json_tokens(t) for t in request.get("tools") or ())
    return max(1, round(total) + MESSAGE_TOKENS * len(messages))


# The pieces a BPE tokenizer's pre-tokenizer splits text into, and what each costs, fitted by
# least relative squares to DeepSeek V4's tokenizer over this repository's prose, code, YAML,
# JSON and Chinese (about ±6 % on 3,000-character pieces, 90 % of them).
_PIECE = re.compile(
    r"(?P<cjk>[\u3000-\u303f\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af"
    r"\uf900-\ufaff\uff00-\uffef]+)"
    r"|(?P<word> ?[^\W\d_]+)"
    r"|(?P<digits>\d+)"
    r"|(?P<newline>[ \t]*\n\s*)"
    r"|(?P<space>\s+)"
    r"|(?P<symbols>[^\w\s]+|_+)"
)
_CJK_CHAR = 0.7  # Chinese, Japanese, Korean: a token per 1.4 characters
_WORD, _LONG_WORD_CHAR, _FOREIGN_CHAR = 1.05, 0.2, 0.5  # a word; a letter past 6; not ASCII
_DIGIT = 0.7
_NEWLINE, _SPACE = 1.35, 0.9  # a run of blank space with a line break; one without
_SYMBOL = 0.4


def text_tokens(text: str) -> float:
    """A text's tokens, estimated from its pieces (words, digits, CJK characters, symbols,
    runs of blank space) as a BPE tokenizer splits them before merging."""
    total = 0.0
    for m in _PIECE.finditer(text):
        kind, piece = m.lastgroup, m.group()
        if kind == "word":
            word = piece.lstrip(" ")
            total += _WORD + _LONG_WORD_CHAR * max(0, len(word) - 6)
            if not word.isascii():
                total += _FOREIGN_CHAR * len(word)
        elif kind == "cjk":
            total += _CJK_CHAR * len(piece)
        elif kind == "digits":
            total += _DIGIT * len(piece)
        elif kind == "newline":
            total += _NEWLINE
        elif kind == "space":
            total += _SPACE
        else:
            total += _SYMBOL * len(piece)
    return total


def _json_tokens(value: Any) -> float:
    return text_tokens(orjson.dumps(value).decode())


_NOT_TEXT = frozenset(
    {"type", "role", "cache_control", "signature", "id", "tool_use_id", "media_type"}
)


def _tokens(value: Any) -> float:
    if isinstance(value, str):
        return text_tokens(value)
    if isinstance(value, dict):
        kind = value.get("type")
        if kind in ("image", "document", "image_url"):
            return ATTACHMENT_TOKENS
        if kind == "tool_use":
            return text_tokens(str(value.get("name", ""))) + _json_tokens(value.get("input"))
        return sum(_tokens(v) for k, v in value.items() if k not in _NOT_TEXT)
    if isinstance(value, list):
        return sum(_tokens(v) for v in value)
    return 0
