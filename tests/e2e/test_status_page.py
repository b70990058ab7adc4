"""The live status page (`GET /agent-reach/`) rendered by headless Chromium against a running
proxy, and its login form when client auth is on."""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import pytest

from ..fakes.upstream import Upstream
from ..services import chromium_flags, dumped_dom
from .test_proxy import MSG, start, stop


def config(up: Upstream) -> dict[str, object]:
    return {
        "version": "0.3.2",
        "health": {"mode": "off"},
        "state": "memory://",
        "circuit": {"failures": 1, "cooldown_s": 300},
        "providers": [
            {"name": "plan-one", "endpoint": up.url("plan")},  # its usage limit used up
            {"name": "dead-one", "endpoint": up.url("server")},
            {
                "name": "good-one",
                "endpoint": up.url("ok"),
                "metadata": {"latency_p95_ms": 800, "rate_limit": "100req/day"},
            },
        ],
    }


@pytest.mark.browser
def test_chromium_renders_providers_circuits_and_failovers(up: Upstream, tmp_path: Path) -> None:
    proxy = start(config(up), tmp_path, up)
    up.reopens_at = time.time() + 3600
    try:
        client = proxy.client()
        for _ in range(3):
            client.chat.completions.create(model="m", messages=MSG)
        url = proxy.base + "/agent-reach/"
        status, text = proxy.get("/agent-reach/")
        assert status == 200
        assert "http://" not in text  # self-contained: no CDN
        assert "https://" not in text
        before = time.time()
        dom = dumped_dom(tmp_path, url)
        after = time.time()
        rows = dict(re.findall(r'<tr data-provider="([^"]+)" data-circuit="([^"]+)"', dom))
        assert rows == {"plan-one": "open", "dead-one": "open", "good-one": "closed"}
        # HH:MM, with the date when the end is not today's (an hour before midnight, it is not:
        # this failed a run at 23:09 UTC); the page was drawn between `before` and `after`.
        until = datetime.fromtimestamp(up.reopens_at, UTC)
        today = {datetime.fromtimestamp(t, UTC).date() == until.date() for t in (before, after)}
        spelled = {f"{until:%H:%M}" if t else f"{until:%Y-%m-%d %H:%M}" for t in today}
        assert any(f"out until {when} (usage limit)" in dom for when in spelled), spelled
        assert 'data-from="dead-one" data-to="good-one"' in dom
        assert re.search(r'<p id="no-failovers"[^>]*hidden', dom)  # there is one
        assert "3 attempts by this process" in dom
        assert "100req/day: 3/100" in dom
        assert ">800<" in dom  # the declared p95 beside the measured one
        updated = int(re.search(r'data-updated="(\d+)"', dom).group(1))  # type: ignore[union-attr]
        assert updated >= 2  # it redrew itself from /agent-reach/v1/status every 2 s

        shot, blank_shot = tmp_path / "status.png", tmp_path / "blank.png"
        blank = tmp_path / "blank.html"
        blank.write_text("<html><body></body></html>")
        for target, out in ((url, shot), (blank.as_uri(), blank_shot)):
            subprocess.run(
                [
                    *chromium_flags(tmp_path, 1500),
                    "--window-size=1000,700",
                    f"--screenshot={out}",
                    target,
                ],
                capture_output=True,
                timeout=60,
                check=True,
            )
        assert shot.stat().st_size > 5 * blank_shot.stat().st_size  # far from blank
    finally:
        stop(proxy)


def test_an_empty_page_says_so_without_a_numbered_none(up: Upstream, tmp_path: Path) -> None:
    """Before any request (a first day's stumble: "1. none yet" under latest failovers, and
    "N in a row" beside "0 attempts"): the failovers list is empty and a line says there is
    none; each provider says this process has made no attempt yet."""
    proxy = start(config(up), tmp_path, up)
    try:
        dom = dumped_dom(tmp_path, proxy.base + "/agent-reach/")
    finally:
        stop(proxy)
    assert '<ol id="failovers"></ol>' in dom
    assert re.search(r'<p id="no-failovers" class="detail">No failover yet.</p>', dom)
    assert dom.count('<div class="detail">no attempt by this process yet</div>') == 3
    assert "none yet" not in dom


def _open(req: urllib.request.Request) -> tuple[int, dict[str, str], str]:
    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: object, **kw: object) -> None:
            return None

    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(req, timeout=10) as resp:
            return resp.status, dict(resp.headers), resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read().decode()


def test_latest_failovers_leave_skips_out(up: Upstream, tmp_path: Path) -> None:
    proxy = start(config(up), tmp_path, up)
    try:
        for _ in range(2):  # dead-one fails, then its circuit is open: skipped, no failover
            proxy.client().chat.completions.create(
                model="m",
                messages=[{"role": "user", "content": "hi"}],
                extra_headers={"X-Agent-Reach-Fallback-Order": "dead-one,good-one"},
            )
        status = json.loads(_open(urllib.request.Request(proxy.base + "/agent-reach/v1/status"))[2])
    finally:
        stop(proxy)
    assert [(f["from"], f["to"], f["reason"]) for f in status["failovers"]] == [
        ("dead-one", "good-one", "server_error")
    ]


