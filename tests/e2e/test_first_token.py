"""Streams that say nothing, and streams cut mid-answer (protocol §10 "Streaming"): the first token
rule fails over a provider that keeps a stream alive without content; continuation
(`continue_on_cut`) lets the next provider finish an answer cut after text, in the same stream.
Through the proxy, with the official OpenAI and Anthropic SDKs."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

from ..conftest import CHUNK, assert_valid
from ..fakes.upstream import Upstream, proxy_config
from .test_proxy import MSG, Proxy, start, stop
from .test_responses import post_events


@pytest.fixture(scope="module")
def proxy(upstream: Upstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    providers = [
        upstream.provider("keepalive", first_token_ms=500),
        upstream.provider("keepalive", name="keepalive-quiet"),  # no limit of its own
        upstream.provider("streamcut"),
        upstream.provider("toolcut"),
        upstream.provider("backup"),
    ]
    routes = {
        "patient": {"providers": ["keepalive-quiet", "backup"], "first_token_ms": 400},
        "finishing": {"providers": ["streamcut", "backup"], "continue_on_cut": True},
        "tools": {"providers": ["toolcut", "backup"], "continue_on_cut": True},
    }
    p = start(
        proxy_config(providers, routes=routes), tmp_path_factory.mktemp("first-token"), upstream
    )
    yield p
    stop(p)


def chain(**headers: str) -> dict[str, Any]:
    return {
        "extra_headers": {
            f"X-Agent-Reach-{k.replace('_', '-').title()}": v for k, v in headers.items()
        }
    }


def collect(stream: Any) -> tuple[str, list[Any]]:
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    return text, chunks


@pytest.mark.parametrize(
    ("how", "limit_s"),
    [
        (chain(fallback_order="keepalive,backup"), 0.5),  # the provider's first_token_ms
        (chain(route="patient"), 0.4),  # the route's
        (
            {
                **chain(fallback_order="keepalive-quiet,backup"),
                "extra_body": {"agent_reach": {"first_token_ms": 300}},
            },
            0.3,
        ),  # the request's
    ],
)
def test_keep_alives_without_content_fail_over_at_the_first_token_limit(
    proxy: Proxy, how: dict[str, Any], limit_s: float
) -> None:
    start_s = time.perf_counter()
    raw = proxy.client().chat.completions.with_raw_response.create(
        model="m", messages=MSG, stream=True, **how
    )
    text, _ = collect(raw.parse())
    elapsed = time.perf_counter() - start_s
    assert text == "hello from ok"
    assert raw.headers["X-Agent-Reach-Provider"] == "backup"
    first = raw.headers["X-Agent-Reach-Trace"].split(",")[0]
    assert first.split(":")[1] == "timeout"
    assert elapsed < limit_s + 0.2 + 0.3  # the limit, the acceptance's 0.2 s, and the backup


def stream_lines(proxy: Proxy, body: dict[str, Any], route: str) -> list[str]:
    req = urllib.request.Request(
        proxy.base + "/v1/chat/completions",
        data=json.dumps({**body, "stream": True}).encode(),
        headers={"Content-Type": "application/json", "X-Agent-Reach-Route": route},
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        return [line.decode().strip() for line in resp if line.strip()]


def test_a_cut_answer_is_finished_by_the_backup_in_one_clean_stream(proxy: Proxy) -> None:
    proxy.upstream.clear()
    lines = stream_lines(proxy, {"model": "m", "messages": MSG}, "finishing")
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line[6:]) for line in lines[:-1]]
    assert not any("error" in c for c in chunks)  # no error event: one clean stream
    for c in chunks:
        assert_valid(CHUNK, c)
    assert len({c["id"] for c in chunks}) == 1  # one stream to the client
    text = "".join(
        (ch.get("delta") or {}).get("content") or "" for c in chunks for ch in c["choices"]
    )
    assert text.startswith("partial answer")
    assert text.endswith("hello from ok")
    sent = proxy.upstream.bodies("backup")[-1]["messages"]
    assert sent[-2] == {"role": "assistant", "content": "partial answer"}  # it carried the cut
    assert sent[-1]["role"] == "user"
    assert "Continue" in sent[-1]["content"]


def test_a_cut_inside_a_tool_call_begins_again_on_the_next_provider(proxy: Proxy) -> None:
    """Issue 51, item 2: the tool call was held until whole, so the client saw none of it: the
    next provider is asked the request as it came, and its answer is the stream's."""
    proxy.upstream.clear()
    lines = stream_lines(proxy, {"model": "m", "messages": MSG}, "tools")
    chunks = [json.loads(x[6:]) for x in lines if x.startswith("data: {")]
    assert not any("error" in c for c in chunks)
    assert not any(c["choices"] and c["choices"][0]["delta"].get("tool_calls") for c in chunks)
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == "hello from ok"
    assert proxy.upstream.bodies("backup")[-1]["messages"] == MSG  # the request as it came


def test_a_responses_stream_is_continued_too(proxy: Proxy) -> None:
    _, events = post_events(
        proxy, {"model": "m", "input": "hi"}, {"X-Agent-Reach-Route": "finishing"}
    )
    kinds = [e["type"] for e in events]
    assert kinds[-1] == "response.completed"
    assert "response.failed" not in kinds
    text = events[-1]["response"]["output"][0]["content"][0]["text"]
    assert text == "partial answerhello from ok"


def test_a_messages_stream_is_continued_too(proxy: Proxy) -> None:
    proxy.upstream.clear()
    headers = {"X-Agent-Reach-Route": "finishing"}
    with (
        anthropic.Anthropic(base_url=proxy.base, api_key="unused", max_retries=0) as client,
        client.messages.stream(
            model="m", max_tokens=100, messages=MSG, extra_headers=headers
        ) as stream,
    ):
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "partial answerhello from ok"
    assert final.stop_reason == "end_turn"
    assert final.content[0].type == "text"
    assert final.content[0].text == text  # one message, one text block
    sent = proxy.upstream.bodies("backup")[-1]["messages"]
    assert sent[-2] == {"role": "assistant", "content": "partial answer"}


def test_without_the_option_a_cut_is_an_error_event(proxy: Proxy) -> None:
    with pytest.raises(openai.APIError):
        collect(
            proxy.client().chat.completions.create(
                model="m", messages=MSG, stream=True, **chain(fallback_order="streamcut,backup")
            )
        )
