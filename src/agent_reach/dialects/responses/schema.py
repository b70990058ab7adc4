"""What a Responses request may hold, field by field (`FIELDS`, protocol §10.1), checked when a
client's request is read (`request.decode_request`): its input items, content parts and tools."""

from __future__ import annotations

from collections.abc import Mapping

from ...chat.checks import (
    BOOLEAN,
    INT64,
    INT64_MAX,
    NAME,
    OBJECT,
    STRING,
    STRINGS,
    Check,
    array_of,
    either,
    integer,
    number,
    one_of,
    shape,
    tagged,
)

TEXT_PARTS = ("input_text", "output_text", "text", "summary_text")

_TEXT = shape({"text": STRING}, ("text",))
_PART = tagged(
    "type",
    {
        **dict.fromkeys(TEXT_PARTS, _TEXT),
        "refusal": shape({"refusal": STRING}),
        "input_image": shape({"image_url": STRING, "file_id": STRING, "detail": STRING}),
    },
    "an object with a 'type'",  # input_file and parts to come pass (then dropped)
)
_FUNCTION = shape(
    {"name": NAME, "description": STRING, "parameters": OBJECT, "strict": BOOLEAN}, ("name",)
)
_CUSTOM = shape({"name": NAME, "description": STRING, "format": OBJECT}, ("name",))
_TOOL_KINDS = {"function": _FUNCTION, "custom": _CUSTOM}
TOOLS = array_of(
    tagged(
        "type",
        {
            **_TOOL_KINDS,
            "namespace": shape(
                {
                    "name": STRING,
                    "tools": array_of(tagged("type", _TOOL_KINDS, "a tool"), "an array of tools"),
                }
            ),
        },
        "an object with a 'type'",  # hosted tools (web_search, mcp, …) pass (then dropped)
    ),
    "an array of tools",
)
_CALL = {"call_id": STRING, "name": NAME, "namespace": STRING}
_OUTPUT = shape(
    {
        "call_id": STRING,
        "output": either(
            STRING, array_of(OBJECT, ""), expected="a string or an array of content parts"
        ),
    },
    ("call_id", "output"),
)
ITEM = tagged(
    "type",
    {
        "message": shape(
            {
                "role": one_of("user", "assistant", "system", "developer"),
                "content": either(
                    STRING, array_of(_PART, ""), expected="a string or an array of parts"
                ),
            },
            ("role", "content"),
        ),
        "function_call": shape({**_CALL, "arguments": STRING}, ("call_id", "name")),
        "custom_tool_call": shape({**_CALL, "input": STRING}, ("call_id", "name")),
        "function_call_output": _OUTPUT,
        "custom_tool_call_output": _OUTPUT,
        "additional_tools": shape({"tools": TOOLS}),
    },
    "an object",  # reasoning, item_reference, hosted tool calls, … pass (then dropped)
    default="message",
)
_NAMED = shape({"name": NAME}, ("name",))
# The Responses request, field by field (`input` is also required).
FIELDS: Mapping[str, Check] = {
    "model": STRING,
    "input": either(STRING, array_of(ITEM, ""), expected="a string or an array of items"),
    "instructions": STRING,
    "tools": TOOLS,
    "tool_choice": either(
        one_of("auto", "none", "required"),
        tagged(
            "type",
            {"function": _NAMED, "custom": _NAMED, "allowed_tools": shape({"mode": STRING})},
            "",
        ),
        expected="auto, none, required or an object naming a tool",
    ),
    "parallel_tool_calls": BOOLEAN,
    "max_output_tokens": integer(16, INT64_MAX),  # the published schema's minimum
    "max_tool_calls": INT64,  # the schema declares no range (openai-python's tests send 0)
    "temperature": number(0, 2),
    "top_p": number(0, 1),
    "top_logprobs": integer(0, 20),
    "text": shape(
        {
            "format": tagged(
                "type",
                {
                    "json_schema": shape(
                        {"name": STRING, "schema": OBJECT, "strict": BOOLEAN, "description": STRING}
                    )
                },
                "an object with a 'type'",
            ),
            "verbosity": STRING,
        }
    ),
    "reasoning": shape({"effort": STRING, "summary": STRING}),
    "stream": BOOLEAN,
    "stream_options": OBJECT,
    "store": BOOLEAN,
    "background": BOOLEAN,
    "previous_response_id": STRING,
    "metadata": OBJECT,
    "include": STRINGS,
    "truncation": STRING,
    "service_tier": STRING,
    "user": STRING,
    "safety_identifier": STRING,
    "prompt_cache_key": STRING,
}
