"""Reasoning artifacts travel only home (protocol §10.1): an Anthropic thinking `signature` or a
Responses `encrypted_content` that provider A minted reaches the client tagged with A's
origin; sent on to B while A is down, it is left out (B never sees it); sent back to A once A
is healthy, A gets its own bytes unchanged. A provider that still refuses an artifact
(`artifact_rejected`) is asked once more without any. Driven by the official SDKs; A and B are
loopback upstreams that, like the real ones, refuse artifacts they did not mint."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from agent_reach.dialects import artifacts

from ..fakes.upstream import (
    CLAUDE_TEXT,
    CLAUDE_THINKING,
    MINTER_THINKING,
    REASONING_PIECES,
    VERIFIER_BLOB,
    Upstream,
    own_bytes,
    proxy_config,
)
from .test_proxy import Proxy, start, stop


@pytest.fixture(scope="module")
def proxy(upstream: Upstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    providers = [
        upstream.provider("switch", "anthropic", name="a"),  # `switch`: up or down at will
        upstream.provider("minter", "anthropic", name="b"),
        upstream.provider("switch", "responses", name="ra"),
        upstream.provider("verifier", "responses", name="rb"),
    ]
    p = start(proxy_config(providers), tmp_path_factory.mktemp("artifacts"), upstream)
    yield p
    stop(p)


@pytest.fixture
def claude(proxy: Proxy, up: Upstream) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=proxy.base, api_key="unused", max_retries=0) as client:
        yield client


def order(*names: str) -> dict[str, Any]:
    return {"extra_headers": {"X-Agent-Reach-Fallback-Order": ",".join(names)}}


def turn(client: anthropic.Anthropic, messages: list[dict[str, Any]]) -> tuple[Any, str]:
    """One Messages turn through `a` then `b`: the answer's content and the trace."""
    raw = client.messages.with_raw_response.create(
        model="claude-test",
        max_tokens=100,
        messages=messages,  # type: ignore[arg-type]
        **order("a", "b"),
    )
    body = json.loads(raw.http_response.text)
    return body["content"], raw.headers["X-Agent-Reach-Trace"]


def thinking_of(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        b
        for m in body["messages"]
        for b in m["content"]
        if isinstance(b, dict) and b.get("type") == "thinking"
    ]


def test_a_thinking_signature_goes_only_home(claude: anthropic.Anthropic, up: Upstream) -> None:
    up.switch = "claude"  # A is up and signs its thinking
    with claude.messages.stream(
        model="claude-test",
        max_tokens=100,
        messages=[{"role": "user", "content": "hi"}],
        **order("a", "b"),
    ) as stream:
        first = [b.model_dump(exclude_none=True) for b in stream.get_final_message().content]
    signed_by_a = first[0]
    assert own_bytes(signed_by_a["signature"]) == CLAUDE_THINKING["signature"]

    up.switch = "server"  # A is down: B answers, and never sees A's signature
    history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": first}]
    second, trace = turn(claude, [*history, {"role": "user", "content": "and now?"}])
    assert trace.startswith("a:server_error:"), trace
    assert trace.split(",")[1].startswith("b:ok:"), trace  # no artifact_rejected first
    [to_b] = up.bodies("minter")
    assert thinking_of(to_b) == []
    assert to_b["messages"][1]["content"] == [{"type": "text", "text": CLAUDE_TEXT}]
    assert own_bytes(second[0]["signature"]) == MINTER_THINKING["signature"]

    up.switch = "claude"  # A is back: it gets its own signature, byte for byte, and not B's
    history += [{"role": "user", "content": "and now?"}, {"role": "assistant", "content": second}]
    _, trace = turn(claude, [*history, {"role": "user", "content": "and then?"}])
    assert trace.startswith("a:ok:"), trace
    to_a = [r.body for r in up.received if r.scenario == "switch"][-1]
    assert thinking_of(to_a) == [CLAUDE_THINKING]


def test_an_untagged_signature_refused_is_dropped_and_retried_once(
    claude: anthropic.Anthropic, up: Upstream
) -> None:
    up.switch = "server"
    foreign = {"type": "thinking", "thinking": "someone's", "signature": "EpYBnot-through-us"}
    history = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [foreign, {"type": "text", "text": "hello"}]},
        {"role": "user", "content": "and now?"},
    ]
    content, trace = turn(claude, history)
    assert content[-1]["text"] == CLAUDE_TEXT
    assert ",b:artifact_rejected:" in trace
    assert trace.split(",")[-1].startswith("b:ok:")
    refused, accepted = up.bodies("minter")
    assert thinking_of(refused) == [foreign]  # not minted through agent-reach: sent as it came
    assert thinking_of(accepted) == []


def responses_turn(proxy: Proxy, items: list[dict[str, Any]]) -> tuple[list[Any], str]:
    raw = proxy.client().responses.with_raw_response.create(
        model="gpt-test",
        input=items,  # type: ignore[arg-type]
        **order("ra", "rb"),
    )
    body = json.loads(raw.http_response.text)
    return body["output"], raw.headers["X-Agent-Reach-Trace"]


