"""Whose fault it is (protocol §5.1): a request every provider would refuse reaches the client as
the client's error, quickly and once; the policy for blocked content and context windows; and
peers' failover bugs as regression tests. Through the proxy (official OpenAI SDK), the library
and the CLI."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx2 as httpx
import openai
import pytest

from agent_reach import AllProvidersFailed, Router

from ..conftest import ERROR, assert_valid
from ..fakes.upstream import Upstream, proxy_config, refused_url
from .test_cli import config_file, run
from .test_proxy import MSG, PROVIDER_KEY, Proxy, start, stop


def config(up: Upstream, **top: Any) -> dict[str, Any]:
    providers = [
        up.provider(s)
        for s in ("ok", "backup", "blocked", "context", "badreq", "ratelimit", "server")
    ]
    providers += [
        up.provider("context", name="small-window", context_window=8192),
        up.provider("ok", name="smaller", context_window=4096),
        up.provider("backup", name="large", context_window=128000),
        up.provider("noendpoints"),
        up.provider("nofinish"),
        up.provider("ok", name="listed", models=["gpt-test"]),
        {"name": "modelless", "endpoint": up.url("ok")},  # no models, no "*": needs a model
        {"name": "dead", "endpoint": refused_url()},
    ]
    return proxy_config(providers, **top)


@pytest.fixture(scope="module")
def proxy(upstream: Upstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    cfg = config(
        upstream,
        routes={"lenient": {"providers": ["blocked", "backup"], "on_content_blocked": "failover"}},
    )
    cfg["defaults"] = {}  # `modelless` must need a model
    for p in cfg["providers"]:
        if p["name"] not in ("modelless", "listed"):
            p.setdefault("model_map", {"*": ""})
    p = start(cfg, tmp_path_factory.mktemp("fault"), upstream)
    yield p
    stop(p)


class Counted:
    """An OpenAI client with the SDK's own retries on (2), counting what it sends."""

    def __init__(self, proxy: Proxy) -> None:
        self.sent = 0
        self.http = httpx.Client(event_hooks={"request": [self._count]})
        self.client = openai.OpenAI(base_url=proxy.base + "/v1", api_key="k", http_client=self.http)

    def _count(self, request: httpx.Request) -> None:
        self.sent += 1


def order(*names: str) -> dict[str, Any]:
    return {"extra_headers": {"X-Agent-Reach-Fallback-Order": ",".join(names)}}


@pytest.mark.parametrize(
    ("kwargs", "error", "status", "code", "param"),
    [
        (
            {"model": "nobody-serves-this", **order("listed")},
            openai.NotFoundError,
            404,
            "model_not_found",
            None,
        ),
        (
            {"model": "m", **order("blocked", "backup")},
            openai.BadRequestError,
            400,
            "content_filter",
            None,
        ),
        (
            {"model": "m", **order("context")},
            openai.BadRequestError,
            400,
            "context_length_exceeded",
            None,
        ),
        (
            {"model": "m", **order("badreq", "badreq")},
            openai.BadRequestError,
            400,
            "bad_request",
            None,
        ),
    ],
)
def test_the_clients_fault_is_a_4xx_raised_once(
    proxy: Proxy,
    kwargs: dict[str, Any],
    error: type[Exception],
    status: int,
    code: str,
    param: str | None,
) -> None:
    counted = Counted(proxy)
    start_s = time.perf_counter()
    with pytest.raises(error) as info:
        counted.client.chat.completions.create(messages=MSG, **kwargs)
    elapsed = time.perf_counter() - start_s
    counted.client.close()
    counted.http.close()
    assert counted.sent == 1, elapsed  # the SDK did not retry it as a server error
    body = info.value.response.json()  # type: ignore[attr-defined]
    assert_valid(ERROR, body)
    assert (info.value.status_code, body["error"]["code"], body["error"]["param"]) == (
        status,
        code,
        param,
    )  # type: ignore[attr-defined]


