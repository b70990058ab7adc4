"""The proxy's input checks as pure functions (protocol §14): what a client may send, what it is
told, and that whatever `ChatRequest.parse` accepts every provider format can send on."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from multidict import CIMultiDict, CIMultiDictProxy

from agent_reach import dialects
from agent_reach.chat.request import CHAT_FIELDS, ChatRequest
from agent_reach.core.errors import RequestError, escaped, quoted
from agent_reach.server.faces.relay import MAX_DEPTH, BadBody, check_depth
from agent_reach.server.guard import Keys

MSG = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("plain", "'plain'"),
        ("it's", "'it\\'s'"),
        ("a\\b", "'a\\\\b'"),
        ("line\nbreak\x00", "'line\\x0abreak\\x00'"),
        ("\udcff\udcfe", "'\\xff\\xfe'"),  # header bytes that are not UTF-8
        ("中文", "'中文'"),
        ("\x85\x9f", "'\\x85\\x9f'"),  # C1 controls
        ("x" * 250, "'" + "x" * 200 + "…'"),
    ],
)
def test_client_input_is_quoted_escaped_and_short(text: str, shown: str) -> None:
    assert quoted(text) == shown


def test_escaped_keeps_one_line() -> None:
    assert "\n" not in escaped("a\r\nb\n" * 100, 1000)


def nested(depth: int) -> Any:
    value: Any = {}
    for _ in range(depth - 1):
        value = [value]
    return value


def test_the_depth_cap_and_the_writer_limit_it_relies_on() -> None:
    check_depth(nested(MAX_DEPTH))
    with pytest.raises(BadBody, match="deeper than 128"):
        check_depth(nested(MAX_DEPTH + 1))
    orjson.dumps(nested(254))  # the writer's limit, which check_depth is computed from
    with pytest.raises(orjson.JSONEncodeError):
        orjson.dumps(nested(255))


def headers(*pairs: tuple[str, str]) -> CIMultiDictProxy[str]:
    return CIMultiDictProxy(CIMultiDict(pairs))


@pytest.mark.parametrize(
    ("pairs", "ok"),
    [
        ([("Authorization", "Bearer k1")], True),
        ([("authorization", "BEARER k2")], True),
        ([("x-api-key", "k1")], True),
        ([("Authorization", "Bearer k3")], False),
        ([("Authorization", "Bearer  k1")], False),
        ([("Authorization", "Bearer k1\t")], False),
        ([("Authorization", "Bearer \udcff")], False),
        ([("Authorization", "Bearer k1"), ("Authorization", "Bearer k2")], False),
        ([("Authorization", "Bearer k1"), ("x-api-key", "k2")], False),
        # one key twice (Claude Code's apiKeyHelper sends both headers) is one key
        ([("Authorization", "Bearer k1"), ("x-api-key", "k1")], True),
        ([("Authorization", "Bearer k1"), ("x-api-key", "k1 ")], False),
        ([("x-goog-api-key", "k2")], True),
        ([("x-api-key", "Bearer k1")], False),
        ([("x-api-key", "k1\udcff")], False),
        ([], False),
    ],
)
def test_keys(pairs: list[tuple[str, str]], ok: bool) -> None:
    problem = Keys(frozenset({"k1", "k2"})).check(headers(*pairs))
    assert (problem is None) is ok, problem


@pytest.mark.parametrize("ext", [0, [], "", False, "x"])
def test_the_extension_must_be_an_object(ext: Any) -> None:
    with pytest.raises(RequestError, match="'agent_reach' must be an object"):
        ChatRequest.parse({"messages": MSG, "agent_reach": ext})
    assert ChatRequest.parse({"messages": MSG, "agent_reach": None}).fallback_order is None


def test_stream_is_true_only_when_true() -> None:
    assert ChatRequest.parse({"messages": MSG, "stream": True}).stream
    assert not ChatRequest.parse({"messages": MSG}).stream


# -- whatever parse accepts, every provider format can send on ------------------------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
text = st.text(max_size=8)
names = st.text(min_size=1, max_size=8)
# Objects of a type the table does not know: they pass, with whatever fields they carry.
others = st.dictionaries(st.sampled_from(["text", "url", "name", "x"]), json_values, max_size=3)


def typed_object(kind: st.SearchStrategy[str], **fields: st.SearchStrategy[Any]) -> Any:
    return st.fixed_dictionaries({"type": kind, **fields}) | st.builds(
        lambda t, rest: {**rest, "type": t}, st.sampled_from(["input_audio", "file", "x"]), others
    )


image = st.sampled_from(["https://x.example/a.png", "data:image/png;base64,iVBORw0KGgo="])
parts = st.lists(
    typed_object(st.just("text"), text=text)
    | st.fixed_dictionaries(
        {
            "type": st.just("image_url"),
            "image_url": image
            | st.fixed_dictionaries(
                {"url": image}, optional={"detail": st.sampled_from(["low", "high", "auto"])}
            ),
        }
    ),
    max_size=3,
)
content = text | parts
arguments = text | st.dictionaries(text, json_values, max_size=2)
calls = st.lists(
    st.fixed_dictionaries(
        {"id": text, "function": st.fixed_dictionaries({"name": names, "arguments": arguments})},
        optional={"type": st.just("function")},
    )
    | st.fixed_dictionaries(
        {
            "id": text,
            "type": st.just("custom"),
            "custom": st.fixed_dictionaries({"name": names, "input": text}),
        }
    ),
    max_size=2,
)
message = (
    st.fixed_dictionaries(
        {"role": st.sampled_from(["system", "developer", "user"]), "content": content},
        optional={"name": text},
    )
    | st.fixed_dictionaries(
        {"role": st.just("assistant")},
        optional={
            "content": st.none() | content,
            "tool_calls": calls,
            "reasoning_content": json_values,
        },
    )
    | st.fixed_dictionaries({"role": st.just("tool"), "content": content, "tool_call_id": text})
    | st.fixed_dictionaries(
        {"role": st.just("function"), "name": text}, optional={"content": st.none() | text}
    )
)
function = st.fixed_dictionaries(
    {"name": names},
    optional={"description": text, "parameters": st.dictionaries(text, json_values, max_size=2)},
)
tools = st.lists(
    st.fixed_dictionaries({"function": function}, optional={"type": st.just("function")})
    | typed_object(st.just("custom"), custom=st.fixed_dictionaries({"name": names})),
    max_size=2,
)
tool_choice = st.sampled_from(["auto", "none", "required"]) | st.fixed_dictionaries(
    {"type": st.just("function"), "function": st.fixed_dictionaries({"name": names})}
)
typed = {
    "stream": st.booleans(),
    "stream_options": st.fixed_dictionaries({}, optional={"include_usage": st.booleans()}),
    "max_tokens": st.integers(1, 2**31 - 1),
    "max_completion_tokens": st.integers(1, 2**31 - 1),
    "n": st.integers(1, 128),
    "temperature": st.floats(0, 2) | st.integers(0, 2),
    "top_p": st.floats(0, 1),
    "top_k": st.integers(-1, 100),
    "presence_penalty": st.floats(-2, 2),
    "frequency_penalty": st.floats(-2, 2),
    "seed": st.integers(-(2**63), 2**63 - 1),
    "stop": text | st.lists(text, max_size=3),
    "logit_bias": st.dictionaries(st.integers(0, 10**5).map(str), st.integers(-100, 100)),
    "logprobs": st.booleans(),
    "top_logprobs": st.integers(0, 20),
    "tools": tools,
    "tool_choice": tool_choice,
    "parallel_tool_calls": st.booleans(),
    "functions": st.lists(function, max_size=2),
    "function_call": st.sampled_from(["auto", "none"]) | st.fixed_dictionaries({"name": names}),
    "response_format": typed_object(st.sampled_from(["text", "json_object"]))
    | st.fixed_dictionaries(
        {
            "type": st.just("json_schema"),
            "json_schema": st.fixed_dictionaries({"name": names}, optional={"schema": others}),
        }
    ),
    "reasoning_effort": text,
    "verbosity": text,
    "modalities": st.lists(text, max_size=2),
    "audio": others,
    "prediction": others,
    "web_search_options": others,
    "metadata": st.dictionaries(text, text, max_size=2),
    "store": st.booleans(),
    "service_tier": text,
    "user": text,
    "safety_identifier": text,
    "prompt_cache_key": text,
}
assert set(typed) == set(CHAT_FIELDS) - {"messages", "model"}
requests = st.fixed_dictionaries(
    {"messages": st.lists(message, min_size=1, max_size=4)},
    optional={**typed, "model": text, "vendor_field": json_values},
)
FORMATS = [
    (name, dialects.get(name).for_endpoint(url))
    for name, url in [(f, "https://x.example/v1/chat") for f in dialects.FORMATS]
    + [("minimax", "https://x.example/v1/text/chatcompletion_v2")]
]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(request=requests)
def test_every_format_sends_on_whatever_parse_accepts(request: dict[str, Any]) -> None:
    req = ChatRequest.parse(request)  # the strategies draw only what the field table accepts
    for name, dialect in FORMATS:
        for field in ("max_tokens", "max_completion_tokens"):
            body = dialect.body(req.body, "m", req.stream, field)
            assert isinstance(orjson.dumps(body), bytes), name
