"""Invalid requests are refused before any provider is called (protocol §5.1, issue 10 item 3).

Through the proxy with the official SDKs at their default retry settings: a malformed request
is a 400 that the SDK raises once (one HTTP request, no retry, no backoff), naming the field in
the client API's own words, and the loopback upstream never sees it. The same through the
library (`RequestError.param`) and the CLI (exit 2). The loopback upstream is the one every
provider of the config points at, so "no provider saw it" is "it received nothing".
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from agent_reach import RequestError, Router

from ..conftest import ERROR, assert_valid
from ..fakes.upstream import Upstream, proxy_config
from .test_cli import config_file, run
from .test_proxy import Proxy, start, stop

MSG = [{"role": "user", "content": "hi"}]
TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}


def config(upstream: Upstream) -> dict[str, Any]:
    providers = [
        upstream.provider("ok"),
        upstream.provider("backup"),
        upstream.provider("claude", "anthropic", name="claude"),
        upstream.provider("responses", "responses", name="native"),
    ]
    return proxy_config(providers, fallback_order=["ok", "backup"])


@pytest.fixture(scope="module")
def proxy(upstream: Upstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    p = start(config(upstream), tmp_path_factory.mktemp("validation"), upstream)
    yield p
    stop(p)


class Counted:
    """The SDK's own HTTP client, counting the HTTP requests the SDK sends through it."""

    def __init__(self, sdk: Any = openai) -> None:
        self.sent = 0
        self.http = sdk.DefaultHttpxClient(event_hooks={"request": [self._count]})

    def _count(self, _request: Any) -> None:
        self.sent += 1


def refused_once(call: Any, error: type[Exception], counted: Counted, up: Upstream) -> Any:
    """Run `call`: it raises `error` after exactly one HTTP request (an SDK that retried would
    have sent a second: how long it took says nothing more, and depends on the machine's
    load), and no provider received anything. Returns the error."""
    up.clear()
    with pytest.raises(error) as info:
        call()
    assert counted.sent == 1, f"the SDK sent {counted.sent} requests"
    assert up.received == []
    return info.value


# -- Chat Completions, through the official `openai` SDK ------------------------------------


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "bot", "content": "hi"}]}, "messages[0].role"),
        ({"messages": [*MSG, *MSG, {"role": "user", "content": 5}]}, "messages[2].content"),
        ({"messages": [{"role": "tool", "content": "42"}]}, "messages[0].tool_call_id"),
        (
            {"messages": [{"role": "user", "content": [{"type": "text", "text": None}]}]},
            "messages[0].content[0].text",
        ),
        (
            {
                "messages": [
                    {"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f"}}]}
                ]
            },
            "messages[0].tool_calls[0].function.arguments",
        ),
        ({"temperature": "hot"}, "temperature"),
        ({"temperature": 2.5}, "temperature"),
        ({"top_p": 1.5}, "top_p"),
        ({"max_tokens": "5"}, "max_tokens"),  # any integer is the schema's (0 included)
        ({"max_tokens": 1.5}, "max_tokens"),
        ({"max_completion_tokens": True}, "max_completion_tokens"),
        ({"n": 0}, "n"),
        ({"presence_penalty": 3}, "presence_penalty"),
        ({"frequency_penalty": -3}, "frequency_penalty"),
        ({"seed": "42"}, "seed"),
        ({"stop": [1]}, "stop[0]"),
        ({"logit_bias": {"50256": 0.5}}, "logit_bias"),
        ({"tools": [{"type": "function", "function": {"name": ""}}]}, "tools[0].function.name"),
        ({"tools": [TOOL], "tool_choice": "always"}, "tool_choice"),
        ({"response_format": {"type": "json_schema"}}, "response_format.json_schema"),
        ({"user": 7}, "user"),
    ],
)
def test_openai_sdk_gets_a_400_naming_the_field(
    proxy: Proxy, up: Upstream, fields: dict[str, Any], param: str
) -> None:
    counted = Counted()
    client = openai.OpenAI(base_url=proxy.base + "/v1", api_key="k", http_client=counted.http)
    body = {"model": "gpt-test", "messages": MSG, **fields}
    error = refused_once(
        lambda: client.chat.completions.create(**body),
        openai.BadRequestError,
        counted,
        up,
    )
    assert error.param == param
    assert error.code is None or isinstance(error.code, str)
    assert_valid(ERROR, error.response.json())
    assert param in error.message
    client.close()


def test_a_stream_request_is_refused_before_it_streams(proxy: Proxy, up: Upstream) -> None:
    counted = Counted()
    client = openai.OpenAI(base_url=proxy.base + "/v1", api_key="k", http_client=counted.http)
    error = refused_once(
        lambda: client.chat.completions.create(
            model="gpt-test", messages=MSG, stream=True, temperature=5
        ),
        openai.BadRequestError,
        counted,
        up,
    )
    assert error.param == "temperature"
    client.close()


def test_valid_requests_still_reach_the_provider(proxy: Proxy, up: Upstream) -> None:
    up.clear()
    with openai.OpenAI(base_url=proxy.base + "/v1", api_key="k") as client:
        answer = client.chat.completions.create(
            model="gpt-test",
            messages=[{"role": "developer", "content": "Be brief."}, *MSG],
            temperature=2,
            top_p=0,
            max_tokens=2**31 - 1,
            presence_penalty=-2,
            stop="END",
            tools=[TOOL],
            tool_choice="auto",
            logit_bias={"50256": -100},
            extra_body={"enable_thinking": False, "top_k": 20},  # providers' own fields
        )
    assert answer.choices[0].message.content == "hello from ok"
    sent = up.bodies("ok")[-1]
    assert (sent["enable_thinking"], sent["top_k"]) == (False, 20)


