"""The Chat Completions field table (`request.CHAT_FIELDS`, protocol §5.1): what a chat request
must be, and the `param` a refusal names, exactly as OpenAI names it. Pure, by tables."""

from __future__ import annotations

from typing import Any

import pytest

from agent_reach.chat.checks import INT32_MAX
from agent_reach.chat.request import ChatRequest
from agent_reach.core.errors import RequestError

MSG = [{"role": "user", "content": "hi"}]
CALL = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}


def refusal(request: Any) -> RequestError:
    with pytest.raises(RequestError) as info:
        ChatRequest.parse(request)
    assert info.value.status == 400
    return info.value


@pytest.mark.parametrize(
    ("field", "good", "bad", "param"),
    [
        ("model", "gpt-4o", 4, "model"),
        ("stream", True, "false", "stream"),
        ("stream", False, 0, "stream"),
        ("stream_options", {"include_usage": True}, True, "stream_options"),
        (
            "stream_options",
            {"include_usage": False},
            {"include_usage": 1},
            "stream_options.include_usage",
        ),
        ("max_tokens", 0, 2**63, "max_tokens"),  # any 64-bit integer, as the schema says
        ("max_tokens", INT32_MAX + 1, 1e30, "max_tokens"),
        ("max_tokens", 1, 1.5, "max_tokens"),
        ("max_completion_tokens", 100, True, "max_completion_tokens"),
        ("max_completion_tokens", -1, "100", "max_completion_tokens"),
        ("n", 128, 129, "n"),
        ("n", 1, 0, "n"),
        ("temperature", 0, "0.7", "temperature"),
        ("temperature", 2, 2.01, "temperature"),
        ("temperature", 0.7, -0.1, "temperature"),
        ("temperature", 1, float("nan"), "temperature"),
        ("top_p", 1, [1], "top_p"),
        ("top_p", 0.5, 1.5, "top_p"),
        ("top_k", -1, 0.5, "top_k"),
        ("presence_penalty", -2, -2.5, "presence_penalty"),
        ("frequency_penalty", 2, float("inf"), "frequency_penalty"),
        ("seed", -(2**63), 2**64 - 1, "seed"),
        ("stop", "END", 5, "stop"),
        ("stop", ["a", "b"], ["a", 1], "stop[1]"),
        ("logit_bias", {"50256": 101}, {"50256": 1.5}, "logit_bias"),  # integers, no range
        ("logit_bias", {"1": -100}, [1], "logit_bias"),
        ("logprobs", True, "yes", "logprobs"),
        ("top_logprobs", 20, 21, "top_logprobs"),
        ("tools", [TOOL], "all", "tools"),
        ("tools", [TOOL], [1], "tools[0]"),
        ("tools", [TOOL], [{"type": "function"}], "tools[0].function"),
        (
            "tools",
            [TOOL],
            [{"type": "function", "function": {"name": ""}}],
            "tools[0].function.name",
        ),
        (
            "tools",
            [{"function": {"name": "no_type"}}],  # `type` defaults to function
            [TOOL, {"type": "function", "function": {"name": "f", "parameters": "{}"}}],
            "tools[1].function.parameters",
        ),
        ("tools", [{"type": "web_search", "web_search": {}}], [{"type": 7}], "tools[0].type"),
        (
            "tools",
            [{"type": "custom", "custom": {"name": "patch"}}],
            [{"type": "custom"}],
            "tools[0].custom",
        ),
        ("tool_choice", "required", "any", "tool_choice"),
        ("tool_choice", "auto", 1, "tool_choice"),
        (
            "tool_choice",
            {"type": "function", "function": {"name": "f"}},
            {"type": "function", "function": {}},
            "tool_choice.function.name",
        ),
        (
            "tool_choice",
            {"type": "allowed_tools", "allowed_tools": {}},
            {"mode": "auto"},
            "tool_choice.type",
        ),
        ("parallel_tool_calls", False, "no", "parallel_tool_calls"),
        ("functions", [{"name": "f"}], [{"description": "x"}], "functions[0].name"),
        ("function_call", {"name": "f"}, "always", "function_call"),
        ("response_format", {"type": "json_object"}, "json", "response_format"),
        ("response_format", {"type": "text"}, {}, "response_format.type"),
        (
            "response_format",
            {"type": "json_schema", "json_schema": {"name": "x", "schema": {}}},
            {"type": "json_schema", "json_schema": {"name": "x", "schema": "{}"}},
            "response_format.json_schema.schema",
        ),
        ("reasoning_effort", "high", 3, "reasoning_effort"),
        ("modalities", ["text"], "text", "modalities"),
        ("metadata", {"k": "v"}, "v", "metadata"),
        ("store", True, "true", "store"),
        ("user", "u1", 1, "user"),
        ("safety_identifier", "s", {}, "safety_identifier"),
        ("prompt_cache_key", "k", 1, "prompt_cache_key"),
    ],
)
def test_each_field_is_checked_and_named(field: str, good: Any, bad: Any, param: str) -> None:
    ChatRequest.parse({"messages": MSG, field: good})
    ChatRequest.parse({"messages": MSG, field: None})  # null is "not given"
    error = refusal({"messages": MSG, field: bad})
    assert error.param == param
    assert f"'{param}'" in str(error)


