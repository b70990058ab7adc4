"""The proxy's Anthropic Messages face (`/v1/messages`), driven by the official `anthropic` SDK.

Every body and stream event the proxy emits is checked against the SDK's own types, strictly
(`Message`, `RawMessageStreamEvent`, `ErrorResponse`, `MessageTokensCount`).
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pydantic
import pytest
from anthropic.types import Message, MessageTokensCount, RawMessageStreamEvent
from anthropic.types.shared import ErrorResponse

from ..fakes.upstream import (
    CLAUDE_TEXT,
    CLAUDE_THINKING,
    CLAUDE_USAGE,
    TOOL_WORD,
    Upstream,
    own_bytes,
    proxy_config,
    refused_url,
)
from .test_proxy import PROVIDER_KEY, Proxy, start, stop

CLIENT_KEY = "sk-client-2b3c4d5e6f-SECRET"
MODEL = "claude-sonnet-4-6"
HI = [{"role": "user", "content": "hi"}]
WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Weather of a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}
EVENTS: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(RawMessageStreamEvent)


def config(upstream: Upstream) -> dict[str, Any]:
    chats = ("ok", "auth", "toolcall", "streamcut", "ratelimit", "badreq", "context", "usage")
    chats += ("samecall",)
    providers = [upstream.provider(s) for s in chats]
    providers += [
        upstream.provider(s, "anthropic", model_map={"*": "claude-upstream-model"})
        for s in ("claude", "claudecut")
    ]
    providers.append(upstream.provider("auth", "anthropic", name="claudeauth"))
    providers.append({"name": "dead", "endpoint": refused_url()})
    return proxy_config(
        providers,
        fallback_order=["dead", "auth", "ok"],
        server={"api_keys_env": "PROXY_KEYS"},
        routes={"claude-deepseek": ["dead", "ok"], "claude-b": ["ok"], "claude-c": ["ok"]},
    )


@pytest.fixture(scope="module")
def proxy(upstream: Upstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    tmp = tmp_path_factory.mktemp("messages")
    p = start(config(upstream), tmp, upstream, env={"PROXY_KEYS": CLIENT_KEY})
    yield p
    stop(p)
    log = (tmp / "proxy.log").read_text()
    assert "Traceback" not in log
    assert PROVIDER_KEY not in log
    assert CLIENT_KEY not in log


@pytest.fixture
def client(proxy: Proxy, up: Upstream) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=proxy.base, api_key=CLIENT_KEY, max_retries=0) as c:
        yield c


def chain(*names: str) -> dict[str, Any]:
    return {"extra_headers": {"X-Agent-Reach-Fallback-Order": ",".join(names)}}


def message(raw: Any) -> dict[str, Any]:
    """The response's JSON body, after checking it against the SDK's `Message`, strictly."""
    body: dict[str, Any] = json.loads(raw.http_response.text)
    Message.model_validate(body, strict=True)
    return body


def sse(proxy: Proxy, body: dict[str, Any], *names: str) -> tuple[Any, list[tuple[str, Any]]]:
    """POST a stream request; (response, [(event, data)]), every event checked against the
    SDK's types strictly (an `error` event against `ErrorResponse`)."""
    headers = {
        "Content-Type": "application/json",
        "x-api-key": CLIENT_KEY,
        "anthropic-version": "2023-06-01",
    }
    if names:
        headers["X-Agent-Reach-Fallback-Order"] = ",".join(names)
    req = urllib.request.Request(
        proxy.base + "/v1/messages?beta=true",
        data=json.dumps({**body, "stream": True}).encode(),
        headers=headers,
    )
    events = []
    with urllib.request.urlopen(req, timeout=10) as resp:
        text = resp.read().decode()
    for block in text.split("\n\n"):
        if not block.strip():
            continue
        lines = dict(line.split(": ", 1) for line in block.split("\n"))
        data = json.loads(lines["data"])
        assert data["type"] == lines["event"]
        if lines["event"] == "error":
            ErrorResponse.model_validate(data, strict=True)
        elif lines["event"] == "ping":  # the SDK skips pings: they have no type of their own
            assert data == {"type": "ping"}
        else:
            EVENTS.validate_python(data, strict=True)
        events.append((lines["event"], data))
    return resp, events


