"""Responses over WebSocket (`GET /v1/responses` upgraded, issue 52): `agent-reach serve` as a
subprocess, driven by a raw client (`websockets`), by the official SDK's
`client.responses.connect()` and by the real Codex CLI, through a dead and a 401 provider to a
chat-only fake, which gets the whole conversation each turn. Every event is checked against
the official schema."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from websockets.asyncio.client import connect as aconnect
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection, connect

from ..conftest import assert_valid_event
from ..fakes.upstream import TOOL_WORD, Upstream, proxy_config, refused_url
from .test_codex import agents_config, assert_tool_turn, codex_exec
from .test_proxy import Proxy, start, stop
from .test_responses import EXEC

KEY = "sk-socket-client-3c4d5e6f"
BETA = {"OpenAI-Beta": "responses_websockets=2026-02-06"}


def config(upstream: Upstream, **server: Any) -> dict[str, Any]:
    return proxy_config(
        [
            {"name": "dead", "endpoint": refused_url()},
            upstream.provider("auth"),
            upstream.provider("toolcall", model_map={"*": "deepseek-chat"}),
            upstream.provider("ok", "responses", name="native"),
            upstream.provider("late"),
        ],
        fallback_order=["dead", "auth", "toolcall"],
        server={"api_keys_env": "PROXY_KEYS", "max_body_bytes": 200_000, **server},
    )


@pytest.fixture(scope="module")
def proxy(upstream: Upstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    tmp = tmp_path_factory.mktemp("socket")
    p = start(config(upstream), tmp, upstream, env={"PROXY_KEYS": KEY})
    yield p
    stop(p)
    log = (tmp / "proxy.log").read_text()
    assert "Traceback" not in log


def _log_path(proxy: Proxy) -> Path:
    args = proxy.proc.args
    assert isinstance(args, list)
    return Path(args[args.index("--config") + 1]).parent / "proxy.log"


def socket(proxy: Proxy, key: str = KEY, **headers: str) -> ClientConnection:
    url = f"ws://127.0.0.1:{proxy.port}/v1/responses"
    auth = {"Authorization": f"Bearer {key}", **BETA, **headers}
    return connect(url, additional_headers=auth, open_timeout=10, close_timeout=5)


def turn(ws: ClientConnection, **create: Any) -> list[dict[str, Any]]:
    """One `response.create`: its events up to the last (completed, failed or an error),
    each valid against the official schema."""
    ws.send(json.dumps({"type": "response.create", **create}))
    return events(ws)


def events(ws: ClientConnection) -> list[dict[str, Any]]:
    out = []
    while True:
        event = json.loads(ws.recv(timeout=15))
        assert_valid_event(event)
        out.append(event)
        if event["type"] in ("response.completed", "response.failed", "error"):
            return out


FIRST = {
    "model": "gpt-5-codex",
    "store": False,
    "instructions": "You are a coding agent.",
    "input": [{"type": "message", "role": "user", "content": "Run the test command."}],
    "tools": [EXEC],
}


def tool_output(call: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"type": "function_call_output", "call_id": call["call_id"], "output": TOOL_WORD}]


def test_two_turns_on_one_socket_reach_a_chat_provider_with_the_whole_conversation(
    proxy: Proxy, up: Upstream
) -> None:
    with socket(proxy) as ws:
        first = turn(ws, **FIRST)
        assert [e["type"] for e in first][:2] == ["response.created", "response.in_progress"]
        done = first[-1]["response"]
        assert first[-1]["type"] == "response.completed"
        assert [e["sequence_number"] for e in first] == list(range(len(first)))
        (call,) = [i for i in done["output"] if i["type"] == "function_call"]
        assert call["name"] == "exec_command"
        second = turn(
            ws,
            model="gpt-5-codex",
            store=False,
            previous_response_id=done["id"],
            input=tool_output(call),
            tools=[EXEC],
        )
        assert second[-1]["type"] == "response.completed"
        text = "".join(e["delta"] for e in second if e["type"] == "response.output_text.delta")
        assert text == f"The command printed: {TOOL_WORD}"
    sent = up.bodies("toolcall")
    assert len(sent) == 2
    roles = [m["role"] for m in sent[1]["messages"]]
    assert roles == ["user", "assistant", "tool"]  # the whole conversation (not instructions)
    assert sent[1]["messages"][1]["tool_calls"][0]["id"] == call["call_id"]
    log = _log_path(proxy).read_text()
    lines = re.findall(r"WS /v1/responses 200 .*", log)
    assert len(lines) >= 2
    assert "attempts=dead:connect_failed,auth:auth_failed,toolcall:ok" in lines[-1]
    assert "provider=toolcall provider_model=deepseek-chat" in lines[-1]


# openai 3.60 opens its socket with websockets' `connect()` outside a context manager, which
# websockets 17.1 deprecates: the SDK's own warning, not ours.
@pytest.mark.filterwarnings("ignore:connect\\(\\) must be used as a context manager")
def test_the_sdk_websocket_client_completes_a_tool_conversation(proxy: Proxy, up: Upstream) -> None:
    client = openai.OpenAI(base_url=proxy.base + "/v1", api_key=KEY, max_retries=0)
    with client.responses.connect(max_retries=0) as conn:
        conn.response.create(**FIRST)
        done = None
        for event in conn:
            assert_valid_event(event.model_dump(mode="json", exclude_unset=True))
            if event.type == "response.completed":
                done = event.response
                break
        assert done is not None
        call = next(i for i in done.output if i.type == "function_call")
        conn.response.create(
            model="gpt-5-codex",
            store=False,
            previous_response_id=done.id,
            input=[{"type": "function_call_output", "call_id": call.call_id, "output": TOOL_WORD}],
            tools=[EXEC],  # type: ignore[list-item]
        )
        text = ""
        for event in conn:
            if event.type == "response.output_text.delta":
                text += event.delta
            if event.type == "response.completed":
                break
    client.close()
    assert text == f"The command printed: {TOOL_WORD}"
    assert [m["role"] for m in up.bodies("toolcall")[-1]["messages"]] == [
        "user",
        "assistant",
        "tool",
    ]


def test_a_warm_up_reaches_no_provider_and_its_tools_and_instructions_carry_on(
    proxy: Proxy, up: Upstream
) -> None:
    with socket(proxy) as ws:
        warm = turn(ws, **FIRST, generate=False)
        assert [e["type"] for e in warm] == [
            "response.created",
            "response.in_progress",
            "response.completed",
        ]
        assert warm[-1]["response"]["output"] == []
        assert up.bodies("toolcall") == []  # no provider was asked
        later = turn(
            ws,
            model="gpt-5-codex",
            store=False,
            previous_response_id=warm[-1]["response"]["id"],
            input=[{"type": "message", "role": "user", "content": "Go on."}],
        )
        assert later[-1]["type"] == "response.completed"
    (sent,) = up.bodies("toolcall")
    assert sent["messages"][0] == {"role": "system", "content": "You are a coding agent."}
    assert [m["content"] for m in sent["messages"][1:]] == ["Run the test command.", "Go on."]
    assert [t["function"]["name"] for t in sent["tools"]] == ["exec_command"]


def test_errors_are_error_events_and_the_socket_stays_open(proxy: Proxy, up: Upstream) -> None:
    with socket(proxy) as ws:
        ws.send("{not json")
        (bad,) = events(ws)
        assert bad["status"] == 400
        assert "not valid JSON" in bad["message"]
        ws.send(json.dumps({"type": "session.update"}))
        (unknown,) = events(ws)
        assert unknown["code"] == "unsupported_event_type"
        (lost,) = turn(ws, model="m", previous_response_id="resp_nowhere", input="hi")
        assert lost["code"] == "previous_response_not_found"
        assert lost["error"]["code"] == "previous_response_not_found"
        (background,) = turn(ws, model="m", input="hi", background=True)
        assert background["param"] == "background"
        (malformed,) = turn(ws, model="m", input=[{"type": "message", "role": "nobody"}])
        assert malformed["status"] == 400
        headers = {"X-Agent-Reach-Fallback-Order": "dead"}
        with socket(proxy, **headers) as dead:
            (failed,) = turn(dead, model="m", input="hi")
        assert failed["status"] == 502
        assert failed["error"]["attempts"][0]["provider"] == "dead"
        assert failed["headers"] == {"x-should-retry": "false"}
        ok = turn(ws, **FIRST)  # still open, still answering
        assert ok[-1]["type"] == "response.completed"


def test_the_upgrade_takes_the_client_key_and_asks_for_websocket(proxy: Proxy) -> None:
    with pytest.raises(InvalidStatus) as refused, socket(proxy, key="sk-wrong"):
        pass
    assert refused.value.response.status_code == 401
    status, body = proxy.get("/v1/responses", {"Authorization": f"Bearer {KEY}"})
    assert status == 426
    assert "Upgrade: websocket" in body["error"]["message"]


def test_an_hour_old_socket_gets_the_connection_limit_error(
    upstream: Upstream, tmp_path: Path
) -> None:
    p = start(config(upstream, websocket_max_s=1.0), tmp_path, upstream, env={"PROXY_KEYS": KEY})
    try:
        with socket(p) as ws:
            start_at = time.monotonic()
            limit = json.loads(ws.recv(timeout=15))
            assert_valid_event(limit)
            assert limit["code"] == "websocket_connection_limit_reached"
            assert limit["error"]["code"] == "websocket_connection_limit_reached"
            with pytest.raises(ConnectionClosed):
                ws.recv(timeout=15)
            assert time.monotonic() - start_at < 15
        assert ws.close_code == 1001
    finally:
        stop(p)


@pytest.mark.parametrize("provider", ["custom", "builtin"])
def test_the_real_codex_cli_takes_a_tool_turn_over_the_websocket(
    upstream: Upstream, tmp_path: Path, provider: str
) -> None:
    """Codex 0.171 over one upgraded connection (the access log's 101 and its `WS` turns,
    and no POST: no reconnect attempt, no fallback to HTTP), configured either way: a custom
    provider with `supports_websockets = true`, or the built-in OpenAI provider pointed at
    agent-reach (`openai_base_url`), which speaks WebSocket by default."""
    upstream.clear()
    p = start(agents_config(upstream), tmp_path, upstream)
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI", "AGENT_REACH"))}
        for name in ("home", "codex", "work"):
            (tmp_path / name).mkdir()
        env.update(HOME=str(tmp_path / "home"), CODEX_HOME=str(tmp_path / "codex"))
        env["AGENT_REACH_API_KEY"] = env["OPENAI_API_KEY"] = "unused"
        custom = (
            'model_provider = "agent_reach"\n\n[model_providers.agent_reach]\n'
            f'name = "agent-reach"\nbase_url = "{p.base}/v1"\n'
            'env_key = "AGENT_REACH_API_KEY"\nwire_api = "responses"\n'
            "supports_websockets = true\n"
        )
        builtin = f'openai_base_url = "{p.base}/v1"\n'
        (tmp_path / "codex" / "config.toml").write_text(custom if provider == "custom" else builtin)
        result = codex_exec(env, tmp_path / "work")
        assert_tool_turn(result, upstream)
    finally:
        stop(p)
    log = (tmp_path / "proxy.log").read_text()
    assert "GET /v1/responses 101" in log
    turns = re.findall(r"WS /v1/responses 200 .*provider=toolcall.*", log)
    assert len(turns) >= 2, log[-3000:]
    assert not re.search(r"POST /v1/responses ", log)  # nothing went over plain HTTP


SOCKETS, TURNS = 100, 20


def test_many_sockets_at_once_each_keep_their_own_conversation(proxy: Proxy, up: Upstream) -> None:
    """100 sockets × 20 turns at once (issue 52; bench/agent_session.py times it): no error,
    and each provider request holds its own socket's conversation, whole."""

    async def session(n: int) -> int:
        url = f"ws://127.0.0.1:{proxy.port}/v1/responses"
        headers = {"Authorization": f"Bearer {KEY}"}
        async with aconnect(url, additional_headers=headers, open_timeout=60) as ws:
            previous, items = None, [{"role": "user", "content": f"socket {n}"}]
            for _ in range(TURNS):
                more = {"previous_response_id": previous} if previous else {}
                create = {"type": "response.create", "model": "m", "store": False}
                await ws.send(json.dumps({**create, "tools": [EXEC], "input": items, **more}))
                while (event := json.loads(await asyncio.wait_for(ws.recv(), 60)))["type"] not in (
                    "response.completed",
                    "error",
                ):
                    pass
                assert event["type"] == "response.completed", event
                previous = event["response"]["id"]
                calls = [i for i in event["response"]["output"] if i["type"] == "function_call"]
                items = tool_output(calls[0]) if calls else [{"role": "user", "content": "more"}]
        return n

    async def every() -> list[int]:
        return await asyncio.gather(*(session(n) for n in range(SOCKETS)))

    assert asyncio.run(every()) == list(range(SOCKETS))
    sent = up.bodies("toolcall")
    assert len(sent) == SOCKETS * TURNS
    lengths: dict[str, list[int]] = {}
    for body in sent:
        lengths.setdefault(body["messages"][0]["content"], []).append(len(body["messages"]))
    # each socket's turns, each its own conversation whole (2 items a turn), nobody else's
    assert {k: sorted(v) for k, v in lengths.items()} == {
        f"socket {n}": list(range(1, 2 * TURNS, 2)) for n in range(SOCKETS)
    }


