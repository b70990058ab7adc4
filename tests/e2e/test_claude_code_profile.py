"""What Claude Code sends, as providers need it (issue 19, item 7), through the proxy with the
official SDKs: model patterns in routes (the background model on its own route), a
`tool_choice` left out for models that refuse it, `system` turns folded and a refused
`metadata.user_id` left out for native Anthropic providers, `cache_control` kept for providers
that take it, each named in `X-Agent-Reach-Dropped`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from ..fakes.upstream import Upstream, proxy_config
from .test_proxy import Proxy, start, stop

HAIKU = "claude-haiku-4-5-20251001"
OPUS = "claude-opus-4-8"
TOOL = {"name": "Bash", "description": "Run a command", "input_schema": {"type": "object"}}
USER_ID = '{"device_id":"8c08","session_id":"a1dc"}'  # Claude Code's


@pytest.fixture(scope="module")
def proxy(upstream: Upstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    providers = [
        upstream.provider("ok", name="main"),
        upstream.provider("backup", name="fast"),
        upstream.provider("ok", name="reasoner", drop_tool_choice=["deepseek-reasoner*"]),
        upstream.provider("claude", "anthropic"),
        upstream.provider("ok", name="qwen", cache_control=True),
    ]
    routes = {
        "claude-*": ["main"],  # the more literal pattern wins, wherever it stands
        "claude-*haiku*": ["fast"],
        "deepseek-*": ["reasoner"],
        "native-*": ["claude"],
        "qwen*": ["qwen"],
    }
    config = proxy_config(providers, routes=routes)
    p = start(config, tmp_path_factory.mktemp("profile"), upstream)
    yield p
    stop(p)


def messages(proxy: Proxy, **fields: Any) -> Any:
    client = anthropic.Anthropic(base_url=proxy.base, api_key="unused", max_retries=0)
    try:
        request: Any = {"max_tokens": 8000, "messages": [{"role": "user", "content": "hi"}]}
        return client.messages.with_raw_response.create(**{**request, **fields})
    finally:
        client.close()


def test_the_background_model_takes_its_own_route(proxy: Proxy, up: Upstream) -> None:
    assert messages(proxy, model=HAIKU).headers["X-Agent-Reach-Provider"] == "fast"
    assert messages(proxy, model=OPUS).headers["X-Agent-Reach-Provider"] == "main"
    status, models = proxy.get("/v1/models")
    assert status == 200
    assert not [m["id"] for m in models["data"] if "*" in m["id"]]  # patterns are no models


def test_tool_choice_is_left_out_for_a_model_that_refuses_it(proxy: Proxy, up: Upstream) -> None:
    forced = {"tools": [TOOL], "tool_choice": {"type": "any"}}
    answer = messages(proxy, model="deepseek-reasoner", **forced)
    assert answer.headers["X-Agent-Reach-Provider"] == "reasoner"
    assert "tool_choice" in answer.headers["X-Agent-Reach-Dropped"].split(",")
    (sent,) = up.bodies("ok")
    assert sent["tools"]
    assert "tool_choice" not in sent
    up.clear()
    chat = proxy.client().chat.completions.with_raw_response.create(
        model="deepseek-reasoner-2",
        messages=[{"role": "user", "content": "hi"}],
        tools=[{"type": "function", "function": {"name": "Bash", "parameters": {}}}],
        tool_choice="required",
    )
    assert chat.headers["X-Agent-Reach-Dropped"] == "tool_choice"
    assert "tool_choice" not in up.bodies("ok")[0]
    up.clear()
    kept = messages(proxy, model=OPUS, **forced)  # another provider takes it
    assert "X-Agent-Reach-Dropped" not in kept.headers
    assert up.bodies("ok")[0]["tool_choice"] == "required"


def test_a_native_provider_gets_system_turns_folded_and_no_refused_user_id(
    proxy: Proxy, up: Upstream
) -> None:
    turns = [
        {"role": "user", "content": "hi"},
        {"role": "system", "content": "Available agent types: …"},  # as Claude Code sends
        {"role": "user", "content": "go on"},
    ]
    answer = messages(
        proxy,
        model="native-claude",
        system="You are Claude Code.",
        messages=turns,
        metadata={"user_id": USER_ID},
        extra_headers={"anthropic-beta": "claude-code-20250219"},
    )
    assert answer.headers["X-Agent-Reach-Provider"] == "claude"
    assert answer.headers["X-Agent-Reach-Dropped"] == "metadata.user_id"
    (sent,) = up.bodies("claude")
    assert [m["role"] for m in sent["messages"]] == ["user", "user"]
    assert sent["system"] == [
        {"type": "text", "text": "You are Claude Code."},
        {"type": "text", "text": "Available agent types: …"},
    ]
    assert "metadata" not in sent


def test_cache_control_goes_to_a_provider_that_takes_it(proxy: Proxy, up: Upstream) -> None:
    mark = {"type": "ephemeral"}
    system: Any = [{"type": "text", "text": "You are Claude Code.", "cache_control": mark}]
    turn: Any = [
        {"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": mark}]}
    ]
    taken = messages(proxy, model="qwen3-coder-plus", system=system, messages=turn)
    assert "X-Agent-Reach-Dropped" not in taken.headers
    left = messages(proxy, model=OPUS, system=system, messages=turn)
    assert left.headers["X-Agent-Reach-Dropped"] == "cache_control"
    marked, plain = up.bodies("ok")
    assert marked["messages"] == [
        {
            "role": "system",
            "content": [{"type": "text", "text": "You are Claude Code.", "cache_control": mark}],
        },
        {"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": mark}]},
    ]
    assert plain["messages"] == [
        {"role": "system", "content": "You are Claude Code."},
        {"role": "user", "content": "hi"},
    ]
