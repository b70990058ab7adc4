"""The proxy's input checks as pure functions (spec §14): what a client may send, what it is
told, and that whatever `ChatRequest.parse` accepts every provider format can send on."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from multidict import CIMultiDict, CIMultiDictProxy

from agent_reach import dialects
from agent_reach.errors import RequestError, escaped, quoted
from agent_reach.request import CHAT_FIELDS, ChatRequest
from agent_reach.server.guard import Keys
from agent_reach.server.http import MAX_DEPTH, BadBody, check_depth

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
        ([("Authorization", "Bearer k1"), ("Authorization", "Bearer k1")], False),
        ([("Authorization", "Bearer k1"), ("x-api-key", "k1")], False),
        ([("x-api-key", "Bearer k1")], False),
        ([("x-api-key", "k1\udcff")], False),
        ([], False),
    ],
)
def test_keys(pairs: list[tuple[str, str]], ok: bool) -> None:
    problem = Keys(frozenset({"k1", "k2"})).check(headers(*pairs))
    assert (problem is None) is ok, problem


@pytest.mark.parametrize(
    ("field", "good", "bad"),
    [
        ("stream", True, "false"),
        ("stream", False, 0),
        ("max_tokens", 2**31 - 1, 2**31),
        ("max_tokens", 1, 1e30),
        ("max_completion_tokens", 100, True),
        ("n", 128, 129),
        ("temperature", 0.7, "0.7"),
        ("top_p", 1, [1]),
        ("seed", -(2**63), 2**64 - 1),
        ("stop", ["a", "b"], ["a", 1]),
        ("tools", [{"type": "function"}], [1]),
        ("tool_choice", "auto", 1),
        ("parallel_tool_calls", False, "no"),
        ("response_format", {"type": "json_object"}, "json"),
        ("stream_options", {"include_usage": True}, True),
        ("user", "u1", 1),
    ],
)
def test_fields_have_strict_types(field: str, good: Any, bad: Any) -> None:
    ChatRequest.parse({"messages": MSG, field: good})
    ChatRequest.parse({"messages": MSG, field: None})  # null is "not given"
    with pytest.raises(RequestError) as info:
        ChatRequest.parse({"messages": MSG, field: bad})
    assert info.value.param == field
    assert field in str(info.value)


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
objects = st.dictionaries(
    st.sampled_from(
        ["type", "text", "image_url", "url", "function", "name", "arguments", "id", "x"]
    ),
    json_values,
    max_size=4,
)
content = st.none() | st.text(max_size=10) | st.lists(objects, max_size=3)
message = st.fixed_dictionaries(
    {
        "role": st.sampled_from(
            ["system", "developer", "user", "assistant", "tool", "function", "x"]
        )
    },
    optional={
        "content": content,
        "name": st.text(max_size=5),
        "tool_calls": st.lists(objects, max_size=2),
        "tool_call_id": st.text(max_size=5),
        "reasoning_content": json_values,
    },
)
typed = {
    "stream": st.booleans(),
    "stream_options": objects,
    "max_tokens": st.integers(1, 2**31 - 1),
    "max_completion_tokens": st.integers(1, 2**31 - 1),
    "n": st.integers(1, 128),
    "temperature": st.floats(-5, 5) | st.integers(-5, 5),
    "top_p": st.floats(0, 1),
    "top_k": st.integers(-5, 100),
    "seed": st.integers(-(2**63), 2**63 - 1),
    "stop": st.text(max_size=5) | st.lists(st.text(max_size=5), max_size=3),
    "tools": st.lists(objects, max_size=2),
    "functions": st.lists(objects, max_size=2),
    "tool_choice": st.text(max_size=8) | objects,
    "parallel_tool_calls": st.booleans(),
    "response_format": objects,
    "user": st.text(max_size=5),
}
assert set(typed) == set(CHAT_FIELDS)
requests = st.fixed_dictionaries(
    {"messages": st.lists(message, min_size=1, max_size=4)},
    optional={**typed, "model": st.text(max_size=5), "metadata": json_values},
)
FORMATS = [
    (name, dialects.get(name).for_endpoint(url))
    for name, url in [(f, "https://x.example/v1/chat") for f in dialects.FORMATS]
    + [("minimax", "https://x.example/v1/text/chatcompletion_v2")]
]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(request=requests)
def test_every_format_sends_on_whatever_parse_accepts(request: dict[str, Any]) -> None:
    req = ChatRequest.parse(request)
    for name, dialect in FORMATS:
        for field in ("max_tokens", "max_completion_tokens"):
            body = dialect.body(req.body, "m", req.stream, field)
            assert isinstance(orjson.dumps(body), bytes), name
