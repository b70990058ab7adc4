"""Where each format puts the request's output cap, for its own field and for a configured one.

A table over every dialect's `body()`: the cap's places in the body (dot paths), with the
format's own `max_tokens_field` and with another one, and with no cap at all. Then what a
provider's settings do to the body it is sent: the output cap clamped (native requests too),
and `stream_options` left out for a provider that rejects it.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from agent_reach import dialects
from agent_reach.chat.request import ChatRequest
from agent_reach.config import Provider
from agent_reach.engine.prepared import PreparedProvider

HELLO = {"messages": [{"role": "user", "content": "hi"}]}
CAP = 777  # a value no body carries by itself
V1, V2 = "http://h/v1/text/chatcompletion", "http://h/v1/text/chatcompletion_v2"  # Minimax


def places(value: Any, path: str = "") -> list[str]:
    """The dot paths in `value` whose value is CAP."""
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in places(v, f"{path}.{k}".lstrip("."))]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in places(v, f"{path}.{i}".lstrip("."))]
    return [path] if value == CAP and not isinstance(value, bool) else []


@pytest.mark.parametrize(
    ("fmt", "endpoint", "field", "expected"),
    [
        ("openai", "", "max_tokens", ["max_tokens"]),
        ("openai", "", "max_completion_tokens", ["max_completion_tokens"]),
        ("openai", "", "num_predict", ["options.num_predict"]),
        ("ollama", "", "num_predict", ["options.num_predict"]),
        ("ollama", "", "max_tokens", ["max_tokens"]),
        ("dashscope", "", "max_tokens", ["parameters.max_tokens"]),
        ("dashscope", "", "max_new_tokens", ["max_new_tokens"]),
        ("ernie", "", "max_output_tokens", ["max_output_tokens"]),
        ("ernie", "", "max_tokens", ["max_tokens"]),
        ("gemini", "", "maxOutputTokens", ["generationConfig.maxOutputTokens"]),
        ("gemini", "", "max_tokens", ["max_tokens"]),
        ("responses", "", "max_output_tokens", ["max_output_tokens"]),
        ("responses", "", "max_tokens", ["max_tokens"]),
        ("anthropic", "", "max_tokens", ["max_tokens"]),
        ("anthropic", "", "max_output_tokens", ["max_tokens", "max_output_tokens"]),
        ("minimax", V1, "tokens_to_generate", ["tokens_to_generate"]),
        ("minimax", V1, "max_tokens", ["max_tokens"]),
        ("minimax", V2, "tokens_to_generate", ["max_completion_tokens"]),
        ("minimax", V2, "max_tokens", ["max_tokens"]),
    ],
)
@pytest.mark.parametrize("key", ["max_tokens", "max_completion_tokens"])
def test_the_cap_goes_where_the_format_reads_it(
    fmt: str, endpoint: str, field: str, expected: list[str], key: str
) -> None:
    dialect = dialects.get(fmt).for_endpoint(endpoint)
    body = dialect.body({**HELLO, key: CAP}, "m", False, field)
    assert places(body) == expected


@pytest.mark.parametrize("fmt", dialects.FORMATS)
def test_no_cap_no_field(fmt: str) -> None:
    dialect = dialects.get(fmt)
    body = dialect.body(HELLO, "m", False, dialect.max_tokens_field)
    sent = orjson.dumps(body).decode()
    assert "options" not in body or body["options"]  # no empty object is sent for the cap
    if fmt == "anthropic":  # Anthropic requires a cap: its default
        assert body["max_tokens"] == 4096
    else:
        assert dialect.max_tokens_field not in sent


def test_num_predict_joins_the_requests_own_options_without_changing_the_request() -> None:
    request = {**HELLO, "max_tokens": CAP, "options": {"seed": 1}}
    body = dialects.get("openai").body(request, "m", False, "num_predict")
    assert body["options"] == {"seed": 1, "num_predict": CAP}
    assert request["options"] == {"seed": 1}


@pytest.mark.parametrize(
    ("fmt", "api", "native", "field"),
    [
        ("anthropic", "messages", {**HELLO, "max_tokens": 64000}, "max_tokens"),
        (
            "responses",
            "responses",
            {"input": "hi", "max_output_tokens": 64000},
            "max_output_tokens",
        ),
    ],
)
def test_a_native_request_is_clamped_in_its_own_field(
    fmt: str, api: str, native: dict[str, Any], field: str
) -> None:
    prepared = PreparedProvider.prepare(Provider(name="p", endpoint="http://h/", format=fmt), {})
    req = ChatRequest({**HELLO, "max_tokens": 64000}, "m", False, api=api, native=native)
    assert prepared.speaks(req)
    assert orjson.loads(prepared.body(req, "m", False, 8192))[field] == 8192
    assert orjson.loads(prepared.body(req, "m", False, 100000))[field] == 64000  # never raised
    assert orjson.loads(prepared.body(req, "m", False))[field] == 64000


def test_stream_usage_false_never_sends_stream_options() -> None:
    req = ChatRequest({**HELLO, "stream_options": {"include_usage": True}}, "m", True)
    asks = PreparedProvider.prepare(Provider(name="p", endpoint="http://h/"), {})
    assert orjson.loads(asks.body(req, "m", True))["stream_options"] == {"include_usage": True}
    spec = Provider(name="p", endpoint="http://h/", stream_usage=False)
    assert "stream_options" not in orjson.loads(
        PreparedProvider.prepare(spec, {}).body(req, "m", True)
    )