def test_a_stored_response_continues_on_another_socket_and_over_http(
    proxy: Proxy, up: Upstream
) -> None:
    """`store` not false: the response is stored as over HTTP, so a new socket (which holds
    nothing) and `GET /v1/responses/{id}` find it; `store: false` ones live on their socket."""
    with socket(proxy) as ws:
        first = turn(ws, **{**FIRST, "store": True})
        stored = first[-1]["response"]
        ephemeral = turn(ws, **FIRST)[-1]["response"]["id"]
    status, got = proxy.get(f"/v1/responses/{stored['id']}", {"Authorization": f"Bearer {KEY}"})
    assert status == 200
    assert got["id"] == stored["id"]
    (call,) = [i for i in stored["output"] if i["type"] == "function_call"]
    with socket(proxy) as ws:
        later = turn(ws, model="m", previous_response_id=stored["id"], input=tool_output(call))
        assert later[-1]["type"] == "response.completed"
        (gone,) = turn(ws, model="m", previous_response_id=ephemeral, input="hi")
        assert gone["code"] == "previous_response_not_found"
    roles = [m["role"] for m in up.bodies("toolcall")[-1]["messages"]]
    assert roles == ["user", "assistant", "tool"]  # the stored conversation, whole


def test_a_socket_holds_one_of_its_keys_requests_under_way(
    upstream: Upstream, tmp_path: Path
) -> None:
    """`server.max_requests_per_key` holds across sockets: with 1, an open socket is the key's
    one request under way, and a second upgrade is refused 429 until the first closes."""
    p = start(config(upstream, max_requests_per_key=1), tmp_path, upstream, env={"PROXY_KEYS": KEY})
    try:
        with socket(p) as first:
            assert turn(first, **FIRST)[-1]["type"] == "response.completed"
            with pytest.raises(InvalidStatus) as refused, socket(p):
                pass
            assert refused.value.response.status_code == 429
        deadline = time.monotonic() + 10
        while True:  # the closed socket's slot is given back as its session ends
            try:
                with socket(p) as again:
                    assert turn(again, **FIRST)[-1]["type"] == "response.completed"
                break
            except InvalidStatus:
                assert time.monotonic() < deadline
                time.sleep(0.05)
    finally:
        stop(p)


