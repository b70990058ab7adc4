"""Quotas and alerts: budgets skip a provider, alerts reach real receivers once."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import trustme
from aiohttp import web
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, Envelope, LoginPassword

from agent_reach import AllProvidersFailed, Router
from agent_reach.net.ports import free_port

from .fakes.serving import serving
from .fakes.upstream import Upstream

HELLO = {"model": "gpt-test", "messages": [{"role": "user", "content": "hi"}]}
DAY = 86400.0


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Receiver:
    """A loopback webhook receiver that records every POST."""

    def __init__(self) -> None:
        self.got: list[dict[str, Any]] = []
        self.fail_first = 0
        self.url = ""

    async def handle(self, request: web.Request) -> web.Response:
        if self.fail_first:
            self.fail_first -= 1
            return web.Response(status=503)
        self.got.append(await request.json())
        return web.Response(status=204)

    def events(self, name: str) -> list[dict[str, Any]]:
        return [a for a in self.got if a["event"] == name]


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    r = Receiver()
    app = web.Application()
    app.router.add_post("/hook", r.handle)
    async with serving(app) as port:
        r.url = f"http://127.0.0.1:{port}/hook"
        yield r


def config(up: Upstream, url: str, **top: Any) -> dict[str, Any]:
    return {
        "state": "memory://",
        "health": {"mode": "off"},
        "alerts": [{"type": "webhook", "url": url, "threshold": 0.8}],
        "providers": [
            {"name": "free", "endpoint": up.url("ok"), "metadata": {"rate_limit": "5req/day"}},
            {"name": "paid", "endpoint": up.url("backup")},
        ],
        **top,
    }


async def test_quota_threshold_alert_once_then_exhausted_then_day_rolls(
    up: Upstream, receiver: Receiver
) -> None:
    clock = Clock(1_800_000_000.0 - 1_800_000_000.0 % DAY + 3600)  # 01:00 UTC
    async with Router(config(up, receiver.url), clock=clock) as router:
        providers = []
        for _ in range(7):
            providers.append((await router.achat(HELLO)).provider)
            await router.alerts.drain()  # type: ignore[union-attr]
        assert providers == ["free"] * 5 + ["paid"] * 2
        sixth = await router.achat(HELLO)
        assert [a.reason for a in sixth.trace] == ["quota_exhausted", "ok"]
        assert "5req/day used up" in sixth.trace[0].detail
        threshold = receiver.events("quota_threshold")
        assert len(threshold) == 1  # at 4 of 5, and never again this day
        assert threshold[0]["provider"] == "free"
        assert (threshold[0]["used"], threshold[0]["limit"]) == (4, 5)
        assert len(receiver.events("quota_exhausted")) == 1
        clock.now += DAY  # a new calendar day
        assert (await router.achat(HELLO)).provider == "free"


async def test_token_budget(up: Upstream, receiver: Receiver) -> None:
    cfg = config(up, receiver.url)
    cfg["providers"][0]["metadata"] = {"rate_limit": "20tok/day"}  # each answer uses 8
    async with Router(cfg) as router:
        got = [(await router.achat(HELLO)).provider for _ in range(4)]
    assert got == ["free", "free", "free", "paid"]


async def test_quota_window_follows_quota_tz(up: Upstream, receiver: Receiver) -> None:
    # 23:30 UTC is already the next day in Shanghai (UTC+8): the window key says so
    clock = Clock(1_800_000_000.0 - 1_800_000_000.0 % DAY + DAY - 1800)
    cfg = config(up, receiver.url, quota_tz="Asia/Shanghai")
    async with Router(cfg, clock=clock) as router:
        await router.achat(HELLO)
        await router.alerts.drain()  # type: ignore[union-attr]
    used = router.engine.store.used  # type: ignore[attr-defined]
    assert list(used) == [(router.engine.prepared["free"].quota_key, "day:2027-01-16|req")]


async def test_circuit_and_all_failed_alerts_with_webhook_retries(
    up: Upstream, receiver: Receiver
) -> None:
    receiver.fail_first = 1  # the first delivery gets a 503 and is tried again
    cfg = {
        "state": "memory://",
        "health": {"mode": "off"},
        "circuit": {"failures": 1, "cooldown_s": 60},
        "alerts": [
            {
                "type": "webhook",
                "url": receiver.url,
                "events": ["circuit_opened", "all_providers_failed"],
            }
        ],
        "providers": [{"name": "down", "endpoint": up.url("server")}],
    }
    async with Router(cfg) as router:
        for _ in range(3):
            with pytest.raises(AllProvidersFailed):
                await router.achat(HELLO)
        await router.alerts.drain()  # type: ignore[union-attr]
    opened = receiver.events("circuit_opened")
    assert len(opened) == 1
    assert opened[0]["provider"] == "down"
    assert "after server_error" in opened[0]["message"]
    failed = receiver.events("all_providers_failed")
    assert len(failed) == 1  # three failures, one alert per repeat_after_s
    assert failed[0]["attempts"][0]["reason"] == "server_error"


async def test_failing_sink_never_affects_routing(
    up: Upstream, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = config(up, f"http://127.0.0.1:{free_port()}/nothing-listens")
    cfg["providers"][0]["metadata"] = {"rate_limit": "1req/day"}
    async with Router(cfg) as router:
        assert (await router.achat(HELLO)).provider == "free"
        assert (await router.achat(HELLO)).provider == "paid"
        await router.alerts.drain()  # type: ignore[union-attr]
    assert any("webhook alert" in r.getMessage() for r in caplog.records)


class Mailbox:
    def __init__(self) -> None:
        self.messages: list[Envelope] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Envelope) -> str:
        self.messages.append(envelope)
        return "250 OK"


def _auth(server: Any, session: Any, envelope: Any, mechanism: str, data: Any) -> AuthResult:
    ok = isinstance(data, LoginPassword) and (data.login, data.password) == (b"alerts", b"s3cret")
    return AuthResult(success=ok)


@pytest.fixture
def mailbox(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> Iterator[tuple[Mailbox, int]]:
    """aiosmtpd on loopback with STARTTLS required and a login, trusted via SSL_CERT_FILE."""
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(server_ctx)
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    monkeypatch.setenv("SSL_CERT_FILE", str(ca_file))
    box = Mailbox()
    port = free_port()
    controller = Controller(
        box,
        hostname="127.0.0.1",
        port=port,
        tls_context=server_ctx,
        require_starttls=True,
        authenticator=_auth,
        auth_require_tls=True,
    )
    controller.start()
    yield box, port
    controller.stop()


async def test_email_alert_over_starttls_with_login(
    up: Upstream, mailbox: tuple[Mailbox, int]
) -> None:
    box, port = mailbox
    cfg = {
        "state": "memory://",
        "health": {"mode": "off"},
        "alerts": [
            {
                "type": "email",
                "smtp_host": "127.0.0.1",
                "smtp_port": port,
                "from": "agent-reach@example.test",
                "to": ["oncall@example.test"],
                "starttls": True,
                "username_env": "SMTP_USER",
                "password_env": "SMTP_PASS",
            }
        ],
        "providers": [
            {"name": "free", "endpoint": up.url("ok"), "metadata": {"rate_limit": "1req/day"}}
        ],
    }
    env = {"SMTP_USER": "alerts", "SMTP_PASS": "s3cret"}
    async with Router(cfg, environ=env) as router:
        await router.achat(HELLO)
        await router.alerts.drain()  # type: ignore[union-attr]
    for _ in range(50):
        if len(box.messages) >= 2:
            break
        await asyncio.sleep(0.02)
    subjects = sorted(
        m.content.decode().split("Subject: ", 1)[1].split("\n", 1)[0].strip() for m in box.messages
    )  # type: ignore[union-attr]
    assert subjects == [
        "[agent-reach] quota_exhausted: free",
        "[agent-reach] quota_threshold: free",
    ]
    assert box.messages[0].rcpt_tos == ["oncall@example.test"]
    assert "s3cret" not in box.messages[0].content.decode()  # type: ignore[union-attr]
