"""The Responses API face (`/v1/responses`) of the proxy as a subprocess, driven by the
official OpenAI SDK's `responses` client and by raw HTTP for schema checks."""

from __future__ import annotations

import json
import sqlite3
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from ..conftest import FUNCTION_TOOL, RESPONSE, RESPONSE_ERROR, assert_valid, assert_valid_event
from ..fakes.upstream import DEEPSEEK_MAX_TOKENS, TOOL_WORD, Upstream, own_bytes
from .test_proxy import PROVIDER_KEY, Proxy, base_config, chain, start, stop

EXEC = {
    "type": "function",
    "name": "exec_command",
    "description": "Runs a shell command.",
    "parameters": {
        "type": "object",
        "properties": {"cmd": {"type": "string"}},
        "required": ["cmd"],
    },
}


def config(upstream: Upstream) -> dict[str, Any]:
    cfg = base_config(upstream)
    cfg["providers"] += [
        {"name": "toolcall", "endpoint": upstream.url("toolcall"), "api_key_env": "PROVIDER_KEY"},
        {"name": "usage", "endpoint": upstream.url("usage")},
        {"name": "deepseek", "endpoint": upstream.url("deepseek")},
        {
            "name": "native",
            "endpoint": upstream.url("resp", "responses"),
            "format": "responses",
            "api_key_env": "PROVIDER_KEY",
        },
        {
            "name": "native-auth",
            "endpoint": upstream.url("auth", "responses"),
            "format": "responses",
            "api_key_env": "PROVIDER_KEY",
        },
        {
            "name": "mapped",
            "endpoint": upstream.url("ok"),
            "model_map": {"*": "upstream-model"},
        },
        {"name": "keyed", "endpoint": upstream.url("ok"), "prompt_cache_key": True},
    ]
    cfg["routes"] = {"gpt-5-codex": ["dead", "auth", "mapped"]}
    return cfg


@pytest.fixture(scope="module")
def proxy(upstream: Upstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    tmp = tmp_path_factory.mktemp("responses")
    p = start(config(upstream), tmp, upstream)
    yield p
    stop(p)
    log = (tmp / "proxy.log").read_text()
    assert "Traceback" not in log
    assert PROVIDER_KEY not in log


def test_models_lists_route_aliases_not_the_catch_all(proxy: Proxy) -> None:
    ids = [m.id for m in proxy.client().models.list()]
    assert "gpt-5-codex" in ids  # a route name is a model a client may ask for
    assert "*" not in ids  # `model_map: {"*": …}` maps any model; it names none


def post_events(
    proxy: Proxy, body: dict[str, Any], headers: dict[str, str]
) -> tuple[dict[str, str], list[dict[str, Any]]]:
    """POST a streamed request; the response headers and every event's data, each checked
    against the official event schema and its `event:` name."""
    req = urllib.request.Request(
        proxy.base + "/v1/responses",
        data=json.dumps({**body, "stream": True}).encode(),
        headers={"Content-Type": "application/json", **headers},
    )
    events = []
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        name = None
        for raw in resp:
            line = raw.decode().rstrip("\n")
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                data = json.loads(line[6:])
                assert data["type"] == name
                assert_valid_event(data)
                events.append(data)
        return dict(resp.headers), events


def order(*names: str) -> dict[str, str]:
    return {"X-Agent-Reach-Fallback-Order": ",".join(names)}


def test_text_through_a_dead_and_a_401_provider(proxy: Proxy) -> None:
    raw = proxy.client().responses.with_raw_response.create(
        model="gpt-test", input="hi", instructions="Be brief.", **chain("dead", "auth", "ok")
    )
    response = raw.parse()
    assert response.output_text == "hello from ok"
    assert response.status == "completed"
    assert response.id.startswith("resp_")
    assert response.usage is not None
    assert response.usage.total_tokens == 8
    assert_valid(RESPONSE, json.loads(raw.http_response.text))
    trace = raw.headers["X-Agent-Reach-Trace"].split(",")
    assert [t.split(":")[:2] for t in trace] == [
        ["dead", "connect_failed"],
        ["auth", "auth_failed"],
        ["ok", "ok"],
    ]
    sent = proxy.upstream.bodies("ok")[-1]
    assert sent["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"},
    ]
    assert PROVIDER_KEY not in raw.http_response.text