def test_a_second_create_while_one_streams_is_refused_and_the_first_goes_on(
    proxy: Proxy, up: Upstream
) -> None:
    """One response at a time on a socket: the second `response.create` gets the error
    `response_already_in_flight` (409) at once, and the first completes."""
    with socket(proxy, **{"X-Agent-Reach-Fallback-Order": "late"}) as ws:
        ws.send(json.dumps({"type": "response.create", "model": "m", "input": "hi"}))
        assert json.loads(ws.recv(timeout=15))["type"] == "response.created"
        ws.send(json.dumps({"type": "response.create", "model": "m", "input": "again"}))
        seen = events(ws)
        errors = [e for e in seen if e["type"] == "error"]
        assert [(e["status"], e["code"]) for e in errors] == [(409, "response_already_in_flight")]
        if seen[-1]["type"] == "error":
            seen = events(ws)
        assert seen[-1]["type"] == "response.completed"
    assert len(up.bodies("late")) == 1


def test_message_limits_a_word_within_16_mib_and_1009_past_it(proxy: Proxy) -> None:
    """A message over `server.max_body_bytes` (200,000 here) is a 413 error event and the socket
    stays open; one over 16 MiB (OpenAI's frame limit) is closed 1009."""
    with socket(proxy) as ws:
        big = "x" * 300_000
        (over,) = turn(ws, model="m", input=big)
        assert over["status"] == 413
        assert "max_body_bytes" in over["message"]
        assert turn(ws, **FIRST)[-1]["type"] == "response.completed"
        ws.send(json.dumps({"type": "response.create", "model": "m", "input": "y" * (17 << 20)}))
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=15)
    assert ws.close_code == 1009


