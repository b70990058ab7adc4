"""Streams rescued (protocol §10, continuation and streams after the first chunk): a stream cut,
stalled or broken by malformed frames after its first content is finished by the next provider,
and the client reads each piece of the answer once, whatever the continuing model does with
the text it is given; one malformed frame in a sound stream is skipped. Through the proxy, with
the official OpenAI and Anthropic SDKs, over each client API."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest

from ..fakes.upstream import RESCUED, Upstream, cut_usage, proxy_config
from .test_proxy import MSG, Proxy, start, stop
from .test_responses import post_events

ASKED_USAGE = {"prompt_tokens": 21, "completion_tokens": 9}  # `usage_asked`'s, the continuation's


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("rescue")


@pytest.fixture(scope="module")
def proxy(upstream: Upstream, workdir: Path) -> Iterator[Proxy]:
    providers = [
        upstream.provider("cutclose"),
        upstream.provider("cutstall"),
        upstream.provider("cutstall", name="cutstall-own", stall_ms=300),
        upstream.provider("cutgarbage"),
        upstream.provider("onebad"),
        upstream.provider("onebadonce"),
        upstream.provider("resumes"),
        upstream.provider("rewords"),
        upstream.provider("resumes", name="prefixed", assistant_prefill=True),
        upstream.provider("refuses"),
        upstream.provider("cutspace"),
        upstream.provider("claudeprefill", "anthropic"),
        upstream.provider("backup"),
    ]
    on = {"continue_on_cut": True}
    routes = {
        "top": {"providers": ["cutclose", "resumes"], **on},
        "word": {"providers": ["cutclose", "rewords"], **on},
        "prefill": {"providers": ["cutclose", "prefixed"], **on},
        "stall": {"providers": ["cutstall", "resumes"], "stall_ms": 300, **on},
        "stall-own": {"providers": ["cutstall-own", "resumes"], **on},
        "stall-alone": {"providers": ["cutstall"], "stall_ms": 300},
        "garbage": {"providers": ["cutgarbage", "resumes"], **on},
        "garbage-alone": ["cutgarbage"],
        "onebad": ["onebad", "backup"],
        "onebadonce": ["onebadonce", "backup"],
        "refused": {"providers": ["cutclose", "refuses"], **on},
        "to-claude": {"providers": ["cutspace", "claudeprefill"], **on},
    }
    p = start(proxy_config(providers, routes=routes), workdir, upstream)
    yield p
    stop(p)


def chat(proxy: Proxy, route: str) -> tuple[str, list[Any]]:
    """A streamed chat request on `route` with the OpenAI SDK, asking for usage."""
    stream = proxy.client().chat.completions.create(
        model="m",
        messages=MSG,
        stream=True,
        stream_options={"include_usage": True},
        extra_headers={"X-Agent-Reach-Route": route},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    return text, chunks


def chat_lines(proxy: Proxy, route: str) -> list[dict[str, Any]]:
    """A streamed chat request's events, read raw (an error event is one of them)."""
    req = urllib.request.Request(
        proxy.base + "/v1/chat/completions",
        data=json.dumps({"model": "m", "messages": MSG, "stream": True}).encode(),
        headers={"Content-Type": "application/json", "X-Agent-Reach-Route": route},
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        lines = [line.decode().strip() for line in resp if line.strip()]
    return [{"done": True} if line == "data: [DONE]" else json.loads(line[6:]) for line in lines]


def messages(proxy: Proxy, route: str) -> anthropic.types.Message:
    with (
        anthropic.Anthropic(base_url=proxy.base, api_key="unused", max_retries=0) as client,
        client.messages.stream(
            model="m", max_tokens=100, messages=MSG, extra_headers={"X-Agent-Reach-Route": route}
        ) as stream,
    ):
        for _ in stream.text_stream:
            pass
        return stream.get_final_message()


@pytest.mark.parametrize("route", ["top", "word", "prefill"])
def test_a_continuation_that_repeats_the_text_sent_is_read_once(proxy: Proxy, route: str) -> None:
    # `top` starts over from the beginning, `word` at the last word it was given, `prefill`
    # continues the partial answer it was given as a prefill (DeepSeek's `prefix: true`).
    text, chunks = chat(proxy, route)
    assert text == RESCUED
    assert len({c.id for c in chunks}) == 1
    assert chunks[0].model == "model-a"
    assert chunks[-1].model == "model-b"  # the model that finished the answer
    usage = chunks[-1].usage
    assert usage is not None
    assert usage.prompt_tokens == cut_usage(2)["prompt_tokens"] + ASKED_USAGE["prompt_tokens"]
    assert usage.completion_tokens == 2 + ASKED_USAGE["completion_tokens"]


def test_a_prefill_provider_is_sent_the_partial_answer_to_continue(proxy: Proxy) -> None:
    proxy.upstream.clear()
    chat(proxy, "prefill")
    sent = proxy.upstream.bodies("resumes")[-1]["messages"]
    assert sent[-1] == {"role": "assistant", "content": "partial answer", "prefix": True}
    assert sent[:-1] == MSG  # no instruction after it


def test_without_a_prefill_the_continuation_is_asked_with_an_instruction(proxy: Proxy) -> None:
    proxy.upstream.clear()
    chat(proxy, "top")
    sent = proxy.upstream.bodies("resumes")[-1]["messages"]
    assert sent[-2] == {"role": "assistant", "content": "partial answer"}
    assert sent[-1]["role"] == "user"
    assert "Continue" in sent[-1]["content"]


def test_an_anthropic_provider_continues_a_prefill_without_its_trailing_whitespace(
    proxy: Proxy,
) -> None:
    # The text sent ends in "partial "; Anthropic refuses a prefill that ends in whitespace,
    # so it gets "partial", and its continuation's opening space is not read twice.
    proxy.upstream.clear()
    text, _ = chat(proxy, "to-claude")
    assert text == RESCUED
    sent = proxy.upstream.bodies("claudeprefill")[-1]["messages"][-1]
    assert sent["role"] == "assistant"
    assert "partial" in json.dumps(sent["content"])
    assert "partial " not in json.dumps(sent["content"])


@pytest.mark.parametrize("route", ["stall", "stall-own"])  # the route's stall_ms, the provider's
def test_a_stalled_stream_is_cut_and_finished_by_the_next_provider(
    proxy: Proxy, route: str
) -> None:
    proxy.upstream.clear()
    text, chunks = chat(proxy, route)
    assert text == RESCUED
    assert chunks[-1].model == "model-b"
    assert "cutstall" in proxy.upstream.cancelled  # the stalled stream was closed


def test_a_stall_with_no_one_to_continue_ends_the_stream_with_its_reason(proxy: Proxy) -> None:
    events = chat_lines(proxy, "stall-alone")
    error = events[-1]["error"]
    assert error["type"] == "stream_interrupted"
    assert error["code"] == "timeout"
    assert "stalled: no bytes for 300 ms" in error["message"]


@pytest.mark.parametrize("route", ["onebad", "onebadonce"])
def test_one_malformed_frame_in_a_sound_stream_is_skipped_and_logged(
    proxy: Proxy, workdir: Path, route: str
) -> None:
    """Also when it comes in the same read as the first content (`onebadonce`)."""
    proxy.upstream.clear()
    events = chat_lines(proxy, route)
    assert events[-1] == {"done": True}
    text = "".join(
        (ch.get("delta") or {}).get("content") or "" for e in events[:-1] for ch in e["choices"]
    )
    assert text == "partial answer"
    assert proxy.upstream.bodies("backup") == []
    log = (workdir / "proxy.log").read_text()
    assert f"{route}: skipped a malformed frame mid-stream" in log


def test_malformed_frames_that_do_not_recover_are_a_cut(proxy: Proxy) -> None:
    error = chat_lines(proxy, "garbage-alone")[-1]["error"]
    assert error["type"] == "stream_interrupted"
    assert error["code"] == "schema_mismatch"
    text, _ = chat(proxy, "garbage")  # and, with a provider to continue, rescued
    assert text == RESCUED


def test_a_fallback_refusing_the_continuation_does_not_mask_the_cut(proxy: Proxy) -> None:
    error = chat_lines(proxy, "refused")[-1]["error"]
    cut, refused = error["attempts"][-2:]
    assert cut["provider"] == "cutclose"
    assert refused == {**refused, "provider": "refuses", "reason": "bad_request"}
    assert error["code"] == cut["reason"] != "bad_request"
    assert error["message"].startswith("cutclose failed mid-stream")


@pytest.mark.parametrize("route", ["top", "stall", "garbage"])
def test_a_responses_stream_is_rescued(proxy: Proxy, route: str) -> None:
    _, events = post_events(proxy, {"model": "m", "input": "hi"}, {"X-Agent-Reach-Route": route})
    done = events[-1]
    assert done["type"] == "response.completed"
    assert done["response"]["output"][0]["content"][0]["text"] == RESCUED
    assert done["response"]["model"] == "model-b"


@pytest.mark.parametrize("route", ["top", "stall", "garbage"])
def test_a_messages_stream_is_rescued(proxy: Proxy, route: str) -> None:
    final = messages(proxy, route)
    assert [b.type for b in final.content] == ["text"]
    assert final.content[0].type == "text"
    assert final.content[0].text == RESCUED
    assert final.stop_reason == "end_turn"
    assert final.usage.output_tokens == 2 + ASKED_USAGE["completion_tokens"]


def test_a_refused_continuation_ends_a_responses_stream_with_the_cut(proxy: Proxy) -> None:
    _, events = post_events(
        proxy, {"model": "m", "input": "hi"}, {"X-Agent-Reach-Route": "refused"}
    )
    assert events[-1]["type"] == "response.failed"
    assert events[-1]["response"]["error"]["message"].startswith("cutclose failed mid-stream")


def test_a_refused_continuation_ends_a_messages_stream_with_the_cut(proxy: Proxy) -> None:
    with pytest.raises(anthropic.APIStatusError) as caught:
        messages(proxy, "refused")
    body = caught.value.body
    assert isinstance(body, dict)
    assert body["error"]["message"].startswith("cutclose failed mid-stream: server_error")
    assert body["error"]["attempts"][-1]["reason"] == "bad_request"  # the refusal, kept apart