# -- text ------------------------------------------------------------------------------------


def test_models_in_anthropics_shape_for_an_anthropic_client(
    client: anthropic.Anthropic, proxy: Proxy
) -> None:
    """Issue 50, item 1: Claude Code's gateway model discovery asks `GET /v1/models?limit=1000`
    with `anthropic-version`; the routes and mapped models come back as Anthropic lists them,
    a page at a time (the SDK walks the pages by `after_id`)."""
    ids = [m.id for m in client.models.list(limit=2)]
    assert ids[-3:] == ["claude-b", "claude-c", "claude-deepseek"]  # routes (the file sorted)
    assert "claude-upstream-model" in ids  # a model a provider is asked for
    assert len(ids) == len(set(ids))
    headers = {"anthropic-version": "2023-06-01", "x-api-key": CLIENT_KEY}
    status, first = proxy.get("/v1/models?limit=1000", headers)
    assert status == 200
    assert [m["id"] for m in first["data"]] == ids
    assert first["data"][-1] == {
        "type": "model",
        "id": "claude-deepseek",
        "display_name": "claude-deepseek",
        "created_at": "1970-01-01T00:00:00Z",
    }
    assert (first["has_more"], first["first_id"], first["last_id"]) == (False, ids[0], ids[-1])
    _, last = proxy.get("/v1/models?limit=2&before_id=claude-deepseek", headers)
    assert [m["id"] for m in last["data"]] == ["claude-b", "claude-c"]
    assert last["has_more"] is True
    status, wrong = proxy.get("/v1/models?limit=0", headers)
    assert status == 400
    assert wrong["error"]["type"] == "invalid_request_error"
    # Without `anthropic-version`: OpenAI's list, as before.
    _, openai_list = proxy.get("/v1/models", {"Authorization": f"Bearer {CLIENT_KEY}"})
    assert openai_list["object"] == "list"
    assert [m["id"] for m in openai_list["data"]] == ids


