"""One incoming chat request, checked and split into the body and agent-reach's extension. Pure.

`CHAT_FIELDS` is the Chat Completions request's field table: every field of the API whose shape
is known is checked here, before any provider is called (protocol §5.1), so that a request every
provider would refuse is the client's 400 naming the field as OpenAI does (`temperature`,
`messages[2].content`), never a value guessed at, forwarded as something else, or retried on
every provider. Fields it does not name (a provider's own, or ones the API adds later) pass
through unchecked. README's "What the proxy checks" lists the table.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from ..core.errors import RequestError, quoted
from ..core.records import record
from . import callids
from .checks import (
    BOOLEAN,
    INT32_MAX,
    INT64,
    NAME,
    OBJECT,
    STRING,
    STRINGS,
    Check,
    array_of,
    check_fields,
    either,
    integer,
    leaf,
    number,
    one_of,
    refused,
    shape,
    tagged,
)

# -- messages -------------------------------------------------------------------------------

_TEXT = shape({"text": STRING}, ("text",))
_IMAGE_URL = either(
    STRING,  # a bare URL, as some clients send it
    shape({"url": STRING, "detail": STRING}, ("url",)),
    expected="an object with a 'url'",
)
PART = tagged(
    "type",
    {"text": _TEXT, "image_url": shape({"image_url": _IMAGE_URL}, ("image_url",))},
    "an object with a 'type'",
)
CONTENT = either(STRING, array_of(PART, ""), expected="a string or an array of parts")
_FUNCTION_CALL = shape(
    {
        "name": NAME,
        # OpenAI sends a JSON string; an object (as Ollama writes it) is read as the same
        "arguments": either(STRING, OBJECT, expected="a string"),
    },
    ("name", "arguments"),
)
TOOL_CALL = tagged(
    "type",
    {
        "function": shape({"id": STRING, "function": _FUNCTION_CALL}, ("id", "function")),
        "custom": shape(
            {"id": STRING, "custom": shape({"name": NAME, "input": STRING}, ("name", "input"))},
            ("id", "custom"),
        ),
    },
    "an object",
    default="function",
    closed=True,
)
_SPOKEN = shape({"content": CONTENT, "name": STRING}, ("content",))
MESSAGE = tagged(
    "role",
    {
        "system": _SPOKEN,
        "developer": _SPOKEN,
        "user": _SPOKEN,
        "assistant": shape(
            {
                "content": CONTENT,  # null when the message carries tool calls
                "name": STRING,
                "refusal": STRING,
                "tool_calls": array_of(TOOL_CALL, "an array of tool calls"),
                "function_call": _FUNCTION_CALL,
            }
        ),
        "tool": shape({"content": CONTENT, "tool_call_id": STRING}, ("content", "tool_call_id")),
        "function": shape({"content": STRING, "name": STRING}, ("name",)),
    },
    "an object with a 'role'",
    closed=True,
)

# -- tools and formats ----------------------------------------------------------------------

FUNCTION = shape(
    {"name": NAME, "description": STRING, "parameters": OBJECT, "strict": BOOLEAN}, ("name",)
)
TOOL = tagged(
    "type",
    {
        "function": shape({"function": FUNCTION}, ("function",)),
        "custom": shape({"custom": shape({"name": NAME}, ("name",))}, ("custom",)),
    },
    "an object",
    default="function",  # other types (a provider's own web search, …) pass to it
)
_NAMED = shape({"name": NAME}, ("name",))
TOOL_CHOICE = either(
    one_of("none", "auto", "required"),
    tagged(
        "type",
        {
            "function": shape({"function": _NAMED}, ("function",)),
            "custom": shape({"custom": _NAMED}, ("custom",)),
            "allowed_tools": shape({"allowed_tools": OBJECT}, ("allowed_tools",)),
        },
        "",
    ),
    expected="none, auto, required or an object naming a tool",
)
RESPONSE_FORMAT = tagged(
    "type",
    {
        "json_schema": shape(
            {
                "json_schema": shape(
                    {"name": STRING, "description": STRING, "schema": OBJECT, "strict": BOOLEAN}
                )
            },
            ("json_schema",),
        )
    },
    "an object with a 'type'",
)
# The schema types the biases as integers and declares no range (its text says -100 to 100:
# a judgment left to the provider).
LOGIT_BIAS = leaf(
    lambda v: (
        isinstance(v, dict)
        and all(isinstance(b, int) and not isinstance(b, bool) for b in v.values())
    ),
    "an object of token ids to integers",
)

# The Chat Completions request, field by field (`messages` is also required, non-empty).
CHAT_FIELDS: Mapping[str, Check] = {
    "messages": array_of(MESSAGE, "a non-empty array of messages", nonempty=True),
    "model": STRING,
    "stream": BOOLEAN,
    "stream_options": shape({"include_usage": BOOLEAN, "include_obfuscation": BOOLEAN}),
    # Integers and nothing more: the published schema declares no range (a provider judges
    # 0), and openai-python's own tests send it.
    "max_tokens": INT64,
    "max_completion_tokens": INT64,
    "n": integer(1, 128),
    "temperature": number(0, 2),
    "top_p": number(0, 1),
    "top_k": integer(-1, INT32_MAX),  # not OpenAI's; -1 is "no limit" to vLLM
    "presence_penalty": number(-2, 2),
    "frequency_penalty": number(-2, 2),
    "seed": INT64,
    "stop": either(STRING, STRINGS, expected="a string or an array of strings"),
    "logit_bias": LOGIT_BIAS,
    "logprobs": BOOLEAN,
    "top_logprobs": integer(0, 20),
    "tools": array_of(TOOL, "an array of tools"),
    "tool_choice": TOOL_CHOICE,
    "parallel_tool_calls": BOOLEAN,
    "functions": array_of(FUNCTION, "an array of functions"),
    "function_call": either(one_of("none", "auto"), _NAMED, expected="none, auto or {name}"),
    "response_format": RESPONSE_FORMAT,
    "reasoning_effort": STRING,
    "verbosity": STRING,
    "modalities": STRINGS,
    "audio": OBJECT,
    "prediction": OBJECT,
    "web_search_options": OBJECT,
    "metadata": OBJECT,
    "store": BOOLEAN,
    "service_tier": STRING,
    "user": STRING,
    "safety_identifier": STRING,
    "prompt_cache_key": STRING,
}


def _positive(ext: dict[str, Any], name: str) -> float | None:
    """An extension field that is a positive number of milliseconds, when given."""
    value = ext.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise RequestError(f"agent_reach.{name} must be a positive number", param="agent_reach")
    return float(value)


MAX_SESSION = 512  # characters of a session id named in `agent_reach.session`


def affinity_key(owner: str, session: str) -> str:
    """The key of a session's home (protocol §3.1): its id, scoped by who sent it (a proxy
    client's key, `""` for the library's caller)."""
    scoped = f"{owner}\0{session}".encode()
    return hashlib.blake2b(scoped, digest_size=16, person=b"ar-affinity").hexdigest()


@record
class ChatRequest:
    """An OpenAI chat request plus the `agent_reach` extension (protocol §11.1).

    `body` is what goes upstream (the extension removed); `model` is None when the request names
    none (each provider then uses the first of its `models`).
    """

    body: dict[str, Any]
    model: str | None
    stream: bool
    provider_route: str | None = None
    fallback_order: tuple[str, ...] | None = None
    raw_response: bool = False  # response_schema_compatibility: false
    deadline_ms: float | None = None
    api: str = "chat"  # the API the request arrived in: chat, responses, messages or gemini
    native: dict[str, Any] | None = None  # the request as it arrived, when not a chat one
    # Headers of the client's API that go with `native` to a provider that speaks that API
    # (Messages: `anthropic-beta`; Responses: Codex's `session-id` and its turn routing); never
    # a key.
    native_headers: dict[str, str] | None = None
    # The client's session, for a chat provider that routes its prompt cache by a key it is
    # given (`prompt_cache_key: true`): a Responses request's `prompt_cache_key`, else Codex's
    # `session-id`.
    session: str | None = None
    # The key of its session's home (`engine.affinity`): its session, scoped by the client key
    # that sent it (a session id is the client's choice: it never steers another key's turns).
    affinity: str | None = None
    named: str | None = None  # the session its `agent_reach.session` names
    first_token_ms: float | None = None  # the extension's; else the route's, the provider's
    continuing: str | None = None  # an answer cut mid-stream, for the next provider to finish
    # `body` with the client's `cache_control` marks kept (a Messages request that had some),
    # for a provider that takes them (protocol §2.3 `cache_control`).
    marked: dict[str, Any] | None = None
    # Its conversation holds tool-call ids this proxy renamed (`callids`): a chat provider is
    # sent its own back.
    minted: bool = False

    @classmethod
    def parse(cls, request: dict[str, Any], *, stream: bool | None = None) -> ChatRequest:
        """Check the request's shape; `RequestError` (a 400) names what is wrong."""
        if not isinstance(request, dict):
            raise RequestError("the request must be a JSON object")
        if request.get("messages") is None:
            raise refused("messages", "is required: a non-empty array of messages")
        check_fields(request, CHAT_FIELDS)
        return cls.checked(request, stream=stream)

    @classmethod
    def checked(cls, request: dict[str, Any], *, stream: bool | None = None) -> ChatRequest:
        """A chat request whose fields were checked already: by `parse`, or in the API it
        arrived in (a Responses or Messages request becomes only chat requests the chat checks
        accept: the property tests in tests/test_dialect_*.py), so they are not walked twice.
        Its `agent_reach` extension is read here."""
        model = request.get("model") or None
        streamed = request.get("stream") is True if stream is None else stream
        ext = request.get("agent_reach")
        if ext is None:  # most requests: nothing more to read
            if "agent_reach" in request:  # `"agent_reach": null`
                request = {k: v for k, v in request.items() if k != "agent_reach"}
            return cls(body=request, model=model, stream=streamed, minted=callids.minted(request))
        if not isinstance(ext, dict):
            raise RequestError("'agent_reach' must be an object", param="agent_reach")
        unknown = set(ext) - {
            "provider_route",
            "fallback_order",
            "response_schema_compatibility",
            "deadline_ms",
            "first_token_ms",
            "session",
        }
        if unknown:
            names = quoted(", ".join(sorted(unknown)))
            raise RequestError(f"unknown agent_reach field(s): {names}", param="agent_reach")
        route = ext.get("provider_route")
        if route is not None and not isinstance(route, str):
            raise RequestError("agent_reach.provider_route must be a string", param="agent_reach")
        order = ext.get("fallback_order")
        if order is not None and (
            not isinstance(order, list) or not all(isinstance(n, str) for n in order) or not order
        ):
            raise RequestError(
                "agent_reach.fallback_order must be a non-empty array of provider names",
                param="agent_reach",
            )
        compat = ext.get("response_schema_compatibility", True)
        if not isinstance(compat, bool):
            raise RequestError(
                "agent_reach.response_schema_compatibility must be a boolean", param="agent_reach"
            )
        deadline = _positive(ext, "deadline_ms")
        named = ext.get("session")
        if named is not None and not (isinstance(named, str) and 0 < len(named) <= MAX_SESSION):
            raise RequestError(
                f"agent_reach.session must be a string of 1 to {MAX_SESSION} characters",
                param="agent_reach",
            )
        body = {k: v for k, v in request.items() if k != "agent_reach"}
        return cls(
            body=body,
            model=model,
            stream=streamed,
            provider_route=route,
            fallback_order=tuple(order) if order else None,
            raw_response=not compat,
            deadline_ms=deadline,
            first_token_ms=_positive(ext, "first_token_ms"),
            affinity=None if named is None else affinity_key("", named),
            named=named,
            minted=callids.minted(body),
        )

    @property
    def route_label(self) -> str:
        """The route's name for metrics and events (a model alias is named by the engine)."""
        if self.fallback_order:
            return "custom"
        return self.provider_route or "default"
