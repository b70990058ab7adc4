"""Reloading the config of a running proxy (protocol §12.1): SIGHUP under load, `serve --watch`,
an invalid file, and remembered state kept for unchanged providers only."""

from __future__ import annotations

import signal
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import openai
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from ..fakes.upstream import Upstream
from .test_proxy import MSG, Proxy, start, stop


def config(*providers: dict[str, Any]) -> dict[str, Any]:
    return {
        "version": "0.3.2",
        "health": {"mode": "off"},
        "state": "memory://",
        "circuit": {"failures": 1, "cooldown_s": 120},
        "providers": list(providers),
    }


def rewrite(proxy_dir: Path, data: dict[str, Any] | str) -> None:
    text = data if isinstance(data, str) else yaml.safe_dump(data)
    (proxy_dir / "proxy.yaml").write_text(text)


def reloads(proxy: Proxy) -> dict[str, float]:
    _, text = proxy.get("/metrics", {"Authorization": "Bearer k1"})  # a key, where one is needed
    return {
        s.labels["result"]: s.value
        for f in text_string_to_metric_families(text)
        if f.name == "agent_reach_config_reloads"
        for s in f.samples
        if s.name.endswith("_total")
    }


def wait_for(check: Any, timeout: float = 5.0) -> None:
    deadline = time.time() + timeout
    while not check():
        assert time.time() < deadline, "timed out"
        time.sleep(0.05)


class Load:
    """8 clients sending requests (some streamed) until stopped; who answered, what failed."""

    def __init__(self, proxy: Proxy, clients: int = 8) -> None:
        self.proxy = proxy
        self.answers: list[tuple[float, str]] = []
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(i,)) for i in range(clients)]

    def __enter__(self) -> Load:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(30)

    def _run(self, i: int) -> None:
        client = openai.OpenAI(base_url=self.proxy.base + "/v1", api_key="k", max_retries=0)
        n = 0
        while not self._stop.is_set():
            n += 1
            try:
                if (i + n) % 3 == 0:
                    with client.chat.completions.with_streaming_response.create(
                        model="m", messages=MSG, stream=True
                    ) as resp:
                        who = resp.headers["X-Agent-Reach-Provider"]
                        text = "".join(
                            c.choices[0].delta.content or "" for c in resp.parse() if c.choices
                        )
                        assert text
                else:
                    raw = client.chat.completions.with_raw_response.create(model="m", messages=MSG)
                    who = raw.headers["X-Agent-Reach-Provider"]
                self.answers.append((time.time(), who))
            except Exception as exc:
                self.failures.append(f"{type(exc).__name__}: {exc}")
        client.close()


def test_sighup_under_load_reloads_without_failing_a_request(up: Upstream, tmp_path: Path) -> None:
    # the old provider is slow (0.6 s), so requests are in flight when the reload comes
    proxy = start(config({"name": "old", "endpoint": up.url("slow")}), tmp_path, up)
    try:
        with Load(proxy) as load:
            wait_for(lambda: len(load.answers) >= 8)
            rewrite(tmp_path, config({"name": "new", "endpoint": up.url("backup")}))
            reloaded_at = time.time()
            proxy.proc.send_signal(signal.SIGHUP)
            wait_for(lambda: any(w == "new" for _, w in load.answers))
            time.sleep(0.8)  # what was in flight at the reload has finished by now
            settled = time.time()
            time.sleep(0.5)
        assert load.failures == []
        after = Counter(w for t, w in load.answers if t > settled)
        assert set(after) == {"new"}
        assert after["new"] > 8
        assert any(w == "old" and t > reloaded_at for t, w in load.answers)  # finished on old
        assert reloads(proxy) == {"ok": 1.0, "error": 0.0}

        # an invalid file: still serving the config before it, and saying why
        rewrite(tmp_path, yaml.safe_dump(config({"name": "x", "endpont": up.url("ok")})))
        proxy.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: reloads(proxy)["error"] == 1.0)
        raw = proxy.client().chat.completions.with_raw_response.create(model="m", messages=MSG)
        assert raw.headers["X-Agent-Reach-Provider"] == "new"
        log = (tmp_path / "proxy.log").read_text()
        assert "config reload failed, still serving the old config" in log
        assert "'endpont': unknown field (did you mean 'endpoint'?)" in log
        assert "Traceback" not in log
    finally:
        assert stop(proxy) == 0


