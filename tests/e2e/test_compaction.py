"""Compaction for any provider (issue 53): `POST /v1/responses/compact` (the SDK's
`responses.compact()`) and a request ending in `compaction_trigger` (Codex's remote compaction
v2, over HTTP and over the WebSocket) answered behind a chat-only fake with exactly one sealed
`compaction` item, which a later turn brings back to a native Anthropic fake as the summary in
its conversation; an item altered, made for another client key, or not ours is a 400; the real
Codex compacts through agent-reach. And Responses Lite: the tools of an `additional_tools`
input item reach a chat provider as its tools."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from websockets.sync.client import connect

from agent_reach.dialects.responses.compaction import HEADER, PROMPT

from ..conftest import RESPONSE, RESPONSES_SCHEMAS, _validator, assert_valid, assert_valid_event
from ..fakes.upstream import (
    COMPACTED,
    TOOL_WORD,
    Upstream,
    proxy_config,
    refused_url,
    responses_answer,
)
from .test_codex import agents_config, codex_exec
from .test_proxy import Proxy, start, stop
from .test_responses import EXEC

COMPACTION = _validator("CompactionBody", RESPONSES_SCHEMAS)
KEY, OTHER_KEY = "sk-compact-a-1b2c3d4e", "sk-compact-b-5f6a7b8c"
AUTH = {"Authorization": f"Bearer {KEY}"}
V2 = {"x-codex-beta-features": "remote_compaction_v2", **AUTH}
CONVERSATION = [
    {"type": "message", "role": "user", "content": "Fix the failing test."},
    {"type": "function_call", "call_id": "call_a1", "name": "exec_command", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "call_a1", "output": TOOL_WORD},
    {"type": "message", "role": "assistant", "content": "The test passes now."},
]


@pytest.fixture(scope="module")
def proxy(upstream: Upstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    cfg = proxy_config(
        [
            {"name": "dead", "endpoint": refused_url()},
            upstream.provider("ok"),
            upstream.provider("claude", "anthropic"),
            upstream.provider("toolcall"),
            upstream.provider("native", "responses"),
        ],
        fallback_order=["dead", "ok"],
        server={"api_keys_env": "PROXY_KEYS"},
    )
    tmp = tmp_path_factory.mktemp("compaction")
    p = start(cfg, tmp, upstream, env={"PROXY_KEYS": f"{KEY},{OTHER_KEY}"})
    yield p
    stop(p)
    assert "Traceback" not in (tmp / "proxy.log").read_text()


def post(
    proxy: Proxy, path: str, body: dict[str, Any], **headers: str
) -> tuple[dict[str, str], Any]:
    req = urllib.request.Request(
        proxy.base + path,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", **AUTH, **headers},
    )
    with urllib.request.urlopen(req, timeout=15) as resp:
        raw = resp.read().decode()
        if resp.headers["Content-Type"].startswith("text/event-stream"):
            datas = [line[6:] for line in raw.splitlines() if line.startswith("data: ")]
            return dict(resp.headers), [json.loads(d) for d in datas]
        return dict(resp.headers), json.loads(raw)


def asked_summary(up: Upstream) -> list[dict[str, Any]]:
    """The messages the `ok` fake was sent for the summary: the conversation, then PROMPT."""
    (sent,) = up.bodies("ok")
    assert sent["messages"][-1] == {"role": "user", "content": PROMPT}
    assert sent.get("tool_choice") in (None, "none")
    return list(sent["messages"])


def the_summary_reaches_claude(proxy: Proxy, up: Upstream, item: dict[str, Any]) -> None:
    """A later turn carrying `item` goes to the native Anthropic fake (after a dead provider)
    with the summary as a user turn of its conversation."""
    headers, answer = post(
        proxy,
        "/v1/responses",
        {"model": "m", "input": [item, {"role": "user", "content": "Now commit it."}]},
        **{"X-Agent-Reach-Fallback-Order": "dead,claude"},
    )
    assert headers["X-Agent-Reach-Provider"] == "claude"
    assert answer["status"] == "completed"
    (sent,) = up.bodies("claude")
    first = sent["messages"][0]
    text = first["content"] if isinstance(first["content"], str) else first["content"][0]["text"]
    assert first["role"] == "user"
    assert text.startswith(HEADER)
    assert text.endswith("hello from ok")  # the `ok` fake's answer was the summary
    assert "agent-reach.compaction" not in json.dumps(sent)


def test_the_compact_endpoint_answers_one_compaction_item(proxy: Proxy, up: Upstream) -> None:
    headers, answer = post(
        proxy,
        "/v1/responses/compact",
        {
            "model": "gpt-5-codex",
            "input": CONVERSATION,
            "instructions": "Be a coder.",
            "tools": [EXEC],
        },
    )
    assert headers["X-Agent-Reach-Trace"].startswith("dead:connect_failed")
    assert answer["object"] == "response.compaction"
    (item,) = answer["output"]
    assert_valid(COMPACTION, item)
    messages = asked_summary(up)
    assert [m["role"] for m in messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
    ]
    up.clear()
    the_summary_reaches_claude(proxy, up, item)


def test_a_v2_trigger_streams_exactly_one_compaction_item(proxy: Proxy, up: Upstream) -> None:
    body = {
        "model": "gpt-5-codex",
        "input": [*CONVERSATION, {"type": "compaction_trigger"}],
        "tools": [EXEC],
        "stream": True,
        "store": False,
    }
    _, events = post(proxy, "/v1/responses", body, **V2)
    for event in events:
        assert_valid_event(event)
    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.output_item.done",
        "response.completed",
    ]
    done = events[-1]["response"]
    assert_valid(RESPONSE, done)
    (item,) = done["output"]
    assert item["type"] == "compaction"
    assert len(asked_summary(up)) == len(CONVERSATION) + 1
    up.clear()
    the_summary_reaches_claude(proxy, up, item)


def test_a_v2_trigger_over_the_websocket(proxy: Proxy, up: Upstream) -> None:
    url = f"ws://127.0.0.1:{proxy.port}/v1/responses"
    with connect(url, additional_headers=V2, open_timeout=10) as ws:
        create = {"type": "response.create", "model": "m", "store": False}
        ws.send(json.dumps({**create, "input": CONVERSATION, "generate": False}))
        warm = [json.loads(ws.recv(timeout=15)) for _ in range(3)]
        previous = warm[-1]["response"]["id"]
        trigger = [{"type": "compaction_trigger"}]
        ws.send(json.dumps({**create, "previous_response_id": previous, "input": trigger}))
        events = [json.loads(ws.recv(timeout=15)) for _ in range(5)]
    for event in events:
        assert_valid_event(event)
    (item,) = events[-1]["response"]["output"]
    assert item["type"] == "compaction"
    assert len(asked_summary(up)) == len(CONVERSATION) + 1  # the warm-up's input, continued


def test_a_whole_v2_answer_and_a_compaction_in_the_middle_of_a_conversation(
    proxy: Proxy, up: Upstream
) -> None:
    _, answer = post(
        proxy,
        "/v1/responses",
        {"model": "m", "input": [*CONVERSATION, {"type": "compaction_trigger"}]},
    )
    assert_valid(RESPONSE, answer)
    (item,) = answer["output"]
    up.clear()
    later = [{"role": "user", "content": "Earlier."}, item, {"role": "user", "content": "Go."}]
    post(proxy, "/v1/responses", {"model": "m", "input": later})
    (sent,) = up.bodies("ok")
    assert [m["content"][: len(HEADER)] for m in sent["messages"]] == [
        "Earlier.",
        HEADER,
        "Go.",
    ]


def test_responses_lite_additional_tools_become_the_chat_tools(proxy: Proxy, up: Upstream) -> None:
    lite = {"type": "additional_tools", "role": "developer", "tools": [EXEC]}
    _, answer = post(
        proxy,
        "/v1/responses",
        {"model": "gpt-5.6-lite", "input": [lite, {"role": "user", "content": "Run it."}]},
        **{"X-Agent-Reach-Fallback-Order": "toolcall"},
    )
    (sent,) = up.bodies("toolcall")
    assert [t["function"]["name"] for t in sent["tools"]] == ["exec_command"]
    (call,) = [i for i in answer["output"] if i["type"] == "function_call"]
    assert call["name"] == "exec_command"


def test_the_real_codex_compacts_its_context_behind_a_chat_only_provider(
    upstream: Upstream, tmp_path: Path
) -> None:
    """Codex 0.171 (its built-in OpenAI provider pointed at agent-reach, over WebSocket) with a
    context window of 64 tokens (`model_context_window`: 95 % of it effective, which the tool
    turn's 60 tokens pass): it asks agent-reach for remote compaction, gets one
    `compaction` item (the chat-only provider wrote the summary), says "context compacted" and
    finishes the turn from the summary, which the provider received in the conversation."""
    upstream.clear()
    cfg = agents_config(upstream)
    for provider in cfg["providers"]:
        if provider["name"] == "toolcall":
            provider["endpoint"] = upstream.url("compacting")
    p = start(cfg, tmp_path, upstream)
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI", "AGENT_REACH"))}
        for name in ("home", "codex", "work"):
            (tmp_path / name).mkdir()
        env.update(HOME=str(tmp_path / "home"), CODEX_HOME=str(tmp_path / "codex"))
        env["OPENAI_API_KEY"] = "unused"
        (tmp_path / "codex" / "config.toml").write_text(
            f'openai_base_url = "{p.base}/v1"\nmodel_context_window = 64\n'
        )
        result = codex_exec(env, tmp_path / "work")
    finally:
        stop(p)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "context compacted" in result.stdout + result.stderr
    assert f"The command printed: {TOOL_WORD} (from the summary)" in result.stdout
    sent = upstream.bodies("compacting")
    asked = [b for b in sent if b["messages"][-1]["content"] == PROMPT]
    assert len(asked) == 1  # one summary, asked once
    later = [b for b in sent if any(m["content"] == HEADER + COMPACTED for m in b["messages"])]
    assert later  # the turn after it carried the summary
    assert len(sent) <= 6  # no loop


def test_the_sdks_compact_behind_a_chat_only_route(proxy: Proxy, up: Upstream) -> None:
    """`client.responses.compact()`: exactly one `compaction` item, which the next turn brings
    to the native Anthropic fake as the summary the route's (chat-only) model wrote."""
    client = openai.OpenAI(base_url=proxy.base + "/v1", api_key=KEY, max_retries=0)
    compacted = client.responses.compact(
        model="gpt-5-codex",
        input=CONVERSATION,  # type: ignore[arg-type]
        instructions="Be a coder.",
    )
    client.close()
    (item,) = compacted.output
    assert item.type == "compaction"
    assert len(asked_summary(up)) == len(CONVERSATION) + 2  # instructions, items, the prompt
    up.clear()
    the_summary_reaches_claude(proxy, up, item.model_dump(mode="json", exclude_none=True))


def refusal(proxy: Proxy, item: dict[str, Any], key: str = KEY) -> tuple[int, dict[str, Any]]:
    """The answer to a turn carrying `item` (sent with `key`), which must reach no provider."""
    body = {"model": "m", "input": [{"role": "user", "content": "hi"}, item]}
    try:
        post(proxy, "/v1/responses", body, Authorization=f"Bearer {key}")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())
    raise AssertionError("a bad compaction item was answered")