@pytest.mark.parametrize("stream", [False, True])
def test_a_provider_that_repeats_its_tool_call_ids(
    client: anthropic.Anthropic, up: Upstream, stream: bool
) -> None:
    """Issue 50, item 3: a provider names every tool call `call_1`; the client gets a new id
    each turn (and the conversation ends), the provider gets its own ids back."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "run three commands"}]
    bash = {"name": "Bash", "input_schema": {"type": "object", "properties": {}}}
    ids = []
    for _ in range(4):
        kwargs: dict[str, Any] = {
            "model": "m",
            "max_tokens": 100,
            "messages": messages,
            "tools": [bash],
        }
        if stream:
            with client.messages.stream(**kwargs, **chain("samecall")) as s:
                answer = s.get_final_message()
        else:
            answer = client.messages.create(**kwargs, **chain("samecall"))
        if answer.stop_reason != "tool_use":
            break
        [use] = [b for b in answer.content if b.type == "tool_use"]
        ids.append(use.id)
        messages.append({"role": "assistant", "content": [use.model_dump()]})
        result = {"type": "tool_result", "tool_use_id": use.id, "content": "ok"}
        messages.append({"role": "user", "content": [result]})
    assert answer.content[0].text == "Ran 3 commands."  # type: ignore[union-attr]
    assert ids == ["toolu_call_1", "toolu_call_1-ar2", "toolu_call_1-ar3"]
    last = up.bodies("samecall")[-1]["messages"]
    sent = [c["id"] for m in last for c in m.get("tool_calls") or ()]
    assert sent == ["toolu_call_1"] * 3  # as it named them (the Messages face's prefix kept)
    assert [m["tool_call_id"] for m in last if m["role"] == "tool"] == sent


def test_a_chat_client_gets_ids_apart_too(proxy: Proxy) -> None:
    """The same on the Chat Completions face (a whole answer, sent as the provider's bytes
    when nothing changes)."""
    chat = openai.OpenAI(base_url=proxy.base + "/v1", api_key=CLIENT_KEY, max_retries=0)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "run three commands"}]
    tool = {"type": "function", "function": {"name": "exec", "parameters": {"type": "object"}}}
    ids = []
    for _ in range(4):
        answer = chat.chat.completions.create(
            model="m",
            messages=messages,  # type: ignore[arg-type]
            tools=[tool],  # type: ignore[list-item]
            extra_headers={"X-Agent-Reach-Fallback-Order": "samecall"},
        )
        message = answer.choices[0].message
        if not message.tool_calls:
            break
        ids.append(message.tool_calls[0].id)
        messages.append(message.model_dump(exclude_none=True))
        messages.append({"role": "tool", "tool_call_id": ids[-1], "content": "ok"})
    assert message.content == "Ran 3 commands."
    assert ids == ["call_1", "call_1-ar2", "call_1-ar3"]


def test_message_after_a_dead_and_a_401_provider(client: anthropic.Anthropic, up: Upstream) -> None:
    raw = client.messages.with_raw_response.create(
        model=MODEL, max_tokens=100, messages=HI, **chain("dead", "auth", "ok")
    )
    body = message(raw)
    assert body["content"] == [{"type": "text", "text": "hello from ok"}]
    assert body["id"].startswith("msg_")
    assert body["stop_reason"] == "end_turn"
    assert body["usage"] == {"input_tokens": 5, "output_tokens": 3}
    assert raw.headers["X-Agent-Reach-Provider"] == "ok"
    trace = raw.headers["X-Agent-Reach-Trace"].split(",")
    assert [t.rsplit(":", 1)[0] for t in trace] == [
        "dead:connect_failed",
        "auth:auth_failed",
        "ok:ok",
    ]
    assert "X-Agent-Reach-Dropped" not in raw.headers
    sent = up.bodies("ok")[-1]
    assert sent["messages"] == [{"role": "user", "content": "hi"}]
    assert sent["max_tokens"] == 100
    assert PROVIDER_KEY not in raw.http_response.text
    assert CLIENT_KEY not in raw.http_response.text


def test_system_blocks_and_sampling_are_translated(
    client: anthropic.Anthropic, up: Upstream
) -> None:
    client.messages.create(
        model=MODEL,
        max_tokens=50,
        system=[{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Be kind."}],
        messages=[
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {"role": "assistant", "content": "hello"},
            {"role": "user", "content": "again"},
        ],
        stop_sequences=["END"],
        metadata={"user_id": "u-42"},
        extra_body={"temperature": 0.2, "top_p": 0.9},  # no longer arguments of this SDK
        **chain("ok"),
    )
    sent = up.bodies("ok")[-1]
    assert sent["messages"] == [
        {"role": "system", "content": "Be brief.\n\nBe kind."},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "again"},
    ]
    assert (sent["temperature"], sent["top_p"], sent["stop"]) == (0.2, 0.9, ["END"])
    assert sent["user"] == "u-42"
    assert "metadata" not in sent


def test_stream_after_a_dead_and_a_401_provider(client: anthropic.Anthropic, proxy: Proxy) -> None:
    with client.messages.stream(
        model=MODEL, max_tokens=100, messages=HI, **chain("dead", "auth", "ok")
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "hello from ok"
    assert final.stop_reason == "end_turn"
    assert final.usage.input_tokens == 0  # this provider streams no usage

    resp, events = sse(proxy, {"model": MODEL, "max_tokens": 100, "messages": HI}, "dead", "ok")
    assert resp.headers["X-Agent-Reach-Provider"] == "ok"
    names = [e for e, _ in events]
    assert names == [
        "message_start",
        "content_block_start",
        "ping",
        "content_block_delta",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]


# -- tools -----------------------------------------------------------------------------------


SHELL_TOOL = {
    "name": "Bash",
    "description": "Runs a shell command",
    "input_schema": {
        "type": "object",
        "properties": {"command": {"type": "string"}},
        "required": ["command"],
    },
}
ECHO = {"command": f"echo {TOOL_WORD}"}  # what the `toolcall` provider asks to run
ANSWER = f"The command printed: {TOOL_WORD}"  # and says once it has the output


def tool_turn(call: dict[str, Any]) -> list[dict[str, Any]]:
    """The conversation after the model's tool call: the call, and its result."""
    return [
        {"role": "user", "content": "Say hi in the shell"},
        {"role": "assistant", "content": [call]},
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": call["id"],
                    "content": [{"type": "text", "text": TOOL_WORD}],
                }
            ],
        },
    ]