def reasoning_of(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [i for i in body["input"] if isinstance(i, dict) and i.get("type") == "reasoning"]


def as_input(output: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """An answer's output items as the next request's input: reasoning as it came, the text
    as an assistant message."""
    return [
        item if item["type"] == "reasoning" else {"role": "assistant", "content": "hello"}
        for item in output
    ]


def test_encrypted_reasoning_goes_only_home(proxy: Proxy, up: Upstream) -> None:
    up.switch = "ok"
    first, _ = responses_turn(proxy, [{"role": "user", "content": "hi"}])
    assert own_bytes(first[0]["encrypted_content"]) == "opaque-blob"

    up.switch = "server"
    history = [{"role": "user", "content": "hi"}, *as_input(first)]
    second, trace = responses_turn(proxy, [*history, {"role": "user", "content": "and now?"}])
    assert trace.startswith("ra:server_error:"), trace
    assert trace.split(",")[1].startswith("rb:ok:"), trace
    [to_b] = up.bodies("verifier")
    assert reasoning_of(to_b) == []
    assert own_bytes(second[0]["encrypted_content"]) == VERIFIER_BLOB

    up.switch = "ok"
    history += [{"role": "user", "content": "and now?"}, *as_input(second)]
    _, trace = responses_turn(proxy, [*history, {"role": "user", "content": "and then?"}])
    assert trace.startswith("ra:ok:"), trace
    to_a = [r.body for r in up.received if r.scenario == "switch"][-1]
    [own] = reasoning_of(to_a)
    assert own == {**first[0], "encrypted_content": "opaque-blob"}


def test_untagged_encrypted_reasoning_refused_is_dropped_once(proxy: Proxy, up: Upstream) -> None:
    up.switch = "server"
    items = [
        {"role": "user", "content": "hi"},
        {"type": "reasoning", "id": "rs_x", "summary": [], "encrypted_content": "not-through-us"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "and now?"},
    ]
    _, trace = responses_turn(proxy, items)
    assert ",rb:artifact_rejected:" in trace
    refused, accepted = up.bodies("verifier")
    assert reasoning_of(refused)[0]["encrypted_content"] == "not-through-us"
    assert reasoning_of(accepted) == []


def test_tags_are_recoverable() -> None:
    tagged = artifacts.mint("EqQBCkYIBxgC", "0123456789ab")
    assert artifacts.origin_of(tagged) == ("0123456789ab", "EqQBCkYIBxgC")
    assert artifacts.origin_of("EqQBCkYIBxgC") == (None, "EqQBCkYIBxgC")


@pytest.fixture(scope="module")
def chats(upstream: Upstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    providers = [
        {**upstream.provider("switch"), "name": "a"},
        {**upstream.provider("backup"), "name": "b"},
    ]
    p = start(proxy_config(providers), tmp_path_factory.mktemp("reasoning"), upstream)
    yield p
    stop(p)


def chat_turn(proxy: Proxy, messages: list[dict[str, Any]], stream: bool) -> tuple[str, str]:
    """(the reasoning of the answer, the trace)."""
    client = proxy.client()
    if not stream:
        raw = client.chat.completions.with_raw_response.create(
            model="m",
            messages=messages,  # type: ignore[arg-type]
            **order("a", "b"),
        )
        message = json.loads(raw.http_response.text)["choices"][0]["message"]
        return message.get("reasoning_content") or "", raw.headers["X-Agent-Reach-Trace"]
    with client.chat.completions.with_streaming_response.create(
        model="m",
        messages=messages,  # type: ignore[arg-type]
        stream=True,
        **order("a", "b"),
    ) as resp:
        trace = resp.headers["X-Agent-Reach-Trace"]
        pieces = [
            c.choices[0].delta.model_extra.get("reasoning_content") or ""
            for c in resp.parse()
            if c.choices and c.choices[0].delta.model_extra
        ]
    return "".join(pieces), trace


@pytest.mark.parametrize("stream", [False, True])
def test_chat_reasoning_goes_only_home(chats: Proxy, up: Upstream, stream: bool) -> None:
    up.switch = "reasoner"
    hi = {"role": "user", "content": "hi"}
    reasoning, _ = chat_turn(chats, [hi], stream)
    assert reasoning == "".join(REASONING_PIECES)
    said = {"role": "assistant", "content": "hello", "reasoning_content": reasoning}
    messages = [hi, said, {"role": "user", "content": "and now?"}]

    up.switch = "server"
    _, trace = chat_turn(chats, messages, stream)
    assert trace.startswith("a:server_error:"), trace
    assert up.bodies("backup")[-1]["messages"][1] == {"role": "assistant", "content": "hello"}
    someone_elses = {**said, "reasoning_content": "not handed out here"}
    chat_turn(chats, [hi, someone_elses, messages[-1]], stream)
    assert up.bodies("backup")[-1]["messages"][1] == someone_elses  # unknown: as it came

    up.switch = "reasoner"
    chat_turn(chats, messages, stream)
    to_a = [r.body for r in up.received if r.scenario == "switch"][-1]
    assert to_a["messages"][1] == said