# -- Responses, through the official `openai` SDK -------------------------------------------


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"max_output_tokens": 0}, "max_output_tokens"),
        ({"max_output_tokens": "100"}, "max_output_tokens"),
        ({"temperature": 3}, "temperature"),
        ({"top_p": "1"}, "top_p"),
        (
            {"input": [{"role": "user", "content": "a"}, {"role": "user", "content": {}}]},
            "input[1].content",
        ),
        (
            {"input": [{"role": "user", "content": [{"type": "input_text", "text": 1}]}]},
            "input[0].content[0].text",
        ),
        ({"input": [{"type": "function_call", "call_id": "c", "name": ""}]}, "input[0].name"),
        ({"tools": [{"type": "function"}]}, "tools[0].name"),
        ({"tool_choice": "sometimes"}, "tool_choice"),
        ({"include": "reasoning.encrypted_content"}, "include"),
        ({"reasoning": {"effort": 1}}, "reasoning.effort"),
    ],
)
def test_responses_refusals_name_the_responses_field(
    proxy: Proxy, up: Upstream, fields: dict[str, Any], param: str
) -> None:
    counted = Counted()
    client = openai.OpenAI(base_url=proxy.base + "/v1", api_key="k", http_client=counted.http)
    body = {"model": "gpt-test", "input": "hi", **fields}
    error = refused_once(
        lambda: client.responses.create(**body, extra_headers={"X-Agent-Reach-Route": "native"}),
        openai.BadRequestError,
        counted,
        up,
    )
    assert error.param == param
    client.close()


# -- Messages, through the official `anthropic` SDK -----------------------------------------


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_tokens": 1.5}, "max_tokens"),
        ({"temperature": 1.5}, "temperature"),
        ({"top_p": "0.9"}, "top_p"),
        ({"top_k": -1}, "top_k"),
        ({"stop_sequences": "END"}, "stop_sequences"),
        ({"system": 5}, "system"),
        ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].role"),
        (
            {"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"x": 1}]}]},
            "messages[0].content[1].type",
        ),
        ({"tools": [{"name": "Bash"}]}, "tools[0].input_schema"),
        ({"tool_choice": {"type": "tool"}}, "tool_choice.name"),
    ],
)
def test_anthropic_sdk_gets_a_400_naming_the_field(
    proxy: Proxy, up: Upstream, fields: dict[str, Any], param: str
) -> None:
    counted = Counted(anthropic)
    client = anthropic.Anthropic(base_url=proxy.base, api_key="k", http_client=counted.http)
    error = refused_once(
        lambda: client.messages.create(
            model="claude-test",
            max_tokens=10,
            messages=MSG,
            extra_body=fields,  # this SDK no longer takes some of them as arguments
            extra_headers={"X-Agent-Reach-Route": "claude"},
        ),
        anthropic.BadRequestError,
        counted,
        up,
    )
    detail = error.body["error"] if isinstance(error.body, dict) else {}
    assert detail["type"] == "invalid_request_error"
    assert f"'{param}'" in detail["message"]
    client.close()


# -- the library and the CLI ----------------------------------------------------------------


async def test_the_library_raises_request_error_with_param(up: Upstream) -> None:
    async with Router(config(up), environ={"PROVIDER_KEY": "k"}) as router:
        for request, param in [
            ({"messages": MSG, "temperature": float("nan")}, "temperature"),
            ({"messages": MSG, "max_tokens": 1.5}, "max_tokens"),
            ({"messages": [*MSG, {"role": "robot", "content": "x"}]}, "messages[1].role"),
            ({"messages": MSG, "tools": [{"type": "function"}]}, "tools[0].function"),
        ]:
            up.clear()
            with pytest.raises(RequestError) as info:
                await router.achat(request)
            assert (info.value.param, info.value.status) == (param, 400)
            with pytest.raises(RequestError):
                await router.open_stream({**request, "stream": True})
            assert up.received == []


def test_the_blocking_library_call_refuses_too(up: Upstream) -> None:
    async def main() -> None:
        async with Router(config(up), environ={"PROVIDER_KEY": "k"}) as router:
            with pytest.raises(RequestError) as info:
                await router.achat({"messages": MSG, "top_p": 2})
            assert info.value.param == "top_p"

    up.clear()
    asyncio.run(main())
    assert up.received == []


@pytest.mark.parametrize(
    ("args", "param"),
    [
        (("--temperature", "nan"), "temperature"),
    ],
)
def test_the_cli_refuses_with_exit_2(
    up: Upstream, tmp_path: Path, args: tuple[str, ...], param: str
) -> None:
    path = config_file(tmp_path, up.provider("ok"))
    up.clear()
    result = run("chat", "-p", "hi", *args, config=path, env={"PROVIDER_KEY": "k"})
    assert result.returncode == 2, result.stderr
    assert f"'{param}'" in result.stderr
    assert "Traceback" not in result.stderr
    assert up.received == []