def test_a_stream_from_a_chat_provider_ends_with_its_usage(
    client: anthropic.Anthropic, up: Upstream
) -> None:
    with client.messages.stream(
        model=MODEL, max_tokens=100, messages=HI, **chain("dead", "usage")
    ) as stream:
        final = stream.get_final_message()
    assert final.content[0].text == "hello from usage"  # type: ignore[union-attr]
    # Anthropic counts cached tokens apart from input_tokens.
    assert (final.usage.input_tokens, final.usage.cache_read_input_tokens) == (20, 100)
    assert final.usage.output_tokens == 30
    assert up.bodies("usage")[-1]["stream_options"] == {"include_usage": True}


def test_tool_call_and_its_result(client: anthropic.Anthropic, up: Upstream) -> None:
    raw = client.messages.with_raw_response.create(
        model=MODEL,
        max_tokens=200,
        messages=[{"role": "user", "content": "Say hi in the shell"}],
        tools=[SHELL_TOOL],
        tool_choice={"type": "auto"},
        **chain("dead", "auth", "toolcall"),
    )
    body = message(raw)
    assert body["stop_reason"] == "tool_use"
    [call] = body["content"]
    assert call == {"type": "tool_use", "id": "toolu_call_test1", "name": "Bash", "input": ECHO}
    sent = up.bodies("toolcall")[-1]
    assert sent["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "Bash",
                "description": "Runs a shell command",
                "parameters": SHELL_TOOL["input_schema"],
            },
        }
    ]
    assert sent["tool_choice"] == "auto"

    final = client.messages.create(
        model=MODEL,
        max_tokens=200,
        messages=tool_turn(call),
        tools=[SHELL_TOOL],
        **chain("toolcall"),
    )
    assert final.content[0].type == "text"
    assert final.content[0].text == ANSWER
    assert final.stop_reason == "end_turn"
    sent = up.bodies("toolcall")[-1]["messages"]
    assert sent[1] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": call["id"],
                "type": "function",
                "function": {"name": "Bash", "arguments": json.dumps(ECHO, separators=(",", ":"))},
            }
        ],
    }
    assert sent[2] == {"role": "tool", "tool_call_id": call["id"], "content": TOOL_WORD}


def test_streamed_tool_call_and_its_result(client: anthropic.Anthropic, proxy: Proxy) -> None:
    request: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": 200,
        "messages": [{"role": "user", "content": "Say hi in the shell"}],
        "tools": [SHELL_TOOL],
    }
    with client.messages.stream(**request, **chain("dead", "auth", "toolcall")) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use"
    [call] = final.content
    assert call.type == "tool_use"
    assert (call.id, call.name, call.input) == ("toolu_call_test1", "Bash", ECHO)
    assert final.usage.input_tokens == 21
    assert final.usage.output_tokens == 9

    _, events = sse(proxy, request, "toolcall")
    deltas = [d["delta"] for e, d in events if e == "content_block_delta"]
    assert {d["type"] for d in deltas} == {"input_json_delta"}
    # The provider sent the arguments in two pieces; a tool call goes to the client whole
    # (issue 51: a cut inside it would leave a call no agent can run).
    assert len(deltas) == 1
    assert json.loads("".join(d["partial_json"] for d in deltas)) == ECHO
    assert events[-2][1]["usage"] == {"input_tokens": 21, "output_tokens": 9}

    turn = tool_turn(call.model_dump(exclude_none=True))
    with client.messages.stream(**{**request, "messages": turn}, **chain("toolcall")) as stream:
        assert "".join(stream.text_stream) == ANSWER


# -- what a chat provider does not see -------------------------------------------------------


