"""Reasoning artifacts minted by one provider (an Anthropic thinking `signature`, a Responses
`reasoning` item's `encrypted_content`) and refused by another: the refusal is
`artifact_rejected`, and that provider is asked once more without them (protocol §5). Sent
to a provider that takes them, they pass as they came. Driven by the official SDKs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest

from ..upstream import CLAUDE_TEXT, CLAUDE_THINKING, Upstream, proxy_config, refused_url
from .test_proxy import Proxy, start, stop

FOREIGN = {"type": "thinking", "thinking": "A's reasoning", "signature": "EpYBprovider-A-minted"}
HOME = dict(CLAUDE_THINKING)


@pytest.fixture(scope="module")
def proxy(upstream: Upstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    providers = [
        {"name": "a", "endpoint": refused_url(), "format": "anthropic"},
        upstream.provider("minter", "anthropic"),
        upstream.provider("verifier", "responses"),
    ]
    p = start(proxy_config(providers), tmp_path_factory.mktemp("artifacts"), upstream)
    yield p
    stop(p)


def conversation(thinking: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [thinking, {"type": "text", "text": "hello"}]},
        {"role": "user", "content": "and now?"},
    ]


def order(*names: str) -> dict[str, Any]:
    return {"extra_headers": {"X-Agent-Reach-Fallback-Order": ",".join(names)}}


def test_a_foreign_signature_is_dropped_when_refused(proxy: Proxy, up: Upstream) -> None:
    with anthropic.Anthropic(base_url=proxy.base, api_key="unused", max_retries=0) as client:
        raw = client.messages.with_raw_response.create(
            model="claude-test",
            max_tokens=100,
            messages=conversation(FOREIGN),  # type: ignore[arg-type]
            **order("a", "minter"),
        )
    answer = raw.parse()
    assert answer.content[-1].type == "text"
    assert answer.content[-1].text == CLAUDE_TEXT
    trace = raw.headers["X-Agent-Reach-Trace"]
    assert trace.startswith("a:connect_failed:"), trace
    assert ",minter:artifact_rejected:" in trace
    assert trace.split(",")[-1].startswith("minter:ok:")
    refused, accepted = up.bodies("minter")
    assert refused["messages"][1]["content"][0] == FOREIGN
    assert accepted["messages"][1]["content"] == [{"type": "text", "text": "hello"}]


def test_its_own_signature_reaches_its_origin_unchanged(proxy: Proxy, up: Upstream) -> None:
    with anthropic.Anthropic(base_url=proxy.base, api_key="unused", max_retries=0) as client:
        client.messages.create(
            model="claude-test",
            max_tokens=100,
            messages=conversation(HOME),  # type: ignore[arg-type]
            **order("minter"),
        )
    [got] = up.bodies("minter")
    assert got["messages"][1]["content"][0] == HOME


def reasoning(blob: str) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "hi"},
        {
            "type": "reasoning",
            "id": "rs_a1",
            "summary": [{"type": "summary_text", "text": "thinking"}],
            "encrypted_content": blob,
        },
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "and now?"},
    ]


@pytest.mark.parametrize(("blob", "sent"), [("foreign-blob", 2), ("opaque-blob", 1)])
def test_encrypted_reasoning_is_dropped_only_when_refused(
    proxy: Proxy, up: Upstream, tmp_path: Path, blob: str, sent: int
) -> None:
    client = proxy.client()
    raw = client.responses.with_raw_response.create(
        model="gpt-test",
        input=reasoning(blob),  # type: ignore[arg-type]
        **order("verifier"),
    )
    assert raw.parse().output_text == "hello from responses"
    bodies = up.bodies("verifier")
    assert len(bodies) == sent
    assert bodies[0]["input"][1]["encrypted_content"] == blob  # as it came, at first
    if sent == 2:
        assert "artifact_rejected" in raw.headers["X-Agent-Reach-Trace"]
        assert [i.get("type") for i in bodies[1]["input"]] == [None, None, None]