def test_the_page_asks_for_a_key_and_its_cookie_opens_the_status_only(
    up: Upstream, tmp_path: Path
) -> None:
    proxy = start(config(up), tmp_path, up, env={"AGENT_REACH_API_KEYS": "client-key-1"})
    base = proxy.base
    try:
        status, _, body = _open(urllib.request.Request(base + "/agent-reach/"))
        assert status == 401
        assert '<form method="post" action="/agent-reach/login">' in body
        # Without its slash, one redirect away, key or not; `/` and the banner point at it.
        status, headers, _ = _open(urllib.request.Request(base + "/agent-reach"))
        assert (status, headers["Location"]) == (308, "/agent-reach/")
        assert _open(urllib.request.Request(base + "/"))[2] == (
            '{"status":"ok","status_page":"/agent-reach/","api":"/v1"}'
        )
        assert proxy.banner.rstrip().endswith(f"; status page {base}/agent-reach/)")

        def login(key: str) -> tuple[int, dict[str, str], str]:
            data = urllib.parse.urlencode({"key": key}).encode()
            return _open(urllib.request.Request(base + "/agent-reach/login", data=data))

        assert login("wrong")[0] == 401
        status, headers, _ = login("client-key-1")
        assert status == 303
        assert headers["Location"] == "/agent-reach/"
        cookie = headers["Set-Cookie"]
        assert "HttpOnly" in cookie
        assert "SameSite=Strict" in cookie
        assert "Path=/agent-reach/" in cookie
        jar = {"Cookie": cookie.split(";", 1)[0]}
        status, _, body = _open(urllib.request.Request(base + "/agent-reach/", headers=jar))
        assert status == 200
        assert 'id="providers"' in body
        status, _, body = _open(
            urllib.request.Request(base + "/agent-reach/v1/status", headers=jar)
        )
        assert status == 200
        assert '"good-one"' in body
        # the cookie opens the status page's reads, never the API
        chat = urllib.request.Request(
            base + "/v1/chat/completions",
            data=b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}',
            headers={**jar, "Content-Type": "application/json"},
        )
        assert _open(chat)[0] == 401
        assert _open(urllib.request.Request(base + "/metrics", headers=jar))[0] == 401
    finally:
        stop(proxy)


def test_the_login_is_hardened(up: Upstream, tmp_path: Path) -> None:
    cfg = {**config(up), "server": {"trusted_proxies": ["127.0.0.0/8"]}}
    proxy = start(cfg, tmp_path, up, env={"AGENT_REACH_API_KEYS": "client-key-1"})
    base = proxy.base

    def login(key: str, **headers: str) -> tuple[int, dict[str, str], str]:
        data = urllib.parse.urlencode({"key": key}).encode()
        headers = {k.replace("_", "-"): v for k, v in headers.items()}
        return _open(urllib.request.Request(base + "/agent-reach/login", data, headers))

    try:
        status, headers, _ = login("client-key-1")
        cookie = headers["Set-Cookie"].split(";", 1)[0]
        assert status == 303
        assert "client-key-1" not in headers["Set-Cookie"]  # a token derived from it
        assert "Secure" not in headers["Set-Cookie"]
        jar = {"Cookie": cookie}
        assert _open(urllib.request.Request(base + "/agent-reach/", headers=jar))[0] == 200
        forged = {"Cookie": "agent_reach_key=client-key-1"}  # the key itself opens nothing
        assert _open(urllib.request.Request(base + "/agent-reach/", headers=forged))[0] == 401
        _, headers, _ = login("client-key-1", X_Forwarded_Proto="https")  # from a trusted hop
        assert "Secure" in headers["Set-Cookie"]
        assert login("client-key-1", Origin="https://evil.example")[0] == 403
        assert login("client-key-1", Sec_Fetch_Site="cross-site")[0] == 403
        assert [login("wrong")[0] for _ in range(11)] == [401] * 10 + [429]
        assert login("client-key-1")[0] == 429  # from this address, for the minute
        status, headers, _ = _open(
            urllib.request.Request(base + "/agent-reach/v1/status", headers=jar)
        )
        assert headers["Cache-Control"] == "no-store"
        for path in ("/healthz", "/v1/models", "/agent-reach/v1/status", "/nowhere"):
            _, headers, _ = _open(urllib.request.Request(base + path, headers=jar))
            assert headers["X-Content-Type-Options"] == "nosniff", path
    finally:
        stop(proxy)
    log = (tmp_path / "proxy.log").read_text()
    assert log.count("wrong keys from 127.0.0.1 this minute") == 1