def test_a_turn_fails_over_to_another_format_and_keeps_the_conversation(
    proxy: Proxy, up: Upstream
) -> None:
    """Turn one is answered by a `format: responses` provider (its own events pass through);
    turn two's route fails over past a dead provider to a chat-only one, which gets the whole
    conversation: turn one's input and answer, then the new input."""
    with socket(proxy) as ws:
        first = turn(ws, **FIRST, agent_reach={"fallback_order": ["native"]})
        assert first[-1]["type"] == "response.completed"
        said = "".join(
            part["text"]
            for item in first[-1]["response"]["output"]
            if item["type"] == "message"
            for part in item["content"]
        )
        second = turn(
            ws,
            model="gpt-5-codex",
            store=False,
            previous_response_id=first[-1]["response"]["id"],
            input=[{"type": "message", "role": "user", "content": "And then?"}],
            agent_reach={"fallback_order": ["dead", "toolcall"]},
        )
        assert second[-1]["type"] == "response.completed"
    (native,) = up.bodies("ok")
    assert native["stream"] is True
    assert "previous_response_id" not in native
    (chat,) = up.bodies("toolcall")
    # instructions are the request's own (a previous response's are not carried, as OpenAI's)
    assert [m["role"] for m in chat["messages"]] == ["user", "assistant", "user"]
    assert chat["messages"][1]["content"] == said
    assert chat["messages"][2]["content"] == "And then?"