def test_stream_is_the_full_event_sequence(proxy: Proxy) -> None:
    headers, events = post_events(proxy, {"model": "gpt-test", "input": "hi"}, order("dead", "ok"))
    kinds = [e["type"] for e in events]
    assert kinds == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    done = events[-1]["response"]
    assert done["output"][0]["content"][0]["text"] == "hello from ok"
    assert headers["X-Agent-Reach-Provider"] == "ok"


def test_sdk_stream_helper(proxy: Proxy) -> None:
    with proxy.client().responses.stream(
        model="gpt-test", input="hi", extra_headers=order("auth", "ok")
    ) as stream:
        text = "".join(e.delta for e in stream if e.type == "response.output_text.delta")
        final = stream.get_final_response()
    assert text == final.output_text == "hello from ok"


def test_a_stream_from_a_chat_provider_completes_with_its_usage(proxy: Proxy) -> None:
    """The chat provider sends usage only when asked: the translation asks, and
    `response.completed` carries it, cached and reasoning tokens included."""
    with proxy.client().responses.stream(
        model="gpt-test", input="hi", extra_headers=order("dead", "usage")
    ) as stream:
        final = stream.get_final_response()
    assert final.output_text == "hello from usage"
    assert final.usage is not None
    assert (final.usage.input_tokens, final.usage.output_tokens) == (120, 30)
    assert final.usage.total_tokens == 150
    assert final.usage.input_tokens_details.cached_tokens == 100
    assert final.usage.output_tokens_details.reasoning_tokens == 12
    assert proxy.upstream.bodies("usage")[-1]["stream_options"] == {"include_usage": True}


def test_max_output_tokens_is_clamped_to_what_the_provider_said(proxy: Proxy) -> None:
    """Responses `max_output_tokens` above DeepSeek's 8192: refused, retried with the cap it
    stated. The model is the client's own name (the provider has no `models`), so the cap is
    not kept: the next request is refused and clamped again (tests/e2e/test_learned_caps.py
    has a model the config names)."""
    client = proxy.client()
    for _ in range(2):
        answer = client.responses.create(
            model="gpt-test", input="hi", max_output_tokens=64000, extra_headers=order("deepseek")
        )
        assert answer.status == "completed"
    sent = [b["max_tokens"] for b in proxy.upstream.bodies("deepseek")]
    assert sent == [64000, DEEPSEEK_MAX_TOKENS] * 2


@pytest.mark.parametrize("streamed", [False, True])
def test_tools_both_ways(proxy: Proxy, streamed: bool) -> None:
    client = proxy.client()
    first_input: list[Any] = [{"role": "user", "content": "Say something in the shell."}]
    kwargs: dict[str, Any] = {"model": "gpt-test", "tools": [EXEC], "store": False}
    kwargs |= chain("dead", "toolcall")
    if streamed:
        with client.responses.stream(input=first_input, **kwargs) as stream:
            first = stream.get_final_response()
    else:
        first = client.responses.create(input=first_input, **kwargs)
    calls = [item for item in first.output if item.type == "function_call"]
    assert len(calls) == 1
    call = calls[0]
    assert call.name == "exec_command"
    assert json.loads(call.arguments) == {"cmd": f"echo {TOOL_WORD}"}
    result = {"type": "function_call_output", "call_id": call.call_id, "output": TOOL_WORD}
    second_input = [*first_input, call.model_dump(exclude_none=True), result]
    if streamed:
        with client.responses.stream(input=second_input, **kwargs) as stream:
            second = stream.get_final_response()
    else:
        second = client.responses.create(input=second_input, **kwargs)
    assert second.output_text == f"The command printed: {TOOL_WORD}"
    sent = proxy.upstream.bodies("toolcall")[-1]
    assert sent["tools"][0]["function"]["name"] == "exec_command"
    assert sent["messages"][1]["tool_calls"][0]["id"] == call.call_id
    assert sent["messages"][2] == {
        "role": "tool",
        "tool_call_id": call.call_id,
        "content": TOOL_WORD,
    }


