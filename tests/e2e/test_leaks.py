"""Issue 40's smaller leaks (items 7-17) and `report` on Redis, each the way a user meets it:
the CLI and the proxy as subprocesses, against the loopback fakes (`tests/fakes/upstream.py`,
`tests/connect_proxy.py`) and a real redis-server."""

from __future__ import annotations

import base64
import json
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml
from prometheus_client.parser import text_string_to_metric_families

from ..connect_proxy import ConnectProxy
from ..fakes.upstream import Upstream, proxy_config, refused_url
from ..services import free_port
from .test_cli import config_file, p, run
from .test_proxy import MSG, PROVIDER_KEY, Proxy, start, stop

BIN = str(Path(sys.executable).parent / "agent-reach")
TOKEN = "tok-in-the-endpoint-5b7e1f0c"  # what `${ERNIE_TOKEN}` puts in an endpoint's query
PASSWORD = "pr0xy-pass-9d2c4a"  # an upstream proxy's


def wait_for(check: Callable[[], Any], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def metric(proxy: Proxy, name: str) -> float:
    _, text = proxy.get("/metrics")
    return sum(
        s.value
        for f in text_string_to_metric_families(text)
        if f.name == name
        for s in f.samples
        if s.name.endswith("_total")
    )


# -- 7. `${VAR}` values in config errors, however they are escaped ---------------------------


@pytest.mark.parametrize(
    "value",
    [
        "sk\\SECRET-7f3a9c\\backslash",
        "sk'SECRET-7f3a9c\"both",
        "sk\tSECRET-7f3a9c\x01control",
        "sk'SECRET-7f3a9c-single",
        "sk-SECRET-7f3a9c-ünï",
    ],
)
def test_a_config_error_never_shows_a_variable_in_any_escaping(tmp_path: Path, value: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("providers:\n  - {name: a, endpoint: 'htps://x.example/v1?key=${MY_KEY}'}\n")
    done = run("config", "validate", str(path), env={"MY_KEY": value})
    assert done.returncode == 2
    assert "field 'endpoint'" in done.stderr
    assert "key=${MY_KEY}" in done.stderr
    assert "SECRET-7f3a9c" not in done.stdout + done.stderr


# -- 8. a webhook's URL in the log of a failed delivery --------------------------------------


def test_a_failed_webhook_is_logged_by_its_origin_only(up: Upstream, tmp_path: Path) -> None:
    secret = "hook-secret-3c8d1e"
    port = free_port()  # nothing listens: every delivery fails
    hook = f"http://127.0.0.1:{port}/services/${{HOOK_SECRET}}?token=${{HOOK_SECRET}}"
    alert = {"type": "webhook", "url": hook, "events": ["all_providers_failed"]}
    config = proxy_config([{"name": "dead", "endpoint": refused_url()}], alerts=[alert])
    proxy = start(config, tmp_path, up, env={"HOOK_SECRET": secret})
    log = tmp_path / "proxy.log"
    try:
        status, _ = proxy.post("/v1/chat/completions", {"model": "m", "messages": MSG})
        assert status == 502
        wait_for(lambda: "webhook alert" in log.read_text())
    finally:
        stop(proxy)
    text = log.read_text()
    assert f"webhook at http://127.0.0.1:{port}: connection refused" in text
    assert secret not in text


# -- 9. `run` gives the program no secret the config names -----------------------------------

DUMP_ENV = "import json, os, sys; open(sys.argv[1], 'w').write(json.dumps(dict(os.environ)))"


def test_run_gives_the_program_no_secret_of_the_config(up: Upstream, tmp_path: Path) -> None:
    secrets = {
        "REDIS_PASSWORD": "redis-pw-1a2b3c4d",
        "OTLP_TOKEN": "otlp-token-5e6f7a8b",
        "HOOK_SECRET": "hook-secret-9c0d1e2f",
        "SMTP_USER": "smtp-user-3a4b5c",
        "SMTP_PASSWORD": "smtp-pw-6d7e8f9a",
        "PROXY_AUTH": "user:proxy-pw-0b1c2d",
        "UPSTREAM_KEY": "sk-upstream-3e4f5a6b",
        "PROXY_KEYS": "client-key-7c8d9e0f",
    }
    email = {
        "type": "email",
        "smtp_host": "127.0.0.1",
        "from": "a@example.test",
        "to": "b@example.test",
        "username_env": "SMTP_USER",
        "password_env": "SMTP_PASSWORD",
    }
    provider = {
        "name": "ok",
        "endpoint": up.url("ok"),
        "api_key_env": "UPSTREAM_KEY",
        "proxy": "none",
        "proxy_auth_env": "PROXY_AUTH",
        "metadata": {"home": "${HOME}"},  # a variable every program needs stays
    }
    config = {
        "state": f"redis://:${{REDIS_PASSWORD}}@127.0.0.1:{free_port()}/0",
        "tracing": {"headers": {"Authorization": "Bearer ${OTLP_TOKEN}"}},
        "alerts": [{"type": "webhook", "url": "http://127.0.0.1:9/hook/${HOOK_SECRET}"}, email],
        "server": {"api_keys_env": "PROXY_KEYS"},
        "providers": [provider],
    }
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    seen = tmp_path / "env.json"
    done = subprocess.run(
        [BIN, "--config", str(path), "run", "--quiet", "--", sys.executable, "-c", DUMP_ENV, seen],
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "UNRELATED": "kept", **secrets},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    env = json.loads(seen.read_text())
    assert env["UNRELATED"] == "kept"
    assert env["HOME"] == str(tmp_path)
    assert not set(secrets) & set(env)
    for value in secrets.values():
        assert not any(value in v for v in env.values()), value


# -- 10. a key put in an endpoint through `${VAR}` -------------------------------------------


def tokened(up: Upstream, **fields: Any) -> dict[str, Any]:
    """A provider whose endpoint carries `${ERNIE_TOKEN}` in its query (no key variable); the
    `echourl` scenario quotes the URL it was asked in its 401."""
    return {
        "name": "tokened",
        "endpoint": up.url("echourl") + "?access_token=${ERNIE_TOKEN}",
        **fields,
    }


def test_a_key_in_an_endpoint_is_redacted_in_client_errors(up: Upstream, tmp_path: Path) -> None:
    proxy = start(proxy_config([tokened(up)]), tmp_path, up, env={"ERNIE_TOKEN": TOKEN})
    try:
        status, body = proxy.post("/v1/chat/completions", {"model": "m", "messages": MSG})
    finally:
        stop(proxy)
    assert status == 502
    shown = json.dumps(body)
    assert "access_token=***" in shown
    assert TOKEN not in shown
    assert TOKEN not in (tmp_path / "proxy.log").read_text()


def test_a_key_in_an_endpoint_is_redacted_by_check_and_chat_debug(
    up: Upstream, tmp_path: Path
) -> None:
    provider = tokened(up, health_check="../models?access_token=${ERNIE_TOKEN}")
    cfg = config_file(tmp_path, provider)
    checked = run("check", "--json", config=cfg, env={"ERNIE_TOKEN": TOKEN})
    assert checked.returncode == 1
    (row,) = json.loads(checked.stdout)
    assert row["url"].endswith("/v1/models?access_token=***")
    assert "access_token=***" in row["detail"]
    debugged = run("chat", "-p", "hi", "--debug", config=cfg, env={"ERNIE_TOKEN": TOKEN})
    assert debugged.returncode == 1
    assert "raw answer from tokened" in debugged.stderr
    assert '"endpoint": "http://127.0.0.1' in debugged.stderr  # its config, dumped
    for result in (checked, debugged):
        assert TOKEN not in result.stdout + result.stderr


# -- 11. an upstream proxy that echoes its Proxy-Authorization --------------------------------


@pytest.fixture(scope="module")
def echoing_proxy() -> Iterator[ConnectProxy]:
    """A proxy that takes `user:PASSWORD` and answers every request 502, quoting its head."""
    proxy = ConnectProxy(credentials=f"user:{PASSWORD}", answer=502, echo=True).start()
    yield proxy
    proxy.stop()


def never_shown(text: str) -> None:
    token = base64.b64encode(f"user:{PASSWORD}".encode()).decode()
    assert token not in text
    assert PASSWORD not in text


def test_an_echoed_proxy_authorization_is_redacted(
    up: Upstream, echoing_proxy: ConnectProxy, tmp_path: Path
) -> None:
    via = {"proxy": echoing_proxy.url, "proxy_auth_env": "PROXY_AUTH"}
    proxy = start(
        proxy_config([up.provider("ok", **via)]),
        tmp_path,
        up,
        env={"PROXY_AUTH": f"user:{PASSWORD}"},
    )
    try:
        status, body = proxy.post("/v1/chat/completions", {"model": "m", "messages": MSG})
    finally:
        stop(proxy)
    assert status == 502
    assert "Proxy-Authorization: Basic ***" in json.dumps(body)
    never_shown(json.dumps(body))
    never_shown((tmp_path / "proxy.log").read_text())
    written = f"http://user:{PASSWORD}@127.0.0.1:{echoing_proxy.port}"
    cfg = config_file(tmp_path, p("viaproxy", up.url("ok"), proxy=written))
    debugged = run("chat", "-p", "hi", "--debug", config=cfg)
    assert debugged.returncode == 1
    assert "Proxy-Authorization: Basic ***" in debugged.stderr
    never_shown(debugged.stdout + debugged.stderr)


# -- 12. a provider's key echoed in a 200 answer ---------------------------------------------


def test_a_key_echoed_in_an_answer_is_redacted(up: Upstream, tmp_path: Path) -> None:
    proxy = start(proxy_config([up.provider("echokey")]), tmp_path, up)
    try:
        client = proxy.client()
        whole = client.chat.completions.create(model="m", messages=MSG)  # type: ignore[arg-type]
        streamed = client.chat.completions.create(
            model="m",
            messages=MSG,  # type: ignore[arg-type]
            stream=True,
        )
        pieces = "".join(c.choices[0].delta.content or "" for c in streamed if c.choices)
    finally:
        stop(proxy)
    assert whole.choices[0].message.content == "you sent Bearer ***"
    assert pieces == "hello you sent Bearer ***"
    assert PROVIDER_KEY not in (tmp_path / "proxy.log").read_text()


# -- 13. memory:// under several workers -----------------------------------------------------


def test_several_workers_on_memory_state_is_a_config_error(tmp_path: Path) -> None:
    path = config_file(tmp_path, p("a", refused_url()), state="memory://")
    done = subprocess.run(
        [BIN, "--config", str(path), "serve", "--workers", "4", "--port", "0"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"agent-reach: config error: {path}: field 'state': memory://")
    assert "--workers 4" in line
    assert "Traceback" not in done.stderr


# -- 14. records in Redis that cannot be read, and `report` on Redis --------------------------


def redis_proxy(up: Upstream, redis_url: str, tmp_path: Path) -> Proxy:
    return start(proxy_config([up.provider("ok")], state=redis_url), tmp_path, up)


def answered(proxy: Proxy) -> bool:
    return proxy.post("/v1/chat/completions", {"model": "m", "messages": MSG})[0] == 200


def test_unreadable_records_in_redis_are_skipped_and_counted(
    up: Upstream, redis_url: str, tmp_path: Path
) -> None:
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    r.hset("agent-reach:circuit:bad@000000000000", mapping={"failures": "many", "trial": "0"})
    r.set("agent-reach:circuit:str@000000000000", "not a hash")
    r.set("agent-reach:usage:bad@000000000000|day:2026-01-01", "lots")
    r.set("agent-reach:health:bad@000000000000", "{not json")
    r.xadd("agent-reach:attempts", {"ts": "yesterday"})
    proxy = redis_proxy(up, redis_url, tmp_path)
    try:
        assert answered(proxy)
        wait_for(lambda: metric(proxy, "agent_reach_state_skipped_records") >= 4)
        assert answered(proxy)
        wait_for(lambda: r.xlen("agent-reach:attempts") >= 3)  # its writes go on
    finally:
        stop(proxy)
    log = (tmp_path / "proxy.log").read_text()
    assert "is down" not in log
    assert log.count("which this version cannot read") == 1  # then counted, not logged
    cfg = config_file(tmp_path, up.provider("ok"), state=redis_url)
    reported = run("report", "--json", config=cfg, env={"PROVIDER_KEY": PROVIDER_KEY})
    assert reported.returncode == 0, reported.stderr
    assert json.loads(reported.stdout)["providers"][0]["requests"] == 2


def test_a_garbage_message_on_the_circuit_channel_is_skipped(
    up: Upstream, redis_url: str, tmp_path: Path
) -> None:
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    proxy = redis_proxy(up, redis_url, tmp_path)
    log = tmp_path / "proxy.log"
    try:
        assert answered(proxy)  # its first read of the store subscribes it

        def told() -> bool:  # a message went out; the log says what became of one
            r.publish("agent-reach:circuits", "garbage")
            return any(words in log.read_text() for words in ("cannot read", "is down"))

        wait_for(told)
        assert answered(proxy)
        wait_for(lambda: r.xlen("agent-reach:attempts") >= 2)  # its writes go on
    finally:
        stop(proxy)
    text = log.read_text()
    assert "is down" not in text
    assert "skipped 'a message on agent-reach:circuits', which this version cannot read" in text


def test_report_returns_on_a_redis_store(up: Upstream, redis_url: str, tmp_path: Path) -> None:
    # A budget makes `report` read the store's view, which subscribes to the circuit channel
    # just before the store is closed: the cancel came as the subscription was being sent.
    budgeted = p("ok", up.url("ok"), metadata={"rate_limit": "100req/day"})
    cfg = config_file(tmp_path, budgeted, state=redis_url)
    assert run("chat", "-p", "hi", config=cfg).returncode == 0
    for _ in range(3):  # it hung most times: the subscription read on after its cancel
        done = run("report", config=cfg, timeout=30)
        assert done.returncode == 0, done.stderr
        assert "ok" in done.stdout


# -- 16. a model that would leave its path segment --------------------------------------------


@pytest.fixture(scope="module")
def ernie_proxy(upstream: Upstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    endpoint = f"http://127.0.0.1:{upstream.port}/s/ernie/chat/{{model}}?access_token=${{T}}"
    config = proxy_config([{"name": "ernie", "format": "ernie", "endpoint": endpoint}], defaults={})
    proxy = start(config, tmp_path_factory.mktemp("ernie"), upstream, env={"T": TOKEN})
    yield proxy
    stop(proxy)


@pytest.mark.parametrize("model", ["..", ".", "%2e%2e", "%252E%252e", "a/b", "..\\x", "a%2Fb"])
def test_a_model_that_is_no_path_segment_is_refused_and_not_sent(
    up: Upstream, ernie_proxy: Proxy, model: str
) -> None:
    status, body = ernie_proxy.post("/v1/chat/completions", {"model": model, "messages": MSG})
    assert status == 404
    assert body["error"]["code"] == "model_not_found"
    assert "cannot be a segment of its URL's path" in json.dumps(body)
    assert up.stray == []  # nothing went anywhere on the provider's host


def test_a_model_that_is_a_path_segment_is_sent(up: Upstream, ernie_proxy: Proxy) -> None:
    ernie_proxy.post("/v1/chat/completions", {"model": "ernie-4.0-8k", "messages": MSG})
    assert up.stray == [f"/s/ernie/chat/ernie-4.0-8k?access_token={TOKEN}"]


# -- 17. what run, init and demo create in the home folder ------------------------------------


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_init_and_run_log_create_private_folders_and_files(up: Upstream, tmp_path: Path) -> None:
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "MOONSHOT_API_KEY": "sk-moon-VALUE",
        "OLLAMA_HOST": refused_url().split("/v1")[0],
    }
    done = subprocess.run(
        [BIN, "init"], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    home = tmp_path / ".agent-reach"
    assert mode(home) == 0o700
    assert mode(home / "config.yaml") == 0o600
    cfg = config_file(tmp_path, up.provider("ok"))
    log = tmp_path / "logs" / "run" / "proxy.log"
    done = subprocess.run(
        [BIN, "--config", str(cfg), "run", "--quiet", "--log", str(log), "--", "true"],
        env={**env, "PROVIDER_KEY": "sk-x"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert mode(log) == 0o600
    assert mode(log.parent) == mode(log.parent.parent) == 0o700