def test_fields_a_chat_provider_cannot_take_are_dropped_and_named(
    client: anthropic.Anthropic, up: Upstream
) -> None:
    raw = client.messages.with_raw_response.create(
        model=MODEL,
        max_tokens=2000,
        system=[{"type": "text", "text": "sys", "cache_control": {"type": "ephemeral"}}],
        messages=[
            {"role": "user", "content": "q"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "hm", "signature": "sig"},
                    {"type": "text", "text": "a"},
                ],
            },
            {"role": "user", "content": "q2"},
        ],
        thinking={"type": "enabled", "budget_tokens": 1024},
        tools=[
            WEATHER_TOOL,
            {"type": "web_search_20250305", "name": "web_search", "max_uses": 2},
        ],
        extra_body={"service_tier": "auto", "top_k": 5},
        **chain("ok"),
    )
    message(raw)
    dropped = raw.headers["X-Agent-Reach-Dropped"].split(",")
    assert set(dropped) == {
        "service_tier",
        "cache_control",
        "thinking",
        "top_k",
        "tools:web_search",
    }
    sent = up.bodies("ok")[-1]
    text = json.dumps(sent)
    for word in ("cache_control", "thinking", "top_k", "web_search", "service_tier", "sig"):
        assert word not in text
    assert sent["messages"][2] == {"role": "assistant", "content": "a"}
    assert [t["function"]["name"] for t in sent["tools"]] == ["get_weather"]


def test_dropped_names_are_safe_in_a_header(client: anthropic.Anthropic) -> None:
    evil = {"type": "x_20250101", "name": "wéb\r\nX-Evil: 1"}
    many = {f"field_{i:04}": 1 for i in range(300)}
    raw = client.messages.with_raw_response.create(
        model=MODEL,
        max_tokens=10,
        messages=HI,
        tools=[WEATHER_TOOL, evil],  # type: ignore[list-item]
        extra_body=many,
        **chain("ok"),
    )
    message(raw)
    assert "X-Evil" not in raw.headers
    dropped = raw.headers["X-Agent-Reach-Dropped"]
    assert dropped.startswith("field_0000,field_0001")
    assert dropped.endswith("...")
    assert len(dropped) == 1000
    raw = client.messages.with_raw_response.create(
        model=MODEL,
        max_tokens=10,
        messages=HI,
        tools=[evil],
        **chain("ok"),  # type: ignore[list-item]
    )
    assert raw.headers["X-Agent-Reach-Dropped"] == "tools:w?b??X-Evil: 1"


# -- native passthrough to a `format: anthropic` provider ---------------------------------


NATIVE = {
    "model": MODEL,
    "max_tokens": 3000,
    "system": [{"type": "text", "text": "sys", "cache_control": {"type": "ephemeral"}}],
    "messages": [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": [CLAUDE_THINKING, {"type": "text", "text": "a"}]},
        {
            "role": "user",
            "content": [{"type": "text", "text": "q2", "cache_control": {"type": "ephemeral"}}],
        },
    ],
    "thinking": {"type": "enabled", "budget_tokens": 1024},
    "context_management": {"edits": [{"type": "clear_tool_uses_20250919"}]},
    "tools": [{**WEATHER_TOOL, "strict": True, "cache_control": {"type": "ephemeral"}}],
}


def native(request: dict[str, Any] = NATIVE) -> dict[str, Any]:
    """`request` as SDK arguments (what the SDK has no argument for goes in `extra_body`)."""
    sdk = ("model", "max_tokens", "messages")
    return {
        **{k: request[k] for k in sdk},
        "extra_body": {k: v for k, v in request.items() if k not in sdk},
    }


def test_native_passthrough_keeps_everything(client: anthropic.Anthropic, up: Upstream) -> None:
    raw = client.messages.with_raw_response.create(
        **native(),
        extra_headers={
            "X-Agent-Reach-Fallback-Order": "dead,claude",
            "anthropic-beta": "context-management-2025-06-27, mcp-client-2025-04-04",
        },
    )
    body = message(raw)
    assert own_bytes(body["content"][0].pop("signature")) == CLAUDE_THINKING["signature"]
    assert body == {
        "id": "msg_01ClaudeNative",
        "type": "message",
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": CLAUDE_THINKING["thinking"]},
            {"type": "text", "text": CLAUDE_TEXT},
        ],
        "model": "claude-upstream-model",
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": CLAUDE_USAGE,
    }
    assert raw.headers["X-Agent-Reach-Provider"] == "claude"
    assert "X-Agent-Reach-Dropped" not in raw.headers
    [got] = [r for r in up.received if r.scenario == "claude"]
    assert got.body == {**NATIVE, "model": "claude-upstream-model", "stream": False}
    assert got.headers["x-api-key"] == PROVIDER_KEY
    assert got.headers["anthropic-version"] == "2023-06-01"
    assert got.headers["anthropic-beta"] == "context-management-2025-06-27"  # allowed only
    assert "Authorization" not in got.headers


