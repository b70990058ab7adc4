"""A proxy without client keys against web pages (protocol §14): a page may neither spend the
user's credit (cross-site POSTs of any content type) nor read answers by DNS rebinding (a Host
of its own); with keys set none of this applies. And `serve` refuses to start when client auth
was meant but would be off, and warns when it is off on an address others can reach."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from ..conftest import ERROR, assert_valid
from ..fakes.upstream import Upstream
from ..rawhttp import exchange
from .test_proxy import BIN, MSG, Proxy, base_config, start, stop

BODY = json.dumps({"messages": MSG}).encode()


@pytest.fixture(scope="module")
def proxy(upstream: Upstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    p = start(base_config(upstream), tmp_path_factory.mktemp("browsers"), upstream)
    yield p
    assert stop(p) == 0


def send(
    proxy: Proxy, method: str, path: str, *headers: tuple[str, str], body: bytes | None = None
) -> int:
    """The status of a raw request with exactly `headers` (a Host among them, else 127.0.0.1)."""
    lines = [f"{method} {path} HTTP/1.1"]
    if not any(name.lower() == "host" for name, _ in headers):
        lines.append("Host: 127.0.0.1")
    lines += [f"{name}: {value}" for name, value in headers]
    if body is not None:
        lines.append(f"Content-Length: {len(body)}")
    reply = exchange(proxy.port, ("\r\n".join(lines) + "\r\n\r\n").encode() + (body or b""))
    if reply.status >= 400:  # in the path's API shape
        error = reply.json()
        if path.startswith("/v1/messages"):
            assert error["type"] == "error"
        else:
            assert_valid(ERROR, error)
    return reply.status


JSON = ("Content-Type", "application/json")


@pytest.mark.parametrize(
    "content_type",
    [None, "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"],
)
def test_an_api_post_must_be_json(proxy: Proxy, content_type: str | None) -> None:
    headers = [("Content-Type", content_type)] if content_type else []
    for path in ("/v1/chat/completions", "/v1/responses", "/v1/messages", "/agent-reach/v1/route"):
        assert send(proxy, "POST", path, *headers, body=BODY) == 415
    assert send(proxy, "POST", "/v1/chat/completions", JSON, body=BODY) == 200


@pytest.mark.parametrize(
    ("header", "status"),
    [
        (("Origin", "https://evil.example"), 403),
        (("Origin", "null"), 403),
        (("Origin", "http://localhost:3000"), 200),
        (("Origin", "http://127.0.0.1:8000"), 200),
        (("Sec-Fetch-Site", "cross-site"), 403),
        (("Sec-Fetch-Site", "same-origin"), 200),
        (("Host", "evil.example"), 403),
        (("Host", "evil.example:8000"), 403),
        (("Host", "localhost:8000"), 200),
        (("Host", "app.localhost"), 200),
        (("Host", "[::1]:8000"), 200),
        (("Host", "127.0.0.2"), 200),
    ],
)
def test_web_pages_are_turned_away(proxy: Proxy, header: tuple[str, str], status: int) -> None:
    assert send(proxy, "POST", "/v1/chat/completions", JSON, header, body=BODY) == status
    for path in ("/v1/models", "/agent-reach/v1/status", "/agent-reach/"):
        assert send(proxy, "GET", path, header) == status
    assert send(proxy, "GET", "/healthz", ("Host", "lb.internal")) == 200
    assert send(proxy, "GET", "/readyz", ("Host", "lb.internal")) == 200


def test_with_client_keys_the_key_is_the_guard(upstream: Upstream, tmp_path: Path) -> None:
    p = start(base_config(upstream), tmp_path, upstream, env={"AGENT_REACH_API_KEYS": "k1"})
    try:
        key = ("Authorization", "Bearer k1")
        assert send(p, "GET", "/v1/models", key, ("Host", "proxy.example")) == 200
        assert send(p, "GET", "/v1/models", ("Host", "proxy.example")) == 401
    finally:
        stop(p)


def serve(tmp_path: Path, config: dict[str, object], env: dict[str, str], *args: str) -> str:
    """`serve` that is expected to exit 2 at once: its stderr."""
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    done = subprocess.run(
        [BIN, "--config", str(path), "serve", "--port", "0", *args],
        check=False,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), **env},
        timeout=30,
    )
    assert done.returncode == 2, done
    assert "Traceback" not in done.stderr
    return done.stderr


@pytest.mark.parametrize("workers", [[], ["--workers", "2"]])
def test_serve_refuses_to_start_when_client_auth_was_meant(
    upstream: Upstream, tmp_path: Path, workers: list[str]
) -> None:
    named = base_config(upstream, server={"api_keys_env": "MY_PROXY_KEYS"})
    err = serve(tmp_path, named, {}, *workers)
    assert "MY_PROXY_KEYS is not set" in err
    assert str(tmp_path / "c.yaml") in err
    err = serve(tmp_path, base_config(upstream), {"AGENT_REACH_API_KEYS": " , "}, *workers)
    assert "AGENT_REACH_API_KEYS is empty" in err


def test_client_auth_off_on_every_address_is_warned_about(
    upstream: Upstream, tmp_path: Path
) -> None:
    p = start(base_config(upstream), tmp_path, upstream, "--host", "0.0.0.0")
    stop(p)
    log = (tmp_path / "proxy.log").read_text()
    assert "client auth is off on 0.0.0.0" in log