def test_an_unserved_model_is_named_with_the_fix(proxy: Proxy) -> None:
    headers = {"X-Agent-Reach-Fallback-Order": "listed"}
    body = {"model": "gpt-6.2-sol", "messages": MSG}
    status, answer = proxy.post("/v1/chat/completions", body, headers)
    assert status == 404
    assert answer["error"]["message"] == (
        "no provider serves the requested model 'gpt-6.2-sol'; to send it to a provider, add to"
        ' that provider `model_map: {"*": <a model it serves>}`, or add a route named after it:'
        " `routes: {'gpt-*': [<providers>]}` (every one of Codex's model names)"
    )
    # Claude Code's names take a route of the family too; another name, one of its own
    for model, route in (("claude-sonnet-4-6", "'claude-*'"), ("my-model", "'my-model'")):
        status, answer = proxy.post("/v1/chat/completions", {**body, "model": model}, headers)
        assert status == 404
        assert f"`routes: {{{route}: [<providers>]}}`" in answer["error"]["message"]


def test_no_model_and_no_default_is_a_400_on_model(proxy: Proxy) -> None:
    headers = {"X-Agent-Reach-Fallback-Order": "modelless"}
    status, body = proxy.post("/v1/chat/completions", {"messages": MSG}, headers)
    assert (status, body["error"]["code"], body["error"]["param"]) == (
        400,
        "model_required",
        "model",
    )
    assert_valid(ERROR, body)


def test_rate_limited_everywhere_is_a_429_with_retry_after(proxy: Proxy) -> None:
    status, body = proxy.post(
        "/v1/chat/completions",
        {"model": "m", "messages": MSG},
        {"X-Agent-Reach-Fallback-Order": "ratelimit"},
    )
    assert status == 429
    assert body["error"]["code"] == "rate_limited"
    assert body["error"]["attempts"][0]["retry_after_s"] == 7
    raw = proxy.client().chat.completions.with_raw_response
    with pytest.raises(openai.RateLimitError) as info:
        raw.create(model="m", messages=MSG, **order("ratelimit"))
    assert info.value.response.headers["Retry-After"] == "7"


def test_anything_else_is_a_502(proxy: Proxy) -> None:
    with pytest.raises(openai.InternalServerError) as info:
        proxy.client().chat.completions.create(model="m", messages=MSG, **order("server", "dead"))
    assert info.value.status_code == 502
    assert info.value.response.json()["error"]["code"] == "all_providers_failed"


def test_a_502_after_every_provider_tells_the_sdks_not_to_retry(proxy: Proxy) -> None:
    # Every provider was tried just now: an SDK's own retries (Claude Code's went on for minutes)
    # would only delay the error. Both SDKs read `x-should-retry`.
    counted = Counted(proxy)  # retries on (2)
    with pytest.raises(openai.InternalServerError) as info:
        counted.client.chat.completions.create(model="m", messages=MSG, **order("server", "dead"))
    counted.client.close()
    counted.http.close()
    assert counted.sent == 1
    assert info.value.response.headers["x-should-retry"] == "false"
    sent = []
    http = httpx.Client(event_hooks={"request": [sent.append]})
    claude = anthropic.Anthropic(base_url=proxy.base, api_key="k", http_client=http)
    with pytest.raises(anthropic.InternalServerError):
        claude.messages.create(model="m", max_tokens=10, messages=MSG, **order("server", "dead"))
    http.close()
    assert len(sent) == 1