def test_previous_response_id_get_and_delete(proxy: Proxy) -> None:
    client = proxy.client()
    first = client.responses.create(model="gpt-test", input="first question", **chain("ok"))
    second = client.responses.create(
        model="gpt-test",
        input="second question",
        previous_response_id=first.id,
        **chain("backup"),
    )
    assert second.output_text == "hello from backup"
    sent = proxy.upstream.bodies("backup")[-1]["messages"]
    assert sent == [
        {"role": "user", "content": "first question"},
        {"role": "assistant", "content": "hello from ok"},
        {"role": "user", "content": "second question"},
    ]
    got = client.responses.retrieve(second.id)
    assert got.output_text == "hello from backup"
    status, body = proxy.get(f"/v1/responses/{first.id}")
    assert status == 200
    assert_valid(RESPONSE, body)
    client.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(first.id)
    status, body = proxy.get(f"/v1/responses/{first.id}")
    assert status == 404
    assert_valid(RESPONSE_ERROR, body)
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="gpt-test", input="x", previous_response_id="resp_nope")


def test_a_stored_response_is_not_streamed_again(proxy: Proxy) -> None:
    """`retrieve(stream=True)` resumes a background response, which the proxy never runs: a
    400 naming `stream`, not a JSON body the SDK would read as an empty event stream."""
    client = proxy.client()
    answer = client.responses.create(model="gpt-test", input="hi", **chain("ok"))
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.retrieve(answer.id, stream=True)
    assert refused.value.body["param"] == "stream"  # type: ignore[index]
    assert client.responses.retrieve(answer.id, stream=False).id == answer.id


def test_store_false_is_not_kept(proxy: Proxy) -> None:
    client = proxy.client()
    answer = client.responses.create(model="gpt-test", input="hi", store=False, **chain("ok"))
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(answer.id)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "gpt-test", "input": 3}, "input"),
        (
            {"model": "gpt-test", "input": [{"type": "message", "role": "bot", "content": "x"}]},
            "input[0].role",
        ),
        (
            {"model": "gpt-test", "input": [{"type": "function_call", "name": "f"}]},
            "input[0].call_id",
        ),
        ({"model": 7, "input": "hi"}, "model"),
        ({"model": "m", "input": "hi", "tools": "x"}, "tools"),
        (
            {
                "model": "m",
                "input": "hi",
                "tools": [{"type": "web_search"}],
                "tool_choice": {"type": "web_search"},
            },
            "tool_choice",
        ),
        ({"model": "m", "input": "hi", "previous_response_id": 5}, "previous_response_id"),
    ],
)
def test_bad_requests_are_400_with_param(proxy: Proxy, body: dict[str, Any], param: str) -> None:
    status, answer = proxy.post("/v1/responses", body)
    assert status == 400, answer
    assert answer["error"]["param"] == param
    assert_valid(RESPONSE_ERROR, answer)
    assert proxy.proc.poll() is None


def test_all_failed_is_an_openai_error_with_attempts(proxy: Proxy) -> None:
    with pytest.raises(openai.APIStatusError) as info:
        proxy.client().responses.create(model="gpt-test", input="hi", **chain("dead", "server"))
    assert info.value.status_code == 502
    body = info.value.response.json()
    assert_valid(RESPONSE_ERROR, body)
    assert [a["reason"] for a in body["error"]["attempts"]] == ["connect_failed", "server_error"]


def test_cut_after_the_first_output_event_ends_with_response_failed(proxy: Proxy) -> None:
    _, events = post_events(proxy, {"model": "gpt-test", "input": "hi"}, order("streamcut", "ok"))
    kinds = [e["type"] for e in events]
    assert "response.output_text.delta" in kinds
    assert kinds[-1] == "response.failed"
    assert "response.completed" not in kinds
    assert events[-1]["response"]["status"] == "failed"