def test_watch_reloads_on_change_and_keeps_state_of_unchanged_providers(
    up: Upstream, tmp_path: Path
) -> None:
    dead = {"name": "dead", "endpoint": up.url("server")}
    edited = {"name": "edited", "endpoint": up.url("server")}
    backup = {"name": "backup", "endpoint": up.url("backup")}
    proxy = start(config(dead, edited, backup), tmp_path, up, "--watch")
    try:
        client = proxy.client()
        for order in ("dead,backup", "edited,backup"):  # one failure opens each circuit
            client.chat.completions.create(
                model="m", messages=MSG, extra_headers={"X-Agent-Reach-Fallback-Order": order}
            )

        def circuits() -> dict[str, str]:
            _, body = proxy.get("/agent-reach/v1/status")
            return {p["provider"]: p["circuit"]["state"] for p in body["providers"]}

        assert circuits() == {"dead": "open", "edited": "open", "backup": "closed"}
        # the file changes: `edited` gets another endpoint, `dead` stays as it was
        rewrite(tmp_path, config(dead, {**edited, "endpoint": up.url("ok")}, backup))
        wait_for(lambda: reloads(proxy).get("ok") == 1.0)
        assert circuits() == {"dead": "open", "edited": "closed", "backup": "closed"}
        raw = client.chat.completions.with_raw_response.create(
            model="m", messages=MSG, extra_headers={"X-Agent-Reach-Fallback-Order": "edited"}
        )
        assert raw.headers["X-Agent-Reach-Trace"].startswith("edited:ok:")
        raw = client.chat.completions.with_raw_response.create(
            model="m", messages=MSG, extra_headers={"X-Agent-Reach-Fallback-Order": "dead,backup"}
        )
        assert raw.headers["X-Agent-Reach-Trace"].startswith("dead:circuit_open:0,backup:ok")
    finally:
        assert stop(proxy) == 0


def test_a_reload_that_would_turn_client_auth_off_is_refused(up: Upstream, tmp_path: Path) -> None:
    keyed = {**config({"name": "ok", "endpoint": up.url("ok")}), "server": {"api_keys_env": "K"}}
    proxy = start(keyed, tmp_path, up, env={"K": "k1"})
    try:
        keyless = proxy.client(key="wrong")
        for n, change in enumerate(({"api_keys_env": "UNSET_KEYS"}, None), start=1):
            changed = {**keyed, "server": change} if change else config(*keyed["providers"])
            rewrite(tmp_path, changed)  # pointing at an unset variable, or `server:` removed
            proxy.proc.send_signal(signal.SIGHUP)
            wait_for(lambda n=n: reloads(proxy).get("error") == float(n))  # type: ignore[misc]
            with pytest.raises(openai.AuthenticationError):  # auth still on
                keyless.chat.completions.create(model="m", messages=MSG)
        assert reloads(proxy).get("ok", 0.0) == 0.0
        log = (tmp_path / "proxy.log").read_text()
        assert log.count("config reload failed, still serving the old config") == 2
        assert "UNSET_KEYS is not set" in log
        assert "serves without client keys" in log
    finally:
        assert stop(proxy) == 0


def test_a_reload_that_fails_while_its_router_is_built_is_counted_and_logged(
    up: Upstream, tmp_path: Path
) -> None:
    direct = {"name": "ok", "endpoint": up.url("ok"), "proxy": "none"}
    # The new provider follows HTTPS_PROXY, which holds no http proxy: found when it is
    # prepared, as the new router is built, after the file validated.
    https = {"name": "far", "endpoint": "https://api.example.test/v1/chat/completions"}
    proxy = start(config(direct), tmp_path, up, env={"HTTPS_PROXY": "socks5://127.0.0.1:1080"})
    try:
        rewrite(tmp_path, config(direct, https))
        proxy.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: reloads(proxy).get("error") == 1.0)
        raw = proxy.client().chat.completions.with_raw_response.create(model="m", messages=MSG)
        assert raw.headers["X-Agent-Reach-Trace"].startswith("ok:ok:")  # the old config
    finally:
        assert stop(proxy) == 0
    log = (tmp_path / "proxy.log").read_text()
    assert "config reload failed, still serving the old config: provider 'far'" in log
    assert "socks5:// proxies are not supported" in log
    assert "never retrieved" not in log
    assert "Traceback" not in log


def test_after_a_reload_the_access_log_names_the_provider_and_limits_say_restart(
    up: Upstream, tmp_path: Path
) -> None:
    proxy = start(config({"name": "old", "endpoint": up.url("ok")}), tmp_path, up)
    try:
        changed = {**config({"name": "new", "endpoint": up.url("backup")})}
        changed["server"] = {"max_body_bytes": 1000, "request_timeout_s": 5}
        rewrite(tmp_path, changed)
        proxy.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: reloads(proxy).get("ok") == 1.0)
        proxy.client().chat.completions.create(model="m", messages=MSG)
        wait_for(lambda: "attempts=new:ok " in (tmp_path / "proxy.log").read_text())
        log = (tmp_path / "proxy.log").read_text()
        assert "server.max_body_bytes, server.request_timeout_s changed" in log
        assert "applies at the next restart" in log
    finally:
        assert stop(proxy) == 0
