"""What a config of providers and routes only does (issue 51): the defaults a demanding user
would choose, each through the proxy with the official clients."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest

from ..fakes.upstream import TOOL_WORD, Upstream
from .test_proxy import MSG, Proxy, start, stop


def plain_config(upstream: Upstream) -> dict[str, Any]:
    """Providers and a route, nothing else: every default in force."""
    return {
        "state": "memory://",
        "health": {"mode": "off"},  # no health checks: a test's fake answers only requests
        "providers": [
            {"name": "flaky", "endpoint": upstream.url("flaky")},
            {"name": "broken", "endpoint": upstream.url("server")},
            {
                "name": "backup",
                "endpoint": upstream.url("backup"),
                "model_map": {"*": "backup-model"},
            },
            {"name": "cut", "endpoint": upstream.url("streamcut")},
            {"name": "half", "endpoint": upstream.url("toolhalf")},
            {"name": "strict", "endpoint": upstream.url("noprefill"), "assistant_prefill": True},
            {"name": "agent", "endpoint": upstream.url("toolcall")},
        ],
        "routes": {
            "pair": ["flaky", "backup"],
            "worn": ["broken", "backup"],
            "cutting": ["cut", "backup"],
            "halfcall": ["half", "agent"],
            "strictly": ["cut", "strict"],
        },
    }


@pytest.fixture(scope="module")
def proxy(upstream: Upstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    p = start(plain_config(upstream), tmp_path_factory.mktemp("defaults"), upstream)
    yield p
    stop(p)


def test_a_lone_500_is_tried_once_more_on_the_same_provider(
    proxy: Proxy, upstream: Upstream
) -> None:
    """The fallback has a cold prompt cache and another model's habits: a 500 the provider's
    next answer hides is not worth it."""
    upstream.clear()
    client = proxy.client()
    assert client.chat.completions.create(model="pair", messages=MSG).choices[0].message.content
    raw = client.chat.completions.with_raw_response.create(model="pair", messages=MSG)
    assert raw.parse().choices[0].message.content == "hello from flaky"
    tries = [t.split(":")[:2] for t in raw.headers["X-Agent-Reach-Trace"].split(",")]
    assert tries == [["flaky", "server_error"], ["flaky", "ok"]]
    assert not upstream.bodies("backup")


def test_a_provider_that_keeps_failing_is_left_after_one_more_try(proxy: Proxy) -> None:
    raw = proxy.client().chat.completions.with_raw_response.create(model="worn", messages=MSG)
    assert raw.parse().choices[0].message.content == "hello from backup"
    tries = [t.split(":")[:2] for t in raw.headers["X-Agent-Reach-Trace"].split(",")]
    assert tries == [["broken", "server_error"], ["broken", "server_error"], ["backup", "ok"]]


def test_a_stream_cut_after_its_first_words_is_finished_by_the_next_provider(
    proxy: Proxy, upstream: Upstream
) -> None:
    """`continue_on_cut` is on by default: the client reads one answer, no error, no word
    twice."""
    upstream.clear()
    stream = proxy.client().chat.completions.create(model="cutting", messages=MSG, stream=True)
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text.startswith("partial answer")
    assert text.count("partial answer") == 1  # nothing said twice
    assert len(text) > len("partial answer")  # the backup finished it
    finish = upstream.bodies("backup")[-1]["messages"]
    assert "partial answer" in str(finish)  # asked to go on from what was sent
    # The access line names who finished the answer, and the model it was asked for.
    log = (Path(proxy.proc.args[2]).parent / "proxy.log").read_text()  # type: ignore[index]
    line = [x for x in log.splitlines() if " model=cutting " in x][-1]
    assert " provider=backup provider_model=backup-model " in line
    assert " attempts=cut:ok,cut:server_error,backup:ok " in line


BASH = {"type": "function", "function": {"name": "Bash", "parameters": {"type": "object"}}}


def test_a_cut_inside_a_tool_call_gives_the_openai_client_one_whole_call(
    proxy: Proxy, upstream: Upstream
) -> None:
    """Issue 51, item 2: the first provider's call stopped at `{"comm`; the client gets the
    next provider's call, whole, with one id, and nothing of the broken one."""
    stream = proxy.client().chat.completions.create(
        model="halfcall", messages=MSG, tools=[BASH], stream=True
    )
    pieces = [c.choices[0].delta.tool_calls for c in stream if c.choices]
    calls = [call for piece in pieces if piece for call in piece]
    assert len(calls) == 1
    assert calls[0].id == "call_test1"
    assert json.loads(calls[0].function.arguments or "") == {"command": f"echo {TOOL_WORD}"}


def test_a_cut_inside_a_tool_call_through_the_messages_and_responses_faces(
    proxy: Proxy,
) -> None:
    with anthropic.Anthropic(base_url=proxy.base, api_key="unused", max_retries=0) as client:
        tool = {"name": "Bash", "input_schema": {"type": "object", "properties": {}}}
        with client.messages.stream(
            model="halfcall", max_tokens=100, messages=MSG, tools=[tool]
        ) as stream:
            final = stream.get_final_message()
    uses = [b for b in final.content if b.type == "tool_use"]
    assert [(u.id, u.input) for u in uses] == [
        ("toolu_call_test1", {"command": f"echo {TOOL_WORD}"})
    ]
    events = proxy.client().responses.create(
        model="halfcall",
        input="hi",
        tools=[{"type": "function", "name": "Bash", "parameters": {"type": "object"}}],
        stream=True,
    )
    done = [e.item for e in events if e.type == "response.output_item.done"]
    assert [(i.type, i.call_id) for i in done] == [("function_call", "call_test1")]  # type: ignore[union-attr]


def test_a_fallback_that_refuses_the_prefill_begins_the_answer_again(
    proxy: Proxy, upstream: Upstream
) -> None:
    """Issue 51, item 1: the next provider refuses the cut answer as a prefill (a 400); it is
    asked the request as it came, and what the client already has of its answer is dropped."""
    upstream.clear()
    stream = proxy.client().chat.completions.create(model="strictly", messages=MSG, stream=True)
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == "partial answer, then the rest."
    asked = upstream.bodies("noprefill")
    assert asked[0]["messages"][-1]["role"] == "assistant"  # the prefill, refused
    assert asked[1]["messages"] == MSG  # then the request as it came
