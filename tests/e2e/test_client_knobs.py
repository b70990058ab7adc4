"""A client's timing knobs (`agent_reach.deadline_ms`, `agent_reach.first_token_ms`) steer only
its own request (protocol §4.1): they can shorten the configured limits, never lengthen them,
and a timeout they cause says nothing about the provider, so no circuit counts it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from ..fakes.upstream import Upstream
from .test_proxy import MSG, Proxy, start, stop


@pytest.fixture(scope="module")
def proxy(upstream: Upstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    config = {
        "health": {"mode": "off"},
        "state": "memory://",
        "deadline_ms": 400,
        "circuit": {"failures": 2, "cooldown_s": 600},
        "providers": [
            {"name": "ok", "endpoint": upstream.url("ok")},
            {"name": "slow", "endpoint": upstream.url("slow")},  # answers after 0.6 s
        ],
    }
    p = start(config, tmp_path_factory.mktemp("knobs"), upstream)
    yield p
    stop(p)


def ask(proxy: Proxy, provider: str, stream: bool = False, **knobs: float) -> Any:
    client = proxy.client().with_options(max_retries=0)
    return client.chat.completions.create(
        model="m",
        messages=MSG,
        stream=stream,
        extra_headers={"X-Agent-Reach-Fallback-Order": provider},
        extra_body={"agent_reach": knobs} if knobs else None,
    )


def circuit(proxy: Proxy, name: str) -> dict[str, Any]:
    status = proxy.get("/agent-reach/v1/status")[1]
    found: dict[str, Any] = next(p for p in status["providers"] if p["provider"] == name)
    return found["circuit"]


def test_a_clients_tight_first_token_limit_opens_no_circuit(proxy: Proxy) -> None:
    # `slow` sends nothing for 0.6 s, so no first token comes within 0.5 ms, however short
    # the hop (`ok`'s first token came within it now and then, on loopback).
    for _ in range(4):
        with pytest.raises(openai.APIStatusError) as failed:
            list(ask(proxy, "slow", stream=True, first_token_ms=0.5))
        assert "first token" in str(failed.value.body)
    assert circuit(proxy, "slow")["state"] == "closed"
    assert circuit(proxy, "slow")["failures"] == 0  # 2 open it (the fixture's circuit)


def test_a_clients_short_deadline_counts_against_no_circuit(proxy: Proxy) -> None:
    for _ in range(3):
        with pytest.raises(openai.APIStatusError):
            ask(proxy, "slow", deadline_ms=100)
    assert circuit(proxy, "slow")["failures"] == 0


def test_a_clients_deadline_cannot_outlive_the_configured_one(proxy: Proxy) -> None:
    for asked in (6000, 1e308):
        started = time.monotonic()
        with pytest.raises(openai.APIStatusError) as failed:
            ask(proxy, "slow", deadline_ms=asked)
        # `slow` answers after 0.6 s: within the client's deadline it would have been a 200,
        # so the configured 400 ms is what ended it (whatever the machine's load)
        body = failed.value.body
        assert isinstance(body, dict)
        assert [a["detail"] for a in body["attempts"]] == ["deadline"], time.monotonic() - started