# What Claude Code 2.1.332 sends that 2.1.197 did not (issue 50, item 4).
BETAS_2_1_332 = (
    "claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27,"
    "thinking-token-count-2026-05-13,advanced-tool-use-2025-11-20"
)
BODY_2_1_332 = {
    "model": MODEL,
    "max_tokens": 4096,
    "messages": [{"role": "user", "content": "q"}],
    "thinking": {"type": "enabled", "budget_tokens": 2048, "display": "omitted"},
    "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
    "metadata": {"user_id": '{"device_id":"d1","session_id":"s-1"}'},
    "fallbacks": [{"model": "claude-sonnet-4-6"}],
}


def test_claude_code_2_1_332s_body_reaches_a_native_provider(
    client: anthropic.Anthropic, up: Upstream
) -> None:
    """The new `thinking.display`, `context_management` edit and betas reach an Anthropic
    endpoint as sent; `fallbacks` (Anthropic's own server-side fallback) only Anthropic's own
    API, so a compatible endpoint (this fake, as DeepSeek's or Kimi's) is sent none, and the
    answer says so."""
    raw = client.messages.with_raw_response.create(
        **native(BODY_2_1_332),
        extra_headers={"anthropic-beta": BETAS_2_1_332, "X-Agent-Reach-Fallback-Order": "claude"},
    )
    assert raw.headers["X-Agent-Reach-Provider"] == "claude"
    # A compatible endpoint refuses Claude Code's `metadata.user_id` (a JSON string) too.
    assert raw.headers["X-Agent-Reach-Dropped"] == "metadata.user_id,fallbacks"
    got = [r for r in up.received if r.scenario == "claude"][-1]
    assert got.body["thinking"] == BODY_2_1_332["thinking"]
    assert got.body["context_management"] == BODY_2_1_332["context_management"]
    assert "fallbacks" not in got.body
    assert got.headers["anthropic-beta"] == BETAS_2_1_332


def test_claude_code_2_1_332s_body_to_a_chat_provider_is_named_dropped(
    client: anthropic.Anthropic, up: Upstream
) -> None:
    raw = client.messages.with_raw_response.create(
        **native(BODY_2_1_332),
        extra_headers={"anthropic-beta": BETAS_2_1_332, "X-Agent-Reach-Fallback-Order": "ok"},
    )
    assert raw.parse().content[0].text == "hello from ok"  # type: ignore[union-attr]
    dropped = set(raw.headers["X-Agent-Reach-Dropped"].split(","))
    assert {"thinking", "context_management", "fallbacks"} <= dropped
    sent = up.bodies("ok")[-1]
    assert not {"thinking", "context_management", "fallbacks", "reasoning_effort"} & set(sent)
    headers = {k.lower() for k in [r for r in up.received if r.scenario == "ok"][-1].headers}
    assert "anthropic-beta" not in headers


def test_native_stream_is_forwarded_as_sent(client: anthropic.Anthropic, proxy: Proxy) -> None:
    with client.messages.stream(
        **native(),
        extra_headers={"X-Agent-Reach-Fallback-Order": "dead,auth,claude"},
    ) as stream:
        final = stream.get_final_message()
    blocks = [b.model_dump(exclude_none=True) for b in final.content]
    assert own_bytes(blocks[0].pop("signature")) == CLAUDE_THINKING["signature"]
    assert blocks == [
        {"type": "thinking", "thinking": CLAUDE_THINKING["thinking"]},
        {"type": "text", "text": CLAUDE_TEXT},
    ]
    assert final.usage.cache_read_input_tokens == 5
    _, events = sse(proxy, NATIVE, "claude")
    assert [e for e, _ in events][:3] == ["message_start", "content_block_start", "ping"]
    [signature] = [
        d["delta"]["signature"]
        for _, d in events
        if (d.get("delta") or {}).get("type") == "signature_delta"
    ]
    assert own_bytes(signature) == CLAUDE_THINKING["signature"]
    assert events[-1] == ("message_stop", {"type": "message_stop"})