def test_hosted_tools_are_dropped_for_chat_providers(proxy: Proxy) -> None:
    raw = proxy.client().responses.with_raw_response.create(
        model="gpt-test",
        input="hi",
        tools=[{"type": "web_search"}, EXEC],
        reasoning={"effort": "high"},
        **chain("ok"),
    )
    assert raw.parse().output_text == "hello from ok"
    dropped = raw.headers["X-Agent-Reach-Dropped"].split(",")
    assert "tools:web_search" in dropped
    assert "reasoning.effort" in dropped
    sent = proxy.upstream.bodies("ok")[-1]
    assert [t["function"]["name"] for t in sent["tools"]] == ["exec_command"]
    assert "reasoning" not in sent
    assert "reasoning_effort" not in sent


def test_native_provider_gets_the_request_as_it_came(proxy: Proxy) -> None:
    raw = proxy.client().responses.with_raw_response.create(
        model="gpt-test",
        input="hi",
        tools=[{"type": "web_search"}, EXEC],
        include=["reasoning.encrypted_content"],
        reasoning={"effort": "high"},
        **chain("native"),
    )
    answer = json.loads(raw.http_response.text)
    assert answer["id"] == "resp_upstream1"
    assert own_bytes(answer["output"][0]["encrypted_content"]) == "opaque-blob"  # tagged
    assert "X-Agent-Reach-Dropped" not in raw.headers
    sent = proxy.upstream.bodies("resp")[-1]
    assert sent["tools"][0] == {"type": "web_search"}
    assert sent["include"] == ["reasoning.encrypted_content"]
    assert sent["reasoning"] == {"effort": "high"}
    assert "agent_reach" not in sent


def test_codex_cache_routing_reaches_a_native_provider_as_it_came(proxy: Proxy) -> None:
    """Issue 49, item 3: OpenAI routes prompt-cache hits by `session-id`; Codex sends it with
    `prompt_cache_key` and its turn headers. A `format: responses` provider gets them as sent,
    and none of the client's other headers (its key above all)."""
    codex = {
        "session-id": "0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b",
        "x-codex-turn-state": "ts-opaque-1",
        "x-codex-window-id": "w-7",
        "x-codex-turn-metadata": '{"turn": 3}',
    }
    client = proxy.client("sk-client-key-not-for-providers")
    client.responses.create(
        model="gpt-test",
        input="hi",
        prompt_cache_key="0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b",
        extra_headers={**codex, "X-Agent-Reach-Fallback-Order": "native"},
    )
    [got] = [r for r in proxy.upstream.received if r.scenario == "resp"][-1:]
    assert got.body["prompt_cache_key"] == "0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"
    sent = {k.lower(): v for k, v in got.headers.items()}
    for name in ("session-id", "x-codex-turn-state", "x-codex-window-id"):
        assert sent[name] == codex[name]
    assert "x-codex-turn-metadata" not in sent  # not on the list
    assert sent["authorization"] == f"Bearer {PROVIDER_KEY}"  # the provider's own key


def test_codexs_session_reaches_a_chat_provider_that_routes_its_cache_by_it(
    proxy: Proxy,
) -> None:
    """Issue 49, item 3: a chat provider with `prompt_cache_key: true` (OpenAI's, in the
    catalog) gets Codex's `prompt_cache_key`, else its `session-id`, in that field; a provider
    without it gets neither."""
    session = {"session-id": "0199a1b2-0000-7e5f-8a9b-0c1d2e3f4a5b"}

    def sent(provider: str, headers: dict[str, str], **extra: Any) -> dict[str, Any]:
        proxy.client().responses.create(
            model="gpt-test",
            input="hi",
            extra_headers={**headers, "X-Agent-Reach-Fallback-Order": provider},
            **extra,
        )
        return proxy.upstream.bodies("ok")[-1]

    assert sent("keyed", session, prompt_cache_key="pck-1")["prompt_cache_key"] == "pck-1"
    assert sent("keyed", session)["prompt_cache_key"] == session["session-id"]
    assert "prompt_cache_key" not in sent("keyed", {})
    assert "prompt_cache_key" not in sent("ok", session, prompt_cache_key="pck-1")


