"""An answer that needs no change on its way to a client of the provider's own API reaches it
as the provider's bytes (protocol §7), judged all the same: a chat completion already
normalized, a Responses or Messages answer without reasoning artifacts."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from ..upstream import (
    VERBATIM_CHAT,
    VERBATIM_MESSAGE,
    VERBATIM_RESPONSE,
    Upstream,
    completion,
    proxy_config,
)
from .test_proxy import PROVIDER_KEY, Proxy, start, stop

MSG = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def proxy(upstream: Upstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    tmp = tmp_path_factory.mktemp("verbatim")
    key = {"api_key_env": "PROVIDER_KEY"}
    providers = [
        {"name": "chat", "endpoint": upstream.url("verbatim"), **key},
        {"name": "ok", "endpoint": upstream.url("ok"), **key},
        {"name": "strict", "endpoint": upstream.url("verbatim"), "validation": "strict", **key},
        {"name": "resp", "endpoint": upstream.url("verbatim", "responses"), **key},
        {"name": "claude", "endpoint": upstream.url("verbatim", "anthropic"), **key},
    ]
    providers[3]["format"], providers[4]["format"] = "responses", "anthropic"
    p = start(proxy_config(providers, fallback_order=["chat"]), tmp, upstream)
    yield p
    stop(p)
    assert PROVIDER_KEY not in (tmp / "proxy.log").read_text()


def post(proxy: Proxy, path: str, body: dict[str, Any], order: str) -> tuple[int, bytes]:
    request = urllib.request.Request(
        proxy.base + path,
        data=json.dumps(body).encode(),
        headers={
            "Content-Type": "application/json",
            "X-Agent-Reach-Fallback-Order": order,
            "anthropic-version": "2023-06-01",
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_a_chat_answer_already_normalized_passes_as_its_bytes(proxy: Proxy) -> None:
    status, raw = post(
        proxy, "/v1/chat/completions", {"model": "gpt-test", "messages": MSG}, "chat"
    )
    assert (status, raw) == (200, VERBATIM_CHAT)


def test_a_chat_answer_that_needs_a_field_is_normalized(proxy: Proxy) -> None:
    status, raw = post(proxy, "/v1/chat/completions", {"model": "gpt-test", "messages": MSG}, "ok")
    answer = json.loads(raw)
    assert status == 200
    assert answer["choices"][0] == {
        **completion("hello from ok")["choices"][0],
        "message": {"role": "assistant", "content": "hello from ok", "refusal": None},
        "logprobs": None,
    }


def test_bytes_that_pass_are_judged_first(proxy: Proxy) -> None:
    """`validation: strict` still applies: the answer's model is not the one asked for."""
    body = {"model": "other-model", "messages": MSG}
    status, raw = post(proxy, "/v1/chat/completions", body, "strict")
    assert status == 502
    assert b"validation: strict" in raw


def test_a_native_responses_answer_without_artifacts_passes_as_its_bytes(proxy: Proxy) -> None:
    status, raw = post(proxy, "/v1/responses", {"model": "gpt-test", "input": "hi"}, "resp")
    assert (status, raw) == (200, VERBATIM_RESPONSE)


def test_a_native_messages_answer_without_artifacts_passes_as_its_bytes(proxy: Proxy) -> None:
    body = {"model": "claude-test", "max_tokens": 100, "messages": MSG}
    status, raw = post(proxy, "/v1/messages", body, "claude")
    assert (status, raw) == (200, VERBATIM_MESSAGE)