def test_an_altered_foreign_or_other_keys_item_is_a_400(proxy: Proxy, up: Upstream) -> None:
    _, answer = post(proxy, "/v1/responses/compact", {"model": "m", "input": CONVERSATION})
    (item,) = answer["output"]
    up.clear()
    content = item["encrypted_content"]
    packed, _, mac = content.rpartition(".")
    other = packed[:-3] + ("AAA" if packed[-3:] != "AAA" else "BBB")
    for altered in (f"{other}.{mac}", content[:-2] + ("xx" if content[-2:] != "xx" else "yy")):
        status, body = refusal(proxy, {**item, "encrypted_content": altered})
        assert status == 400
        assert (
            "input[1]: the compaction item's encrypted_content was changed"
            in body["error"]["message"]
        )
        assert body["error"]["param"] == "input"
    status, body = refusal(proxy, item, key=OTHER_KEY)  # made for KEY
    assert status == 400
    assert "made for another client key" in body["error"]["message"]
    status, body = refusal(proxy, {**item, "encrypted_content": "gAAAAABo-openai-own"})
    assert status == 400
    assert (
        "input[1] is a compaction item agent-reach did not make, and no provider of the route"
        in (body["error"]["message"])
    )
    assert up.received == []  # nothing reached a provider


def test_a_responses_provider_gets_the_trigger_and_its_own_items_as_they_came(
    proxy: Proxy, up: Upstream
) -> None:
    """Down a route with a `format: responses` provider, a trigger and a compaction item not
    ours reach it as they came (ours as its summary), and its own output passes as it is."""
    ours = post(proxy, "/v1/responses/compact", {"model": "m", "input": CONVERSATION})[1]
    up.clear()
    theirs = {"type": "compaction", "id": "cmp_9", "encrypted_content": "gAAAAABo-openai-own"}
    items = [theirs, *ours["output"], {"type": "compaction_trigger"}]
    headers, answer = post(
        proxy,
        "/v1/responses",
        {"model": "m", "input": items, "stream": True},
        **{"X-Agent-Reach-Fallback-Order": "dead,native"},
    )
    assert headers["X-Agent-Reach-Provider"] == "native"
    (sent,) = up.bodies("native")
    assert sent["input"][0] == theirs
    assert sent["input"][1]["content"].startswith(HEADER)
    assert sent["input"][2] == {"type": "compaction_trigger"}
    assert sent.get("stream") is False
    done = answer[-1]["response"]
    own = responses_answer("m")["output"]  # the fake's own answer, as it is
    assert [i["type"] for i in done["output"]] == [i["type"] for i in own]