def test_without_client_keys_a_web_page_cannot_open_the_socket(
    upstream: Upstream, tmp_path: Path
) -> None:
    """Cross-site WebSocket hijacking: with client auth off, an upgrade from a foreign `Origin`
    is refused (403) as any request of a web page is (protocol §14); the same upgrade without
    one (an agent) is taken."""
    cfg = config(upstream)
    cfg["server"]["api_keys_env"] = None
    p = start(cfg, tmp_path, upstream)
    try:
        url = f"ws://127.0.0.1:{p.port}/v1/responses"
        with pytest.raises(InvalidStatus) as refused, connect(url, origin="https://evil.example"):
            pass
        assert refused.value.response.status_code == 403
        with connect(url, open_timeout=10) as ws:
            assert turn(ws, **FIRST)[-1]["type"] == "response.completed"
    finally:
        stop(p)


def test_an_idle_socket_holds_no_drain_and_a_busy_one_finishes_its_turn(
    upstream: Upstream, tmp_path: Path
) -> None:
    """SIGTERM: an idle socket is closed 1001 at once (the proxy stops in seconds, not after
    its shutdown timeout); one streaming a turn gets the whole turn, then the close."""
    cfg = config(upstream)
    cfg["providers"].append(upstream.provider("slow"))
    p = start(cfg, tmp_path, upstream, env={"PROXY_KEYS": KEY})
    try:
        with socket(p) as idle, socket(p, **{"X-Agent-Reach-Fallback-Order": "slow"}) as busy:
            busy.send(json.dumps({"type": "response.create", "model": "m", "input": "hi"}))
            assert json.loads(busy.recv(timeout=15))["type"] == "response.created"
            began = time.monotonic()  # with the turn under way
            p.proc.send_signal(signal.SIGTERM)
            with pytest.raises(ConnectionClosed):
                idle.recv(timeout=10)
            assert idle.close_code == 1001
            done = events(busy)
            assert done[-1]["type"] == "response.completed"
            with pytest.raises(ConnectionClosed):
                busy.recv(timeout=10)
            assert busy.close_code == 1001
        assert p.proc.wait(20) == 0
        assert time.monotonic() - began < 15  # the shutdown timeout is 300 s
    finally:
        stop(p)
