"""What a Messages request may hold, field by field (`FIELDS`, protocol §10.1): checked when a
client's request is read (`request.decode_request`) and before its tokens are estimated for
`count_tokens` (`estimate_tokens`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...chat.checks import (
    BOOLEAN,
    INT32_MAX,
    INT64_MAX,
    NAME,
    OBJECT,
    STRING,
    STRINGS,
    TOKENS,
    Check,
    array_of,
    check_fields,
    either,
    integer,
    number,
    refused,
    shape,
    tagged,
)
from ...core.errors import RequestError
from ..tokens import input_tokens

# Fields `decode_request` translates or looks at; any other top-level field is only for a
# provider of this format and is named in `Inbound.dropped`.
READ = frozenset(
    {
        "model",
        "messages",
        "max_tokens",
        "system",
        "stream",
        "temperature",
        "top_p",
        "top_k",
        "stop_sequences",
        "metadata",
        "thinking",
        "tools",
        "tool_choice",
        "agent_reach",
    }
)

_TEXT = shape({"text": STRING}, ("text",))
_IMAGE = shape({"source": OBJECT}, ("source",))
_BLOCKS = "a string or an array of content blocks"
# Content blocks of types not named here (documents, server tool results, …) pass.
BLOCK = tagged(
    "type",
    {
        "text": _TEXT,
        "image": _IMAGE,
        "tool_use": shape({"id": STRING, "name": NAME, "input": OBJECT}, ("id", "name", "input")),
        "tool_result": shape(
            {
                "tool_use_id": STRING,
                "content": either(
                    STRING,
                    array_of(tagged("type", {"text": _TEXT, "image": _IMAGE}, "a block"), ""),
                    expected=_BLOCKS,
                ),
                "is_error": BOOLEAN,
            },
            ("tool_use_id",),
        ),
        "thinking": shape({"thinking": STRING, "signature": STRING}),
    },
    "an object with a 'type'",
)
_MESSAGE = shape({"content": either(STRING, array_of(BLOCK, ""), expected=_BLOCKS)}, ("content",))
_CHOICE = shape({"disable_parallel_tool_use": BOOLEAN})
# The Messages request, field by field (`messages` and, but for count_tokens, `max_tokens`
# are also required). `system` is a role too: Claude Code sends system messages mid-way.
FIELDS: Mapping[str, Check] = {
    "model": STRING,
    "messages": array_of(
        tagged(
            "role",
            dict.fromkeys(("user", "assistant", "system"), _MESSAGE),
            "an object with a 'role'",
            closed=True,
        ),
        "a non-empty array of messages",
        nonempty=True,
    ),
    "max_tokens": TOKENS,
    "system": either(
        STRING,
        array_of(tagged("type", {"text": _TEXT}, "a text block"), ""),
        expected="a string or an array of text blocks",
    ),
    "temperature": number(0, 1),
    "top_p": number(0, 1),
    "top_k": integer(0, INT32_MAX),
    "stop_sequences": STRINGS,
    "stream": BOOLEAN,
    "metadata": shape({"user_id": STRING}),
    "tools": array_of(
        tagged(
            "type",
            {
                "custom": shape(
                    {"name": NAME, "description": STRING, "input_schema": OBJECT},
                    ("name", "input_schema"),
                )
            },
            "an object",  # server tools (web_search_20250305, …) pass (then dropped)
            default="custom",
        ),
        "an array of tools",
    ),
    "tool_choice": tagged(
        "type",
        {
            "auto": _CHOICE,
            "any": _CHOICE,
            "none": _CHOICE,
            "tool": shape({"name": NAME, "disable_parallel_tool_use": BOOLEAN}, ("name",)),
        },
        "an object with a 'type'",
    ),
    # adaptive, disabled and types to come pass
    "thinking": tagged(
        "type",
        {"enabled": shape({"budget_tokens": integer(1024, INT64_MAX)}, ("budget_tokens",))},
        "an object",
    ),
    "service_tier": STRING,
}
# The fields `count_tokens` takes.
COUNTED = frozenset({"model", "messages", "system", "tools", "tool_choice", "thinking"})


def checked(request: Any, required: tuple[str, ...]) -> list[dict[str, Any]]:
    """The request's messages, after checking its fields (`FIELDS`); `required` must be
    given."""
    if not isinstance(request, dict):
        raise RequestError("the request must be a JSON object")
    for name in required:
        if request.get(name) is None:
            raise refused(name, f"is required: {FIELDS[name].expected}")
    check_fields(request, FIELDS)
    messages: list[dict[str, Any]] = request["messages"]
    return messages


def estimate_tokens(request: Any) -> int:
    """`count_tokens`' local estimate of a Messages request's input tokens (no provider is
    asked), after checking its fields: `tokens.input_tokens`."""
    checked(request, ("messages",))
    return input_tokens(request)
