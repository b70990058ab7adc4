"""The Gemini API face of the proxy (`/v1beta/models/{model}:method`, protocol §10.2), driven by
Google's official `google-genai` SDK: whole and streamed answers, token counts and a
function-calling round through a dead and a 401 provider to chat providers, every answer parsed
into the SDK's own types; errors as the SDK's `APIError`; a `format: gemini` provider gets the
request as it came and its answer comes back as it is."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google import genai
from google.genai import errors, types

from ..agents import AGENT_CLIENT_KEY
from ..fakes.upstream import GEMINI_SIGNATURE, TOOL_WORD, Upstream, proxy_config, refused_url
from .test_proxy import PROVIDER_KEY, Proxy, start, stop

KEY = "AIza-" + AGENT_CLIENT_KEY  # Gemini clients check a key's look: it starts with AIza
SHELL = types.FunctionDeclaration(
    name="run_shell_command",
    description="Runs a shell command.",
    parameters=types.Schema(
        type=types.Type.OBJECT,
        properties={"command": types.Schema(type=types.Type.STRING)},
        required=["command"],
    ),
)


@pytest.fixture(scope="module")
def proxy(upstream: Upstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    providers = [
        {"name": "dead", "endpoint": refused_url()},
        upstream.provider("auth"),
        upstream.provider("ok"),
        upstream.provider("toolcall"),
        upstream.provider("gemini", "gemini"),
        upstream.provider("badgemini", "gemini", endpoint=upstream.url("auth", "gemini")),
    ]
    config = proxy_config(
        providers,
        fallback_order=["dead", "auth", "ok"],
        routes={
            "tools": {"providers": ["dead", "auth", "toolcall"]},
            "native": {"providers": ["dead", "badgemini", "gemini"]},
            "down": {"providers": ["dead", "auth"]},
        },
        server={"api_keys_env": "PROXY_KEYS"},
    )
    p = start(config, tmp_path_factory.mktemp("gemini"), upstream, env={"PROXY_KEYS": KEY})
    yield p
    assert stop(p) == 0
    log = (Path(p.proc.args[2]).parent / "proxy.log").read_text()  # type: ignore[index]
    assert "Traceback" not in log
    assert PROVIDER_KEY not in log
    assert KEY not in log


_CLIENTS: list[genai.Client] = []  # kept: a client closes its connections when collected


def client(proxy: Proxy, key: str = KEY, route: str | None = None) -> genai.Client:
    headers = {"X-Agent-Reach-Route": route} if route else None
    options = types.HttpOptions(base_url=proxy.base, headers=headers)
    _CLIENTS.append(genai.Client(api_key=key, http_options=options))
    return _CLIENTS[-1]


def test_generate_content_fails_over_and_parses_into_the_sdks_types(proxy: Proxy) -> None:
    answer = client(proxy).models.generate_content(model="gemini-2.5-flash", contents="hi")
    assert isinstance(answer, types.GenerateContentResponse)
    assert answer.text == "hello from ok"
    candidate = (answer.candidates or [])[0]
    assert candidate.finish_reason == types.FinishReason.STOP
    assert answer.usage_metadata is not None
    assert answer.usage_metadata.prompt_token_count == 5
    assert answer.usage_metadata.candidates_token_count == 3
    assert answer.usage_metadata.total_token_count == 8
    sent = proxy.upstream.bodies("ok")[-1]
    assert sent["messages"] == [{"role": "user", "content": "hi"}]


def test_a_stream_parses_chunk_by_chunk(proxy: Proxy) -> None:
    chunks = list(
        client(proxy).models.generate_content_stream(
            model="gemini-2.5-flash",
            contents="hi",
            config=types.GenerateContentConfig(
                system_instruction="Be brief.", temperature=0.2, max_output_tokens=50
            ),
        )
    )
    assert all(isinstance(c, types.GenerateContentResponse) for c in chunks)
    assert "".join(c.text or "" for c in chunks) == "hello from ok"
    last = (chunks[-1].candidates or [])[0]
    assert last.finish_reason == types.FinishReason.STOP
    sent = proxy.upstream.bodies("ok")[-1]
    assert sent["messages"][0] == {"role": "system", "content": "Be brief."}
    assert sent["temperature"] == 0.2
    assert sent["max_tokens"] == 50
    assert sent["stream_options"] == {"include_usage": True}


def test_count_tokens_is_answered_locally(proxy: Proxy) -> None:
    before = len(proxy.upstream.received)
    short = client(proxy).models.count_tokens(model="gemini-2.5-flash", contents="hello")
    long = client(proxy).models.count_tokens(model="gemini-2.5-flash", contents="hello " * 400)
    assert short.total_tokens is not None
    assert long.total_tokens is not None
    assert 1 <= short.total_tokens < 10
    assert 300 < long.total_tokens < 800
    assert len(proxy.upstream.received) == before  # no provider was asked


def test_a_function_calling_round_through_a_chat_provider(proxy: Proxy) -> None:
    gem = client(proxy, route="tools")
    config = types.GenerateContentConfig(tools=[types.Tool(function_declarations=[SHELL])])
    asked = types.Content(role="user", parts=[types.Part(text="Run echo and say what it printed")])
    first = gem.models.generate_content(model="gemini-2.5-pro", contents=[asked], config=config)
    calls = first.function_calls or []
    assert [c.name for c in calls] == ["run_shell_command"]
    assert calls[0].args == {"command": f"echo {TOOL_WORD}"}
    sent = proxy.upstream.bodies("toolcall")[-1]
    assert sent["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "run_shell_command",
                "parameters": {
                    "type": "object",
                    "properties": {"command": {"type": "string"}},
                    "required": ["command"],
                },
                "description": "Runs a shell command.",
            },
        }
    ]
    model_turn = (first.candidates or [])[0].content
    assert model_turn is not None
    result = types.Part.from_function_response(
        name="run_shell_command", response={"output": TOOL_WORD}
    )
    contents = [asked, model_turn, types.Content(role="user", parts=[result])]
    second = gem.models.generate_content(model="gemini-2.5-pro", contents=contents, config=config)
    assert second.text == f"The command printed: {TOOL_WORD}"
    sent = proxy.upstream.bodies("toolcall")[-1]["messages"]
    call_id = sent[1]["tool_calls"][0]["id"]
    assert sent[2] == {
        "role": "tool",
        "tool_call_id": call_id,
        "content": json.dumps({"output": TOOL_WORD}, separators=(",", ":")),
    }


def test_a_streamed_function_call_comes_whole(proxy: Proxy) -> None:
    config = types.GenerateContentConfig(tools=[types.Tool(function_declarations=[SHELL])])
    chunks = list(
        client(proxy, route="tools").models.generate_content_stream(
            model="gemini-2.5-pro", contents="run echo", config=config
        )
    )
    calls = [c for chunk in chunks for c in chunk.function_calls or []]
    assert [(c.name, c.args) for c in calls] == [
        ("run_shell_command", {"command": f"echo {TOOL_WORD}"})
    ]
    assert chunks[-1].usage_metadata is not None
    assert chunks[-1].usage_metadata.total_token_count == 30  # the usage it was asked for


def test_a_gemini_provider_gets_the_request_as_it_came(proxy: Proxy) -> None:
    proxy.upstream.clear()
    signed = types.Part(text="Earlier thought.", thought=True, thought_signature=b"own-sig")
    contents = [
        types.Content(role="user", parts=[types.Part(text="hi")]),
        types.Content(role="model", parts=[signed, types.Part(text="Hello.")]),
        types.Content(role="user", parts=[types.Part(text="again")]),
    ]
    answer = client(proxy, route="native").models.generate_content(
        model="gemini-2.5-pro", contents=contents
    )
    assert answer.text == "hello from gemini"
    parts = (answer.candidates or [])[0].content.parts or []  # type: ignore[union-attr]
    assert parts[0].thought is True
    assert parts[0].thought_signature == __import__("base64").b64decode(GEMINI_SIGNATURE)
    sent = proxy.upstream.bodies("gemini")[-1]
    assert sent["contents"][1]["parts"][0]["thoughtSignature"] == "b3duLXNpZw=="
    stream = list(
        client(proxy, route="native").models.generate_content_stream(
            model="gemini-2.5-pro", contents="hi"
        )
    )
    assert "".join(c.text or "" for c in stream) == "hello from gemini"


def raw(proxy: Proxy, path: str, body: Any, key: str = KEY) -> tuple[int, Any]:
    req = urllib.request.Request(
        proxy.base + path,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "x-goog-api-key": key},
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_a_stream_without_alt_sse_is_one_json_array(proxy: Proxy) -> None:
    body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    status, answer = raw(proxy, "/v1beta/models/gemini-2.5-flash:streamGenerateContent", body)
    assert status == 200
    assert isinstance(answer, list)
    assert len(answer) >= 2
    text = "".join(
        p.get("text", "") for r in answer for p in r["candidates"][0]["content"]["parts"]
    )
    assert text == "hello from ok"
    assert answer[-1]["candidates"][0]["finishReason"] == "STOP"
    status, answer = raw(proxy, "/v1/models/gemini-2.5-flash:generateContent", body)
    assert status == 200
    assert answer["candidates"][0]["content"]["parts"] == [{"text": "hello from ok"}]


def test_errors_come_as_the_sdks_api_errors(proxy: Proxy) -> None:
    hot = types.GenerateContentConfig(temperature=5)
    with pytest.raises(errors.ClientError) as bad:
        client(proxy).models.generate_content(model="m", contents="hi", config=hot)
    assert bad.value.code == 400
    assert bad.value.status == "INVALID_ARGUMENT"
    assert "'generationConfig.temperature' must be a number from 0 to 2" in str(bad.value)
    with pytest.raises(errors.ClientError) as key:
        client(proxy, key="AIza-wrong").models.generate_content(model="m", contents="hi")
    assert key.value.code == 401
    assert key.value.status == "UNAUTHENTICATED"
    with pytest.raises(errors.APIError) as down:
        client(proxy, route="down").models.generate_content(model="m", contents="hi")
    assert down.value.code == 502
    assert down.value.details["error"]["status"] == "UNAVAILABLE"
    reasons = [a["reason"] for a in down.value.details["error"]["attempts"]]
    assert reasons == ["connect_failed", "auth_failed"]
    status, body = raw(proxy, "/v1beta/models/m:predict", {"instances": []})  # no such method
    assert status == 404
    assert body["error"]["status"] == "NOT_FOUND"


def test_the_key_may_come_in_the_query(proxy: Proxy) -> None:
    body = {"contents": [{"parts": [{"text": "hi"}]}]}
    req = urllib.request.Request(
        f"{proxy.base}/v1beta/models/m:generateContent?key={KEY}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert json.loads(resp.read())["candidates"][0]["content"]["parts"][0]["text"] == (
            "hello from ok"
        )


def test_models_are_listed_as_gemini_lists_them(proxy: Proxy) -> None:
    req = urllib.request.Request(f"{proxy.base}/v1beta/models", headers={"x-goog-api-key": KEY})
    with urllib.request.urlopen(req, timeout=10) as resp:
        listed = json.loads(resp.read())["models"]
    names = {m["name"] for m in listed}
    assert {"models/tools", "models/native", "models/down"} <= names
    assert all("generateContent" in m["supportedGenerationMethods"] for m in listed)