def test_a_content_filter_refusal_is_seen_by_no_other_provider(proxy: Proxy) -> None:
    proxy.upstream.clear()
    with pytest.raises(openai.BadRequestError) as info:
        proxy.client().chat.completions.create(
            model="m", messages=MSG, **order("blocked", "backup")
        )
    assert proxy.upstream.bodies("backup") == []  # the only provider that saw it: `blocked`
    attempts = info.value.response.json()["error"]["attempts"]
    assert [a["reason"] for a in attempts] == ["content_blocked"]
    assert "the walk stops here" in attempts[0]["detail"]
    # with `on_content_blocked: failover` on the route, the backup answers
    answer = proxy.client().chat.completions.with_raw_response.create(
        model="m", messages=MSG, extra_headers={"X-Agent-Reach-Route": "lenient"}
    )
    assert answer.parse().choices[0].message.content == "hello from backup"
    assert answer.headers["X-Agent-Reach-Trace"].startswith("blocked:content_blocked:")


def test_after_context_exceeded_only_larger_windows_are_tried(proxy: Proxy) -> None:
    proxy.upstream.clear()
    raw = proxy.client().chat.completions.with_raw_response.create(
        model="m", messages=MSG, **order("small-window", "smaller", "large")
    )
    assert raw.parse().choices[0].message.content == "hello from backup"
    trace = [t.split(":")[:2] for t in raw.headers["X-Agent-Reach-Trace"].split(",")]
    assert trace == [
        ["small-window", "context_exceeded"],
        ["smaller", "context_exceeded"],
        ["large", "ok"],
    ]
    assert proxy.upstream.bodies("ok") == []  # the 4096 window was never called


def test_peers_failover_bugs(proxy: Proxy) -> None:
    # LiteLLM #21377: an HTML 404 "no endpoints" page fails over
    raw = proxy.client().chat.completions.with_raw_response.create(
        model="m", messages=MSG, **order("noendpoints", "backup")
    )
    assert raw.parse().choices[0].message.content == "hello from backup"
    # Portkey #1797: a 200 stream that ends without a finish reason is never a clean end
    stream = proxy.client().chat.completions.create(
        model="m", messages=MSG, stream=True, **order("nofinish", "backup")
    )
    text = []
    with pytest.raises(openai.APIError):
        for chunk in stream:
            text.append(chunk.choices[0].delta.content or "")
    assert "".join(text) == "half an answer"


def test_the_library_says_the_status_too(up: Upstream) -> None:
    cfg = config(up)
    router = Router(cfg, environ={"PROVIDER_KEY": PROVIDER_KEY})
    cases = {
        ("blocked", "backup"): (400, "content_filter"),
        ("context",): (400, "context_length_exceeded"),
        ("ratelimit",): (429, "rate_limited"),
        ("server",): (502, "all_providers_failed"),
    }
    for names, expected in cases.items():
        with pytest.raises(AllProvidersFailed) as info:
            router.chat(
                {"model": "m", "messages": MSG, "agent_reach": {"fallback_order": list(names)}}
            )
        assert (info.value.status, info.value.code) == expected
    with pytest.raises(AllProvidersFailed) as info:
        router.chat({"model": "x", "messages": MSG, "agent_reach": {"fallback_order": ["listed"]}})
    assert info.value.status == 404
    assert info.value.retry_after is None


@pytest.mark.parametrize(
    ("scenario", "fields", "status", "code"),
    [
        ("ok", {"models": ["only-this"]}, 404, "model_not_found"),
        ("blocked", {}, 400, "content_filter"),
        ("context", {}, 400, "context_length_exceeded"),
        ("badreq", {}, 400, "bad_request"),
        ("ratelimit", {}, 429, "rate_limited"),
        ("server", {}, 502, "all_providers_failed"),
    ],
)
def test_the_cli_json_says_the_status(
    up: Upstream, tmp_path: Path, scenario: str, fields: dict[str, Any], status: int, code: str
) -> None:
    cfg = config_file(
        tmp_path, up.provider(scenario, **fields), up.provider("backup", models=["x"])
    )
    env = {"PROVIDER_KEY": PROVIDER_KEY}
    result = run("chat", "--json", "-p", "hi", "--model", "m", config=cfg, env=env)
    assert result.returncode == 1
    error = json.loads(result.stdout)["error"]
    assert (error["status"], error["type"]) == (status, code)
    assert "Traceback" not in result.stderr