@pytest.mark.parametrize(
    ("messages", "param"),
    [
        (None, "messages"),
        ([], "messages"),
        ("hello", "messages"),
        ([MSG[0], "hi"], "messages[1]"),
        ([{"content": "hi"}], "messages[0].role"),
        ([{"role": "bot", "content": "hi"}], "messages[0].role"),
        ([{"role": "user"}], "messages[0].content"),
        ([{"role": "user", "content": None}], "messages[0].content"),
        ([{"role": "system", "content": 5}], "messages[0].content"),
        ([{"role": "user", "content": {"text": "hi"}}], "messages[0].content"),
        ([{"role": "user", "content": ["hi"]}], "messages[0].content[0]"),
        ([{"role": "user", "content": [{"text": "hi"}]}], "messages[0].content[0].type"),
        ([{"role": "user", "content": [{"type": "text"}]}], "messages[0].content[0].text"),
        (
            [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image_url"}]}],
            "messages[0].content[1].image_url",
        ),
        (
            [{"role": "user", "content": [{"type": "image_url", "image_url": {"detail": "low"}}]}],
            "messages[0].content[0].image_url.url",
        ),
        ([{"role": "developer", "content": "x", "name": 1}], "messages[0].name"),
        ([{"role": "tool", "content": "42"}], "messages[0].tool_call_id"),
        ([{"role": "tool", "tool_call_id": "c"}], "messages[0].content"),
        ([MSG[0], {"role": "assistant", "tool_calls": {}}], "messages[1].tool_calls"),
        (
            [{"role": "assistant", "tool_calls": [{**CALL, "id": None}]}],
            "messages[0].tool_calls[0].id",
        ),
        (
            [{"role": "assistant", "tool_calls": [{**CALL, "type": "tool"}]}],
            "messages[0].tool_calls[0].type",
        ),
        (
            [{"role": "assistant", "tool_calls": [{"id": "c", "function": {"arguments": "{}"}}]}],
            "messages[0].tool_calls[0].function.name",
        ),
        (
            [{"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f"}}]}],
            "messages[0].tool_calls[0].function.arguments",
        ),
        ([{"role": "function", "content": "x"}], "messages[0].name"),
    ],
)
def test_messages_are_checked_down_to_the_part(messages: Any, param: str) -> None:
    assert refusal({"messages": messages}).param == param


@pytest.mark.parametrize(
    "messages",
    [
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}],
        [{"role": "developer", "content": [{"type": "text", "text": "rules"}]}, *MSG],
        [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "what is this?"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                    {"type": "image_url", "image_url": "https://x.example/a.png"},
                    {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}},
                ],
            }
        ],
        [
            *MSG,
            {"role": "assistant", "content": None, "tool_calls": [CALL]},
            {"role": "tool", "tool_call_id": "call_1", "content": "42"},
            {"role": "assistant", "content": "", "reasoning_content": "thought"},
            {"role": "user", "content": ""},
        ],
        [
            *MSG,
            {
                "role": "assistant",
                "tool_calls": [
                    {"id": "c", "function": {"name": "f", "arguments": {"x": 1}}},
                    {"id": "d", "type": "custom", "custom": {"name": "patch", "input": "*"}},
                ],
            },
        ],
        [*MSG, {"role": "assistant", "function_call": {"name": "f", "arguments": "{}"}}],
        [{"role": "function", "name": "f", "content": None}, *MSG],
        [{"role": "user", "content": [], "cache_control": {"type": "ephemeral"}}],
    ],
)
def test_real_conversations_pass(messages: list[dict[str, Any]]) -> None:
    assert ChatRequest.parse({"messages": messages}).body["messages"] == messages


def test_unknown_fields_pass_through() -> None:
    body = {
        "messages": MSG,
        "thinking": {"type": "enabled"},  # DeepSeek's, Zhipu's
        "enable_thinking": True,  # DashScope's
        "extra_body": 5,
        "temperature": None,
    }
    assert ChatRequest.parse(body).body == body


def test_a_refusal_quotes_little_of_what_it_was_given() -> None:
    error = refusal({"messages": [{"role": "x" * 10_000, "content": "hi"}]})
    assert len(str(error)) < 200
    assert "xxxx" in str(error)
    error = refusal({"messages": MSG, "stop": {"huge": "y" * 10_000}})
    assert "yyy" not in str(error)
    assert "(got an object)" in str(error)


@pytest.mark.parametrize("session", ["", "x" * 513, 7, None])
def test_a_named_session_is_a_short_string(session: Any) -> None:
    """`agent_reach.session` (protocol §3.1): 1 to 512 characters, else the caller's 400;
    `null` names none."""
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    request = {**body, "agent_reach": {"session": session}}
    if session is None:
        req = ChatRequest.parse(request)
        assert (req.named, req.affinity, req.body) == (None, None, body)
        return
    with pytest.raises(RequestError, match=r"agent_reach\.session must be a string") as info:
        ChatRequest.parse(request)
    assert info.value.param == "agent_reach"
    named = ChatRequest.parse({**body, "agent_reach": {"session": "x" * 512}})
    assert named.named == "x" * 512
    assert named.body == body  # the extension never goes upstream
