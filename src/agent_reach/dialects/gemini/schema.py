"""What a generateContent request may hold, field by field (`FIELDS`, protocol §10.2), as the
published API describes it: checked when a client's request is read and before its tokens
are estimated for `countTokens` (`estimate_tokens`)."""

from __future__ import annotations

from collections.abc import Mapping

from ...chat.checks import (
    BOOLEAN,
    INT32_MAX,
    NAME,
    OBJECT,
    STRING,
    STRINGS,
    Check,
    array_of,
    either,
    integer,
    number,
    shape,
)

# -- the other direction: clients that speak the Gemini API to the proxy (Gemini CLI) ---------

_PART = shape(
    {
        "text": STRING,
        "thought": BOOLEAN,
        "inlineData": shape({"mimeType": STRING, "data": STRING}, ("data",)),
        "fileData": shape({"mimeType": STRING, "fileUri": STRING}, ("fileUri",)),
        "functionCall": shape({"id": STRING, "name": NAME, "args": OBJECT}, ("name",)),
        "functionResponse": shape({"id": STRING, "name": STRING, "response": OBJECT}, ("name",)),
    },
    expected="a part object",
)
_CONTENT = shape(
    {"role": STRING, "parts": array_of(_PART, "an array of parts")},
    ("parts",),
    "a content object with 'parts'",
)
_DECLARATION = shape(
    {"name": NAME, "description": STRING, "parameters": OBJECT},
    ("name",),
    "a function declaration",
)
# The generateContent request, field by field (`contents` is also required), as the published
# schema types them: a value judgment it does not make is left to the provider.
FIELDS: Mapping[str, Check] = {
    "contents": array_of(_CONTENT, "a non-empty array of contents", nonempty=True),
    "systemInstruction": either(STRING, _CONTENT, expected="a content object"),
    "tools": array_of(
        shape({"functionDeclarations": array_of(_DECLARATION, "an array of declarations")}),
        "an array of tools",
    ),
    "toolConfig": shape(
        {"functionCallingConfig": shape({"mode": STRING, "allowedFunctionNames": STRINGS})}
    ),
    "generationConfig": shape(
        {
            "temperature": number(0, 2),
            "topP": number(0, 1),
            "topK": number(0, INT32_MAX),
            "candidateCount": integer(1, INT32_MAX),
            "maxOutputTokens": integer(-INT32_MAX - 1, INT32_MAX),  # an int32, no range
            "stopSequences": STRINGS,
            "seed": integer(-INT32_MAX - 1, INT32_MAX),
            "presencePenalty": number(-2, 2),
            "frequencyPenalty": number(-2, 2),
            "responseMimeType": STRING,
            "responseSchema": OBJECT,
            "thinkingConfig": OBJECT,
        }
    ),
}