def test_native_falls_back_to_chat_translated(client: anthropic.Anthropic, up: Upstream) -> None:
    raw = client.messages.with_raw_response.create(
        **native(),
        extra_headers={"X-Agent-Reach-Fallback-Order": "auth,ok"},
    )
    assert message(raw)["content"] == [{"type": "text", "text": "hello from ok"}]
    assert set(raw.headers["X-Agent-Reach-Dropped"].split(",")) == {
        "context_management",
        "cache_control",
        "thinking",
        "tool.strict",
    }


def test_native_stream_falls_back_to_chat_translated(proxy: Proxy) -> None:
    resp, events = sse(proxy, NATIVE, "claudeauth", "ok")
    assert resp.headers["X-Agent-Reach-Provider"] == "ok"
    assert resp.headers["X-Agent-Reach-Trace"].startswith("claudeauth:auth_failed:")
    assert "thinking" in resp.headers["X-Agent-Reach-Dropped"]
    text = "".join(d["delta"]["text"] for e, d in events if e == "content_block_delta")
    assert text == "hello from ok"
    assert events[-1][0] == "message_stop"


def test_unsigned_thinking_is_not_sent_to_anthropic(
    client: anthropic.Anthropic, up: Upstream
) -> None:
    minted = {"type": "thinking", "thinking": "a chat provider's reasoning", "signature": ""}
    request = {
        **NATIVE,
        "messages": [
            HI[0],
            {"role": "assistant", "content": [minted, {"type": "text", "text": "a"}]},
            HI[0],
        ],
    }
    client.messages.create(**native(request), **chain("claude"))
    got = up.bodies("claude")[-1]
    assert got["messages"][1] == {"role": "assistant", "content": [{"type": "text", "text": "a"}]}


# -- cuts and errors -------------------------------------------------------------------------


@pytest.mark.parametrize("cut", ["streamcut", "claudecut"])
def test_cut_after_the_first_event_ends_with_an_error_event(
    client: anthropic.Anthropic, proxy: Proxy, cut: str
) -> None:
    _, events = sse(proxy, {"model": MODEL, "max_tokens": 100, "messages": HI}, cut, "ok")
    names = [e for e, _ in events]
    assert names[0] == "message_start"
    assert "content_block_delta" in names
    assert names[-1] == "error"
    assert "message_stop" not in names
    error = events[-1][1]["error"]
    assert error["type"] == "api_error"
    assert f"{cut} failed mid-stream" in error["message"]
    assert [a["provider"] for a in error["attempts"]] == [cut, cut]

    with (
        pytest.raises(anthropic.APIStatusError, match="mid-stream"),
        client.messages.stream(
            model=MODEL, max_tokens=100, messages=HI, **chain(cut, "ok")
        ) as stream,
    ):
        stream.get_final_message()


def error_of(exc: anthropic.APIStatusError) -> dict[str, Any]:
    body: dict[str, Any] = exc.response.json()
    ErrorResponse.model_validate(body, strict=True)
    return body["error"]


@pytest.mark.parametrize(
    ("chain_", "status", "kind"),
    [
        (("dead", "auth"), 502, "api_error"),
        (("ratelimit",), 429, "rate_limit_error"),
        (("badreq",), 400, "invalid_request_error"),
        (("badreq", "context"), 400, "invalid_request_error"),
    ],
)
def test_all_failed_is_an_anthropic_error_with_attempts(
    client: anthropic.Anthropic, chain_: tuple[str, ...], status: int, kind: str
) -> None:
    with pytest.raises(anthropic.APIStatusError) as caught:
        client.messages.create(model=MODEL, max_tokens=10, messages=HI, **chain(*chain_))
    assert caught.value.status_code == status
    error = error_of(caught.value)
    assert error["type"] == kind
    assert [a["provider"] for a in error["attempts"]] == list(chain_)
    assert PROVIDER_KEY not in caught.value.response.text
    # Claude Code compacts its conversation on these words
    assert error["message"].startswith("prompt is too long") == ("context" in chain_)