def test_the_providers_turn_state_comes_back_to_codex(proxy: Proxy) -> None:
    """Issue 49, item 3: a `format: responses` provider's `x-codex-turn-state` (what Codex
    sends on its next request) reaches the client as the provider sent it; a chat provider
    has none to give."""
    asked = {"x-codex-turn-state": "ts-1"}
    headers, _ = post_events(
        proxy, {"model": "gpt-test", "input": "hi"}, {**asked, **order("native")}
    )
    assert {k.lower(): v for k, v in headers.items()}["x-codex-turn-state"] == "next-ts-1"
    headers, _ = post_events(proxy, {"model": "gpt-test", "input": "hi"}, {**asked, **order("ok")})
    assert "x-codex-turn-state" not in {k.lower() for k in headers}


def test_native_stream_is_forwarded_as_it_came(proxy: Proxy) -> None:
    _, events = post_events(proxy, {"model": "gpt-test", "input": "hi"}, order("native"))
    assert events[0]["response"]["id"] == "resp_upstream1"
    assert own_bytes(events[2]["item"]["encrypted_content"]) == "opaque-blob"
    assert own_bytes(events[-1]["response"]["output"][0]["encrypted_content"]) == "opaque-blob"
    assert events[-1]["type"] == "response.completed"
    assert [e["sequence_number"] for e in events] == list(range(len(events)))


def test_native_then_chat_fallback(proxy: Proxy) -> None:
    raw = proxy.client().responses.with_raw_response.create(
        model="gpt-test", input="hi", tools=[{"type": "web_search"}], **chain("native-auth", "ok")
    )
    assert raw.parse().output_text == "hello from ok"
    assert raw.headers["X-Agent-Reach-Dropped"] == "tools:web_search"
    assert raw.headers["X-Agent-Reach-Trace"].startswith("native-auth:auth_failed:")


def test_model_named_route_and_star_mapping(proxy: Proxy) -> None:
    raw = proxy.client().responses.with_raw_response.create(model="gpt-5-codex", input="hi")
    assert raw.parse().output_text == "hello from ok"
    assert raw.headers["X-Agent-Reach-Provider"] == "mapped"
    assert proxy.upstream.bodies("ok")[-1]["model"] == "upstream-model"


def test_body_extension_and_api_label_in_metrics(proxy: Proxy) -> None:
    answer = proxy.client().responses.create(
        model="gpt-test",
        input="hi",
        extra_body={"agent_reach": {"fallback_order": ["dead", "backup"]}},
    )
    assert answer.output_text == "hello from backup"
    sent = proxy.upstream.bodies("backup")[-1]
    assert "agent_reach" not in sent
    status, text = proxy.get("/metrics")
    assert status == 200
    assert 'agent_reach_requests_total{api="responses",outcome="ok",route="custom"}' in text


def test_a_stored_response_is_found_only_with_the_key_that_made_it(
    upstream: Upstream, tmp_path: Path
) -> None:
    p = start(config(upstream), tmp_path, upstream, env={"AGENT_REACH_API_KEYS": "k1,k2"})
    try:
        mine, theirs = p.client(key="k1"), p.client(key="k2")
        first = mine.responses.create(model="gpt-test", input="secret", **chain("ok"))
        with pytest.raises(openai.NotFoundError):
            theirs.responses.retrieve(first.id)
        with pytest.raises(openai.NotFoundError):
            theirs.responses.create(model="gpt-test", input="x", previous_response_id=first.id)
        with pytest.raises(openai.NotFoundError):
            theirs.responses.delete(first.id)
        assert mine.responses.retrieve(first.id).output_text == "hello from ok"  # still there
        mine.responses.delete(first.id)
        with pytest.raises(openai.NotFoundError):
            mine.responses.retrieve(first.id)
        status, body = p.post(
            "/v1/responses",
            {"model": "m", "input": "x", "previous_response_id": "r" * 5000},
            {"Authorization": "Bearer k1"},
        )
        assert status == 404
        assert len(body["error"]["message"]) < 300  # the id quoted as promised, not in full
    finally:
        stop(p)


