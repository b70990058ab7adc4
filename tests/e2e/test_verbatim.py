"""An answer that needs no change on its way to a client of the provider's own API reaches it
as the provider's bytes (protocol §7), judged all the same: a chat completion already
normalized, a Responses or Messages answer without reasoning artifacts."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ..fakes.upstream import (
    REPEATS_EVENTS,
    REPEATS_TEXTS,
    VERBATIM_CHAT,
    VERBATIM_EVENTS,
    VERBATIM_MESSAGE,
    VERBATIM_RESPONSE,
    VERBATIM_STREAM,
    Upstream,
    completion,
    proxy_config,
)
from .test_proxy import PROVIDER_KEY, Proxy, start, stop

MSG = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("verbatim")


@pytest.fixture(scope="module")
def proxy(upstream: Upstream, workdir: Path) -> Iterator[Proxy]:
    tmp = workdir
    key = {"api_key_env": "PROVIDER_KEY"}
    providers = [
        {"name": "chat", "endpoint": upstream.url("verbatim"), **key},
        {"name": "ok", "endpoint": upstream.url("ok"), **key},
        {"name": "strict", "endpoint": upstream.url("verbatim"), "validation": "strict", **key},
        {"name": "resp", "endpoint": upstream.url("verbatim", "responses"), **key},
        {"name": "claude", "endpoint": upstream.url("verbatim", "anthropic"), **key},
        {"name": "repeats", "endpoint": upstream.url("repeats"), **key},
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


def test_stream_chunks_that_need_no_change_pass_as_their_bytes(proxy: Proxy) -> None:
    """One read of the upstream carries the whole stream: each chunk OpenAI's own is relayed
    byte for byte, the one with a field a chunk does not have is normalized, the malformed
    frame between them is skipped, the usage chunk is normalized (it equals itself)."""
    body = {"model": "gpt-test", "messages": MSG, "stream": True}
    status, raw = post(proxy, "/v1/chat/completions", body, "chat")
    assert status == 200
    events = raw.split(b"\n\n")
    assert events[-2:] == [b"data: [DONE]", b""]
    events = events[:-2]
    assert len(events) == len(VERBATIM_STREAM)
    for got, sent, chunk in zip(events, VERBATIM_EVENTS, VERBATIM_STREAM, strict=True):
        if "x_trace" in chunk:
            assert json.loads(got[6:]) == {k: v for k, v in chunk.items() if k != "x_trace"}
        elif "usage" in chunk:
            assert json.loads(got[6:]) == chunk
        else:
            assert got == sent


def test_chunks_alike_but_for_their_text_pass_as_their_bytes(proxy: Proxy, workdir: Path) -> None:
    """Most pass at a glance (the first one's bytes around another text); one with a quote or
    a backslash in its text is walked; each malformed frame between them is skipped and told,
    the one with the others' bytes around a string that is no JSON too."""
    body = {"model": "gpt-test", "messages": MSG, "stream": True}
    status, raw = post(proxy, "/v1/chat/completions", body, "repeats")
    assert status == 200
    assert raw.split(b"\n\n") == [*REPEATS_EVENTS, b"data: [DONE]", b""]
    log = (workdir / "proxy.log").read_text()
    assert log.count("repeats: skipped a malformed frame mid-stream") == 2
    # Their texts, as another face reads them (the chunks themselves, not their bytes):
    events = proxy.client().responses.create(
        model="gpt-test",
        input="hi",
        stream=True,
        extra_headers={"X-Agent-Reach-Fallback-Order": "repeats"},
    )
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert "".join(deltas) == "".join(REPEATS_TEXTS)


def test_a_verbatim_stream_reads_in_the_sdks(proxy: Proxy) -> None:
    chunks = list(
        proxy.client().chat.completions.create(
            model="gpt-test",
            messages=MSG,  # type: ignore[arg-type]
            stream=True,
            extra_headers={"X-Agent-Reach-Fallback-Order": "chat"},
        )
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "h\u00e9llo"
    assert chunks[0].system_fingerprint == "fp_verbatim"
    usage = chunks[-1].usage
    assert usage is not None
    assert usage.total_tokens == 8
    body = {"model": "claude-test", "max_tokens": 100, "messages": MSG, "stream": True}
    status, raw = post(proxy, "/v1/messages", body, "chat")  # rendered from the same chunks
    assert status == 200
    assert raw.count(b'"text_delta"') == 3
    assert b"message_stop" in raw