def test_request_errors_are_anthropic_shaped(client: anthropic.Anthropic, proxy: Proxy) -> None:
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(model=MODEL, messages=HI, max_tokens=0)
    assert "max_tokens" in error_of(caught.value)["message"]
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(model=MODEL, max_tokens=10, messages=[])
    assert error_of(caught.value)["type"] == "invalid_request_error"
    with pytest.raises(anthropic.BadRequestError):
        client.messages.create(
            model=MODEL,
            max_tokens=10,
            messages=[{"role": "tool", "content": "x"}],  # type: ignore[list-item]
        )
    status, body = proxy.post("/v1/messages", b"{not json", {"x-api-key": CLIENT_KEY})
    assert status == 400
    ErrorResponse.model_validate(body, strict=True)
    status, body = proxy.get("/v1/messages", {"x-api-key": CLIENT_KEY})
    assert status == 405
    ErrorResponse.model_validate(body, strict=True)
    status, body = proxy.post("/v1/messages/nope", {}, {"x-api-key": CLIENT_KEY})
    assert (status, body["error"]["type"]) == (404, "not_found_error")


def test_proxy_keys_as_x_api_key_or_bearer(proxy: Proxy) -> None:
    with anthropic.Anthropic(base_url=proxy.base, api_key="wrong", max_retries=0) as c:
        with pytest.raises(anthropic.AuthenticationError) as caught:
            c.messages.create(model=MODEL, max_tokens=10, messages=HI)
        assert error_of(caught.value)["type"] == "authentication_error"
    with anthropic.Anthropic(base_url=proxy.base, auth_token=CLIENT_KEY, max_retries=0) as c:
        answer = c.messages.create(model=MODEL, max_tokens=10, messages=HI, **chain("ok"))
    assert answer.content[0].type == "text"


def test_head_and_get_root_answer_without_a_key(proxy: Proxy) -> None:
    for method in ("HEAD", "GET"):
        req = urllib.request.Request(proxy.base + "/", method=method)
        with urllib.request.urlopen(req, timeout=5) as resp:
            assert resp.status == 200


def test_count_tokens_is_a_local_estimate(client: anthropic.Anthropic, up: Upstream) -> None:
    raw = client.messages.with_raw_response.count_tokens(
        model=MODEL,
        system="You are terse.",
        messages=[{"role": "user", "content": "What is the weather in Paris today?"}],
        tools=[WEATHER_TOOL],
    )
    body = json.loads(raw.http_response.text)
    MessageTokensCount.model_validate(body, strict=True)
    assert 20 < body["input_tokens"] < 80
    assert up.received == []  # no provider was asked
    with pytest.raises(anthropic.BadRequestError):
        client.messages.count_tokens(model=MODEL, messages=[])


def test_metrics_count_messages_requests(proxy: Proxy, client: anthropic.Anthropic) -> None:
    client.messages.create(model=MODEL, max_tokens=10, messages=HI, **chain("ok"))
    status, text = proxy.get("/metrics", {"x-api-key": CLIENT_KEY})
    assert status == 200
    assert 'api="messages"' in text


def test_an_answer_the_translation_cannot_carry_fails_over_or_ends_in_an_error(
    up: Upstream, tmp_path: Path
) -> None:
    cfg = config(up)
    cfg["providers"] += [up.provider("badshape"), up.provider("ok", name="fine")]
    p = start(cfg, tmp_path, up, env={"PROXY_KEYS": CLIENT_KEY})
    try:
        client = anthropic.Anthropic(base_url=p.base, api_key=CLIENT_KEY, max_retries=0)
        order = {"X-Agent-Reach-Fallback-Order": "badshape,fine"}
        raw = client.messages.with_raw_response.create(
            model="m",
            max_tokens=50,
            messages=[{"role": "user", "content": "hi"}],
            extra_headers=order,
        )
        assert raw.headers["X-Agent-Reach-Trace"].startswith("badshape:schema_mismatch:")
        assert message(raw)["content"][0]["text"] == "hello from ok"
        only = {"X-Agent-Reach-Fallback-Order": "badshape"}
        with (
            pytest.raises(anthropic.APIStatusError) as failed,
            client.messages.stream(
                model="m",
                max_tokens=50,
                messages=[{"role": "user", "content": "hi"}],
                extra_headers=only,
            ) as stream,
        ):
            for _ in stream:
                pass
        assert "schema_mismatch" in str(failed.value)
    finally:
        stop(p)
    assert "Traceback" not in (tmp_path / "proxy.log").read_text()