def test_stored_conversations_grow_by_each_turn_once_and_within_caps(
    upstream: Upstream, tmp_path: Path
) -> None:
    cfg = config(upstream)
    cfg["state"] = f"sqlite:///{tmp_path / 'state.db'}"
    cfg["server"] = {"max_body_bytes": 20000, "responses_key_max_count": 8}
    p = start(cfg, tmp_path, upstream)
    try:
        client = p.client()
        ids: list[str] = []
        for n in range(3):
            more = {"previous_response_id": ids[-1]} if ids else {}
            turn = f"turn {n} " + "x" * 4000
            ids.append(client.responses.create(model="m", input=turn, **more, **chain("ok")).id)
        sent = p.upstream.bodies("ok")[-1]["messages"]
        assert [m["content"][:6] for m in sent if m["role"] == "user"] == [
            "turn 0",
            "turn 1",
            "turn 2",
        ]
        last = stored(tmp_path / "state.db", ids[-1])
        assert "turn 2" in last
        assert "turn 0" not in last  # linked, not copied: the store grows linearly
        # Past max_body_bytes once expanded: 413, naming the limit.
        with pytest.raises(openai.APIStatusError) as refused:
            for _ in range(10):
                answer = client.responses.create(
                    model="m", input="y" * 4000, previous_response_id=ids[-1], **chain("ok")
                )
                ids.append(answer.id)
        assert refused.value.status_code == 413
        assert "server.max_body_bytes" in refused.value.message
        assert 3 <= len(ids) < 6
        # The key keeps its 8 latest: the oldest are evicted, and a conversation that needs
        # one of them says so.
        chained = ids[2]
        while len(ids) < 9:
            ids.append(client.responses.create(model="m", input="new", **chain("ok")).id)
        assert client.responses.retrieve(ids[-1]).id == ids[-1]
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(ids[0])
        with pytest.raises(openai.NotFoundError) as broken:
            client.responses.create(model="m", input="z", previous_response_id=chained)
        assert "no longer stored" in broken.value.message
    finally:
        stop(p)


def stored(db_path: Path, id: str) -> str:
    """A stored response's record in the SQLite file, once its write has landed."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        with sqlite3.connect(db_path) as db:
            row = db.execute("SELECT data FROM responses WHERE id = ?", (id,)).fetchone()
        if row is not None:
            return str(row[0])
        time.sleep(0.05)
    raise AssertionError(f"{id} was not stored")


@pytest.mark.parametrize("streamed", [False, True])
def test_function_tools_are_echoed_in_the_apis_normalized_form(
    proxy: Proxy, streamed: bool
) -> None:
    tool = {"type": "function", "name": "lookup", "parameters": {"type": "object"}}
    body = {
        "model": "m",
        "input": "hi",
        "tools": [tool, {**tool, "name": "loose", "strict": False}],
    }
    headers = {"X-Agent-Reach-Fallback-Order": "ok"}
    if streamed:
        _, events = post_events(proxy, body, headers)
        echoed = [e["response"]["tools"] for e in events if "response" in e]
    else:
        status, answer = proxy.post("/v1/responses", body, headers)
        assert status == 200
        echoed = [answer["tools"]]
    for tools in echoed:
        for t in tools:
            assert_valid(FUNCTION_TOOL, t)
        assert [t["strict"] for t in tools] == [True, False]
        assert tools[0]["description"] is None


def test_an_answer_the_translation_cannot_carry_fails_over_or_fails_the_stream(
    upstream: Upstream, tmp_path: Path
) -> None:
    cfg = config(upstream)
    cfg["providers"].append(upstream.provider("badshape"))
    p = start(cfg, tmp_path, upstream)
    try:
        answer = p.client().responses.with_raw_response.create(
            model="m", input="hi", **chain("badshape", "ok")
        )
        assert answer.headers["X-Agent-Reach-Trace"].startswith("badshape:schema_mismatch:")
        assert answer.parse().output_text == "hello from ok"
        _, events = post_events(
            p, {"model": "m", "input": "hi"}, {"X-Agent-Reach-Fallback-Order": "badshape"}
        )
        assert events[-1]["type"] == "response.failed"
        assert "schema_mismatch" in events[-1]["response"]["error"]["message"]
    finally:
        stop(p)
    assert "Traceback" not in (tmp_path / "proxy.log").read_text()
