"""The proxy (`agent-reach serve`) as a subprocess, driven by the official OpenAI SDK."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from ..conftest import CHUNK, COMPLETION, ERROR, assert_valid
from ..fakes.upstream import Upstream, proxy_config, refused_url

BIN = str(Path(sys.executable).parent / "agent-reach")
PROVIDER_KEY = "sk-provider-77aa88bb99cc-SECRET"
MSG = [{"role": "user", "content": "hi"}]

# One provider per upstream behaviour; each test picks its chain with a header.
SCENARIOS = [
    "ok",
    "backup",
    "auth",
    "ratelimit",
    "server",
    "badreq",
    "html",
    "brokenjson",
    "error200",
    "empty",
    "model404",
    "hang",
    "streamerr",
    "streamempty",
    "streamcut",
    "slow",
]


class Proxy:
    def __init__(self, proc: subprocess.Popen[str], port: int, upstream: Upstream) -> None:
        self.proc, self.port, self.upstream = proc, port, upstream
        self.clients: list[openai.OpenAI] = []
        self.banner = ""  # the line `serve` printed when it started

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client(self, key: str = "unused", **kw: Any) -> openai.OpenAI:
        client = openai.OpenAI(base_url=self.base + "/v1", api_key=key, max_retries=0, **kw)
        self.clients.append(client)
        return client

    def aclient(self, key: str = "unused") -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=self.base + "/v1", api_key=key, max_retries=0)

    def post(self, path: str, body: Any, headers: dict[str, str] | None = None) -> tuple[int, Any]:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        req = urllib.request.Request(
            self.base + path,
            data=data,
            headers={"Content-Type": "application/json", **(headers or {})},
        )
        return _fetch(req)

    def get(self, path: str, headers: dict[str, str] | None = None) -> tuple[int, Any]:
        return _fetch(urllib.request.Request(self.base + path, headers=headers or {}))


def _fetch(req: urllib.request.Request) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            raw = resp.read()
            status = resp.status
    except urllib.error.HTTPError as exc:
        raw, status = exc.read(), exc.code
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode()


def start(
    config: dict[str, Any],
    tmp: Path,
    upstream: Upstream,
    *args: str,
    env: dict[str, str] | None = None,
    prefix: tuple[str, ...] = (),
) -> Proxy:
    """`agent-reach serve` with `config` (run under `prefix`, e.g. `prlimit …`, if given)."""
    path = tmp / "proxy.yaml"
    path.write_text(yaml.safe_dump(config))
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_REACH")}
    full_env.update({"PROVIDER_KEY": PROVIDER_KEY, "HOME": str(tmp)}, **(env or {}))
    with (tmp / "proxy.log").open("a") as log:
        proc = subprocess.Popen(
            [*prefix, BIN, "--config", str(path), "serve", "--port", "0", *args],
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            env=full_env,
        )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert "serving on http://" in line, (line, (tmp / "proxy.log").read_text())
    port = int(line.split("http://", 1)[1].split()[0].rsplit(":", 1)[1])
    proxy = Proxy(proc, port, upstream)
    proxy.banner = line
    return proxy


def stop(proxy: Proxy) -> int:
    for client in proxy.clients:
        client.close()
    if proxy.proc.poll() is None:
        proxy.proc.send_signal(signal.SIGTERM)
    code = proxy.proc.wait(15)
    assert proxy.proc.stdout is not None
    proxy.proc.stdout.close()
    return code


def base_config(upstream: Upstream, **top: Any) -> dict[str, Any]:
    providers = [
        {
            "name": s,
            "endpoint": upstream.url(s),
            "api_key_env": "PROVIDER_KEY",
            "timeout": {"connect": 500, "read": 400 if s == "hang" else 3000},
        }
        for s in SCENARIOS
    ]
    providers.append(
        {
            "name": "ollama",
            "endpoint": upstream.url("ollama", "ollama"),
            "format": "ollama",
            "auth_header": "",
            "models": ["qwen2:72b"],
        }
    )
    providers.append({"name": "dead", "endpoint": refused_url()})
    top.setdefault("server", {"max_body_bytes": 20000})
    return proxy_config(providers, fallback_order=["ok", "backup"], **top)


@pytest.fixture(scope="module")
def proxy(upstream: Upstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    p = start(base_config(upstream), tmp_path_factory.mktemp("proxy"), upstream)
    yield p
    stop(p)


def chain(*names: str) -> dict[str, Any]:
    return {"extra_headers": {"X-Agent-Reach-Fallback-Order": ",".join(names)}}


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        ("dead", "connect_failed"),
        ("hang", "timeout"),
        ("server", "server_error"),
        ("auth", "auth_failed"),
        ("ratelimit", "rate_limited"),
        ("badreq", "bad_request"),
        ("html", "schema_mismatch"),
        ("brokenjson", "schema_mismatch"),
        ("error200", "schema_mismatch"),
        ("empty", "schema_mismatch"),
        ("model404", "model_unavailable"),
    ],
)
def test_sdk_gets_the_backup_answer_for_every_failure(proxy: Proxy, bad: str, reason: str) -> None:
    raw = proxy.client().chat.completions.with_raw_response.create(
        model="gpt-test", messages=MSG, **chain(bad, "backup")
    )
    completion = raw.parse()
    assert completion.choices[0].message.content == "hello from backup"
    assert raw.headers["X-Agent-Reach-Provider"] == "backup"
    trace = raw.headers["X-Agent-Reach-Trace"].split(",")
    assert trace[0].startswith(f"{bad}:{reason}:")
    assert trace[1].startswith("backup:ok:")
    assert_valid(COMPLETION, json.loads(raw.http_response.text))


def test_provider_key_is_sent_and_client_key_never_forwarded(proxy: Proxy) -> None:
    proxy.upstream.clear()
    proxy.client(key="client-proxy-key").chat.completions.create(model="m", messages=MSG)
    got = proxy.upstream.received[-1]
    assert got.headers["Authorization"] == f"Bearer {PROVIDER_KEY}"
    assert "client-proxy-key" not in json.dumps(got.headers)


async def test_async_client_stream_and_non_stream(proxy: Proxy) -> None:
    client = proxy.aclient()
    result = await client.chat.completions.create(model="m", messages=MSG, **chain("dead", "ok"))
    assert result.choices[0].message.content == "hello from ok"
    stream = await client.chat.completions.create(
        model="m", messages=MSG, stream=True, **chain("dead", "ok")
    )
    text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert text == "hello from ok"
    await client.close()


@pytest.mark.parametrize(
    "bad", ["dead", "hang", "auth", "streamerr", "streamempty", "html", "server"]
)
def test_stream_failure_before_first_chunk_is_invisible(proxy: Proxy, bad: str) -> None:
    with proxy.client().chat.completions.with_streaming_response.create(
        model="m", messages=MSG, stream=True, **chain(bad, "backup")
    ) as resp:
        assert resp.headers["X-Agent-Reach-Provider"] == "backup"
        lines = [line for line in resp.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]
    for c in chunks:
        assert_valid(CHUNK, c)
    assert (
        "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
        == "hello from ok"
    )


def test_stream_cut_after_first_chunk_ends_with_an_error_event(proxy: Proxy) -> None:
    stream = proxy.client().chat.completions.create(
        model="m", messages=MSG, stream=True, **chain("streamcut", "backup")
    )
    got = []
    with pytest.raises(openai.APIError) as info:
        for c in stream:
            got.append(c.choices[0].delta.content or "")
    assert "".join(got) == "partial answer"
    assert "failed mid-stream" in info.value.message
    # the raw event is a schema-valid error body
    with proxy.client().chat.completions.with_streaming_response.create(
        model="m", messages=MSG, stream=True, **chain("streamcut")
    ) as resp:
        last = [line for line in resp.iter_lines() if line][-1]
    body = json.loads(last.removeprefix("data: "))
    assert_valid(ERROR, body)
    assert body["error"]["type"] == "stream_interrupted"
    assert [a["reason"] for a in body["error"]["attempts"]] == ["ok", "server_error"]


def test_ollama_ndjson_arrives_as_openai_sse(proxy: Proxy) -> None:
    stream = proxy.client().chat.completions.create(
        model="qwen2:72b", messages=MSG, stream=True, **chain("dead", "ollama")
    )
    chunks = list(stream)
    assert (
        "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        == "hello from ollama"
    )
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_all_failed_is_a_502_with_attempts(proxy: Proxy) -> None:
    with pytest.raises(openai.APIStatusError) as info:
        proxy.client().chat.completions.create(model="m", messages=MSG, **chain("dead", "server"))
    assert info.value.status_code == 502
    body = info.value.response.json()
    assert_valid(ERROR, body)
    assert body["error"]["type"] == "all_providers_failed"
    assert [a["reason"] for a in body["error"]["attempts"]] == ["connect_failed", "server_error"]
    with pytest.raises(openai.APIStatusError) as stream_info:
        proxy.client().chat.completions.create(
            model="m", messages=MSG, stream=True, **chain("dead")
        )
    assert stream_info.value.status_code == 502


def test_route_header_and_body_extension(proxy: Proxy) -> None:
    raw = proxy.client().chat.completions.with_raw_response.create(
        model="m", messages=MSG, extra_headers={"X-Agent-Reach-Route": "backup"}
    )
    assert raw.headers["X-Agent-Reach-Provider"] == "backup"
    body = proxy.client().chat.completions.create(
        model="m", messages=MSG, extra_body={"agent_reach": {"fallback_order": ["dead", "backup"]}}
    )
    assert body.choices[0].message.content == "hello from backup"


def test_request_errors_are_openai_shaped(proxy: Proxy) -> None:
    status, body = proxy.post("/v1/chat/completions", b"{not json")
    assert status == 400
    assert_valid(ERROR, body)
    status, body = proxy.post(
        "/v1/chat/completions", {"messages": MSG}, {"X-Agent-Reach-Fallback-Order": "nope"}
    )
    assert status == 400
    assert "nope" in body["error"]["message"]
    status, body = proxy.post("/v1/chat/completions", {"messages": "hello"})
    assert status == 400
    status, body = proxy.post("/v1/chat/completions", {"messages": MSG, "pad": "x" * 30000})
    assert status == 413
    assert_valid(ERROR, body)
    status, body = proxy.get("/v1/nothing-here")
    assert status == 404
    assert_valid(ERROR, body)
    with pytest.raises(openai.BadRequestError):
        proxy.client().chat.completions.create(model="m", messages=MSG, **chain("nope"))


def test_models_and_healthz(proxy: Proxy) -> None:
    ids = [m.id for m in proxy.client().models.list()]
    assert "qwen2:72b" in ids
    assert proxy.get("/healthz") == (200, {"status": "ok"})


def test_metrics_parse_and_move_on_failover(proxy: Proxy) -> None:
    def sample(name: str, **labels: str) -> float:
        _, text = proxy.get("/metrics")
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                    return float(s.value)
        return 0.0

    before = sample("agent_reach_failovers_total", from_provider="server", to_provider="backup")
    attempts = sample("agent_reach_attempts_total", provider="server", reason="server_error")
    proxy.client().chat.completions.create(model="m", messages=MSG, **chain("server", "backup"))
    assert (
        sample(
            "agent_reach_failovers_total",
            from_provider="server",
            to_provider="backup",
            reason="server_error",
        )
        == before + 1
    )
    assert (
        sample("agent_reach_attempts_total", provider="server", reason="server_error")
        == attempts + 1
    )
    assert sample("agent_reach_requests_total", route="custom", outcome="ok") >= 1
    assert sample("agent_reach_attempt_seconds_count", provider="backup") >= 1
    assert sample("agent_reach_provider_up", provider="backup") == 1
    assert sample("agent_reach_provider_up", provider="server") == 0


def test_status_endpoint(proxy: Proxy) -> None:
    proxy.client().chat.completions.create(model="m", messages=MSG, **chain("backup"))
    status, body = proxy.get("/agent-reach/v1/status")
    assert status == 200
    rows = {p["provider"]: p for p in body["providers"]}
    assert rows["backup"]["success_rate"] == 1.0
    assert rows["backup"]["latency_ms"]["p50"] > 0
    assert rows["backup"]["circuit"]["state"] == "closed"
    assert PROVIDER_KEY not in json.dumps(body)


def test_client_disconnect_cancels_the_upstream_attempt(proxy: Proxy) -> None:
    proxy.upstream.clear()
    slow = {"X-Agent-Reach-Fallback-Order": "hang"}
    client = proxy.client(timeout=0.15)
    with pytest.raises(openai.APITimeoutError):
        client.chat.completions.create(model="m", messages=MSG, extra_headers=slow)
    deadline = time.time() + 2
    while not proxy.upstream.cancelled and time.time() < deadline:
        time.sleep(0.01)
    assert proxy.upstream.cancelled == ["hang"]


# -- step mode: the seed's curl flow ----------------------------------------------------------


def test_step_mode_seed_flow(upstream: Upstream, tmp_path: Path) -> None:
    config = {
        "version": "0.3.2",
        "health": {"mode": "off"},
        "state": "memory://",
        "providers": [
            {
                "name": "deepseek-official",
                "endpoint": upstream.url("ok"),
                "api_key_env": "DEEPSEEK_API_KEY",
                "models": ["deepseek-chat"],
            },
            {"name": "zhipu-api", "endpoint": upstream.url("backup"), "models": ["glm-4-flash"]},
            {
                "name": "local-ollama",
                "endpoint": upstream.url("ollama", "ollama"),
                "format": "ollama",
                "auth_header": "",
            },
        ],
        "routes": {"cloud": ["zhipu-api", "deepseek-official"]},
    }
    proxy = start(config, tmp_path, upstream)
    try:
        status, body = proxy.post(
            "/agent-reach/v1/route", {"provider": "deepseek-official", "prompt": "Hello"}
        )
        assert status == 200
        assert body == {
            "status": "failed",
            "provider": "deepseek-official",
            "reason": "auth_failed",
            "detail": "DEEPSEEK_API_KEY is not set",
            "next_route": "zhipu-api",
        }
        status, body = proxy.post(
            "/agent-reach/v1/route?route=zhipu-api",
            {"provider": "deepseek-official", "prompt": "Hello"},
        )
        assert status == 200
        assert body["choices"][0]["message"]["content"] == "hello from backup"
        assert body["agent_reach"]["status"] == "ok"
        assert body["agent_reach"]["provider"] == "zhipu-api"
        assert isinstance(body["agent_reach"]["ms"], int)
        assert upstream.bodies("backup")[-1]["model"] == "glm-4-flash"  # first of its models
        assert_valid(COMPLETION, {k: v for k, v in body.items() if k != "agent_reach"})
        # no model and no models: model_unavailable; the last provider has no next
        status, body = proxy.post("/agent-reach/v1/route?route=local-ollama", {"prompt": "Hello"})
        assert (body["reason"], body["next_route"]) == ("model_unavailable", None)
        # a route: its first provider, then its second
        status, body = proxy.post("/agent-reach/v1/route?route=cloud", {"prompt": "Hello"})
        assert body["agent_reach"]["provider"] == "zhipu-api"
        # neither: the first of the default order; a full OpenAI request works too
        status, body = proxy.post("/agent-reach/v1/route", {"messages": MSG})
        assert body["provider"] == "deepseek-official"
        assert body["next_route"] == "zhipu-api"
        assert proxy.post("/agent-reach/v1/route?route=nope", {"prompt": "x"})[0] == 404
        assert proxy.post("/agent-reach/v1/route", b"[1,2]")[0] == 400
        assert proxy.post("/agent-reach/v1/route", {"prompt": 5})[0] == 400
    finally:
        assert stop(proxy) == 0


def test_a_named_provider_is_tried_even_with_its_circuit_open(
    upstream: Upstream, tmp_path: Path
) -> None:
    """Protocol §4.2: remembered state alone never refuses a request, in step mode and for a
    one-provider fallback_order too."""
    config = {
        "health": {"mode": "off"},
        "state": "memory://",
        "circuit": {"failures": 1, "cooldown_s": 600},
        "defaults": {"retries": 0},
        "providers": [{"name": "down", "endpoint": upstream.url("server")}],
    }
    upstream.clear()
    proxy = start(config, tmp_path, upstream)
    try:
        step = {"provider": "down", "prompt": "Hi", "model": "m"}
        first = proxy.post("/agent-reach/v1/route", step)[1]
        assert first["reason"] == "server_error"  # and its circuit is now open
        again = proxy.post("/agent-reach/v1/route", step)[1]
        assert again["reason"] == "server_error"  # tried, not refused as circuit_open
        headers = {"X-Agent-Reach-Fallback-Order": "down"}
        status, body = proxy.post("/v1/chat/completions", {"model": "m", "messages": MSG}, headers)
        assert status == 502
        attempts = [(a["reason"], a["last_resort"]) for a in body["error"]["attempts"]]
        assert attempts == [("circuit_open", False), ("server_error", True)]
        assert len(upstream.bodies("server")) == 3
    finally:
        assert stop(proxy) == 0


# -- serving: auth, background health, shutdown, workers --------------------------------------


def test_client_auth(upstream: Upstream, tmp_path: Path) -> None:
    proxy = start(base_config(upstream), tmp_path, upstream, env={"AGENT_REACH_API_KEYS": "k1, k2"})
    try:
        with pytest.raises(openai.AuthenticationError):
            proxy.client(key="wrong").chat.completions.create(model="m", messages=MSG)
        assert proxy.client(key="k2").chat.completions.create(model="m", messages=MSG).choices
        status, body = proxy.get("/v1/models")
        assert status == 401
        assert_valid(ERROR, body)
        assert proxy.get("/healthz")[0] == 200
        assert proxy.get("/metrics", {"Authorization": "Bearer k1"})[0] == 200
    finally:
        stop(proxy)


def test_background_health_probes_while_serving(upstream: Upstream, tmp_path: Path) -> None:
    upstream.clear()
    config = base_config(upstream, health={"mode": "background", "ttl_s": 0.2})
    config["providers"] = [p for p in config["providers"] if p["name"] in ("ok", "backup")]
    proxy = start(config, tmp_path, upstream)
    try:
        time.sleep(1.0)
        assert upstream.health_hits.count("ok") >= 3  # no request was sent; it probes anyway
        _status, body = proxy.get("/agent-reach/v1/status")
        assert {p["provider"]: p["health"]["ok"] for p in body["providers"]} == {
            "ok": True,
            "backup": True,
        }
    finally:
        stop(proxy)


def test_sigterm_drains_in_flight_requests(upstream: Upstream, tmp_path: Path) -> None:
    import threading

    proxy = start(base_config(upstream), tmp_path, upstream)
    results: list[str] = []

    def call() -> None:
        r = proxy.client().chat.completions.create(model="m", messages=MSG, **chain("slow"))
        results.append(r.choices[0].message.content or "")

    thread = threading.Thread(target=call)
    thread.start()
    time.sleep(0.25)  # the request is in flight (the provider takes 0.6 s)
    proxy.proc.send_signal(signal.SIGTERM)
    thread.join(10)
    assert results == ["hello from slow"]
    assert proxy.proc.wait(10) == 0  # it drained, then exited cleanly
    stop(proxy)


def test_workers_share_one_port(upstream: Upstream, tmp_path: Path) -> None:
    shared = base_config(upstream, state=f"sqlite:///{tmp_path}/state.db")  # workers share it
    proxy = start(shared, tmp_path, upstream, "--workers", "2")
    try:
        deadline = time.time() + 10
        while time.time() < deadline:  # the workers start after the parent's line
            try:
                if proxy.get("/healthz")[0] == 200:
                    break
            except OSError:
                time.sleep(0.05)
        client = proxy.client()
        answers = {
            client.chat.completions.create(model="m", messages=MSG).choices[0].message.content
            for _ in range(20)
        }
        assert answers == {"hello from ok"}
    finally:
        assert stop(proxy) == 0


def test_sdk_gets_the_backup_for_skips_and_hook_errors(upstream: Upstream, tmp_path: Path) -> None:
    hooks = tmp_path / "hooks.py"
    hooks.write_text("def broken(raw):\n    raise ValueError('no')\n")
    config = {
        "version": "0.3.2",
        "health": {"mode": "cached", "ttl_s": 60},
        "state": "memory://",
        "circuit": {"failures": 1, "cooldown_s": 60},
        "providers": [
            {"name": "sick", "endpoint": upstream.url("html-health")},
            {
                "name": "hooked",
                "endpoint": upstream.url("ok"),
                "post_process_hook": f"{hooks}:broken",
            },
            {
                "name": "free",
                "endpoint": upstream.url("ok"),
                "metadata": {"rate_limit": "1req/day"},
            },
            {"name": "flaky", "endpoint": upstream.url("server")},
            {"name": "backup", "endpoint": upstream.url("backup")},
        ],
    }
    proxy = start(config, tmp_path, upstream)
    try:
        client = proxy.client()
        expected = {
            "sick": "unhealthy",
            "hooked": "hook_error",
            "free": "quota_exhausted",
            "flaky": "circuit_open",
        }
        for name in ("free", "flaky"):  # use up the budget, open the circuit
            client.chat.completions.create(model="gpt-test", messages=MSG, **chain(name, "backup"))
        for name, reason in expected.items():
            raw = client.chat.completions.with_raw_response.create(
                model="gpt-test", messages=MSG, **chain(name, "backup")
            )
            assert raw.parse().choices[0].message.content == "hello from backup"
            assert raw.headers["X-Agent-Reach-Trace"].split(",")[0].startswith(f"{name}:{reason}:")
            stream = client.chat.completions.create(
                model="gpt-test", messages=MSG, stream=True, **chain(name, "backup")
            )
            assert (
                "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
                == "hello from ok"
            )
    finally:
        stop(proxy)
