"""TLS upstreams and upstream HTTP proxies, end to end (protocol §2.3 `proxy`, `ssl_verify`,
`ca_file`): a loopback https provider with a test CA, and a loopback CONNECT proxy
(`tests/connect_proxy.py`), reached by the CLI and by the proxy as subprocesses, the way a
user behind Clash (`HTTPS_PROXY=http://127.0.0.1:7890`) runs them."""

from __future__ import annotations

import json
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme

from ..connect_proxy import ConnectProxy
from ..fakes.upstream import Upstream, proxy_config
from .test_cli import config_file, no_secrets, p, run
from .test_proxy import start, stop

PASSWORD = "pr0xy-S3CRET-pass"  # the proxy's; never in any output
ABROAD = "api.abroad.test"  # a name only the proxies resolve: reached through them or not at all
MSG = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def tls_up(ca: trustme.CA) -> Iterator[Upstream]:
    """The simulated providers over https, with a certificate of the test CA."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1", ABROAD).configure_cert(context)
    server = Upstream(tls=context)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def ca_file(ca: trustme.CA, tmp_path: Path) -> str:
    path = tmp_path / "test-ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return str(path)


@pytest.fixture(scope="module")
def open_proxy() -> Iterator[ConnectProxy]:
    proxy = ConnectProxy(hosts={ABROAD: "127.0.0.1"}).start()
    yield proxy
    proxy.stop()


@pytest.fixture(scope="module")
def locked_proxy() -> Iterator[ConnectProxy]:
    """A proxy that takes only `user:PASSWORD`."""
    proxy = ConnectProxy(credentials=f"user:{PASSWORD}", hosts={ABROAD: "127.0.0.1"}).start()
    yield proxy
    proxy.stop()


@pytest.fixture
def clash(open_proxy: ConnectProxy) -> ConnectProxy:
    open_proxy.clear()
    return open_proxy


@pytest.fixture
def locked(locked_proxy: ConnectProxy) -> ConnectProxy:
    locked_proxy.clear()
    return locked_proxy


def attempts(result: Any) -> list[dict[str, Any]]:
    """The attempts of a `chat --json`, failed (`attempts`) or answered (`trace`)."""
    out = json.loads(result.stdout)
    return list(out["attempts"] if "attempts" in out else out["trace"])


def chat(cfg: Path, env: dict[str, str] | None = None, *flags: str) -> Any:
    return run("chat", "-p", "hi", "--json", *flags, config=cfg, env=env)


def answer(result: Any) -> str:
    assert result.returncode == 0, result.stdout + result.stderr
    return str(json.loads(result.stdout)["response"]["choices"][0]["message"]["content"])


def abroad(url: str) -> str:
    """`url` at a name only the proxies resolve."""
    return url.replace("127.0.0.1", ABROAD)


def never_printed(result: Any) -> None:
    no_secrets(result)
    assert PASSWORD not in result.stdout + result.stderr


# -- TLS upstreams -------------------------------------------------------------------------------


def test_a_tls_upstream_is_verified_with_its_ca_file(
    tls_up: Upstream, ca_file: str, tmp_path: Path
) -> None:
    cfg = config_file(tmp_path, p("tls", tls_up.url("ok"), ca_file=ca_file))
    assert answer(chat(cfg)) == "hello from ok"


def test_a_tls_upstream_of_another_ca_is_refused_as_connect_failed(
    tls_up: Upstream, tmp_path: Path
) -> None:
    other = tmp_path / "other-ca.pem"
    trustme.CA().cert_pem.write_to_path(str(other))
    cfg = config_file(
        tmp_path,
        p("wrong", tls_up.url("ok"), ca_file=str(other)),
        p("system", tls_up.url("ok")),  # the system's CAs know no test CA either
    )
    result = chat(cfg)
    assert result.returncode == 1
    for attempt in attempts(result):
        assert attempt["reason"] == "connect_failed"
        assert attempt["detail"] == "TLS certificate not trusted"


def test_ssl_verify_false_takes_any_certificate(tls_up: Upstream, tmp_path: Path) -> None:
    cfg = config_file(tmp_path, p("unchecked", tls_up.url("ok"), ssl_verify=False))
    assert answer(chat(cfg)) == "hello from ok"


def test_an_unreadable_ca_file_is_a_config_error(tls_up: Upstream, tmp_path: Path) -> None:
    (tmp_path / "not-pem.txt").write_text("hello")
    for path in ("missing.pem", "not-pem.txt"):  # relative: to the config file
        cfg = config_file(tmp_path, p("tls", tls_up.url("ok"), ca_file=path))
        result = run("config", "validate", str(cfg))
        assert result.returncode == 2
        assert "provider 'tls' (providers[0]), field 'ca_file'" in result.stderr
        assert path in result.stderr
        assert "Traceback" not in result.stderr


# -- the proxy -----------------------------------------------------------------------------------


def test_https_proxy_from_the_environment_tunnels_to_a_tls_upstream(
    tls_up: Upstream, ca_file: str, clash: ConnectProxy, tmp_path: Path
) -> None:
    cfg = config_file(tmp_path, p("openai", abroad(tls_up.url("ok")), ca_file=ca_file))
    assert answer(chat(cfg, {"HTTPS_PROXY": clash.url})) == "hello from ok"
    assert clash.tunnels == [f"{ABROAD}:{tls_up.port}"]
    assert attempts(chat(cfg))[0]["reason"] == "connect_failed"  # unreachable without it


def test_no_proxy_and_proxy_none_go_directly(
    tls_up: Upstream, ca_file: str, clash: ConnectProxy, tmp_path: Path
) -> None:
    cfg = config_file(tmp_path, p("direct", tls_up.url("ok"), ca_file=ca_file))
    env = {"HTTPS_PROXY": clash.url, "NO_PROXY": "example.com,127.0.0.1"}
    assert answer(chat(cfg, env)) == "hello from ok"
    none = config_file(tmp_path, p("direct", tls_up.url("ok"), ca_file=ca_file, proxy="none"))
    assert answer(chat(none, {"https_proxy": clash.url})) == "hello from ok"
    assert clash.used == 0


def test_the_providers_own_proxy_with_credentials_from_a_variable(
    tls_up: Upstream, ca_file: str, locked: ConnectProxy, tmp_path: Path
) -> None:
    entry = p(
        "abroad", tls_up.url("ok"), ca_file=ca_file, proxy=locked.url, proxy_auth_env="PROXY_AUTH"
    )
    cfg = config_file(tmp_path, entry)
    result = chat(cfg, {"PROXY_AUTH": f"user:{PASSWORD}"}, "--verbose", "--debug")
    assert answer(result) == "hello from ok"
    assert locked.tunnels == [f"127.0.0.1:{tls_up.port}"]
    never_printed(result)
    checked = run("config", "validate", "--json", str(cfg))
    assert json.loads(checked.stdout)["unset_proxy_auth"] == {"abroad": "PROXY_AUTH"}
    said = run("config", "validate", str(cfg)).stdout
    assert "note: abroad: PROXY_AUTH is not set (no proxy credentials)" in said


def test_a_refusing_proxy_is_the_providers_connect_failed_naming_it(
    tls_up: Upstream, ca_file: str, locked: ConnectProxy, tmp_path: Path
) -> None:
    """Wrong credentials (407), no proxy listening, a 502 to CONNECT, no answer to CONNECT:
    each is the provider's `connect_failed`, its detail naming the proxy (host and port),
    never its password; the next provider answers."""
    bad = ConnectProxy(answer=502).start()
    silent = ConnectProxy(silent=True).start()
    try:
        wrong = f"http://user:{PASSWORD}x@127.0.0.1:{locked.port}"
        dead = f"http://user:{PASSWORD}@127.0.0.1:1"
        cfg = config_file(
            tmp_path,
            p("denied", tls_up.url("ok"), ca_file=ca_file, proxy=wrong),
            p("dead", tls_up.url("ok"), ca_file=ca_file, proxy=dead),
            p("gateway", tls_up.url("ok"), ca_file=ca_file),
            p(
                "silent",
                tls_up.url("ok"),
                ca_file=ca_file,
                proxy=silent.url,
                timeout={"connect": 100, "read": 200},
            ),
            p("backup", tls_up.url("backup"), ca_file=ca_file, proxy="none"),
            defaults={
                "model_map": {"*": ""},
                "schema_compatibility": {"debug_mode": True, "debug_reasons": ["*"]},
            },
        )
        result = chat(cfg, {"HTTPS_PROXY": bad.url}, "--verbose", "--debug")
        assert answer(result) == "hello from backup"
        found = {a["provider"]: (a["reason"], a["detail"]) for a in attempts(result)}
        assert found == {
            "denied": (
                "connect_failed",
                f"the proxy answered 407 Proxy Authentication Required "
                f"(proxy 127.0.0.1:{locked.port})",
            ),
            "dead": (
                "connect_failed",
                "cannot connect to the proxy: connection refused (proxy 127.0.0.1:1)",
            ),
            "gateway": (
                "connect_failed",
                f"the proxy answered 502 Bad Gateway (proxy 127.0.0.1:{bad.port} from HTTPS_PROXY)",
            ),
            "silent": ("connect_failed", f"connect timeout (proxy 127.0.0.1:{silent.port})"),
            "backup": ("ok", ""),
        }
        assert "http://***@127.0.0.1:1" in result.stderr  # --debug shows the config, redacted
        never_printed(result)
        assert locked.refused == [407]
    finally:
        bad.stop()
        silent.stop()


def test_an_http_upstream_goes_to_http_proxy_in_absolute_form(
    up: Upstream, clash: ConnectProxy, locked: ConnectProxy, tmp_path: Path
) -> None:
    cfg = config_file(tmp_path, p("local", up.url("ok")))
    assert answer(chat(cfg, {"http_proxy": clash.url})) == "hello from ok"
    assert clash.forwarded == [up.url("ok")]
    # HTTPS_PROXY is for https URLs, and curl reads no uppercase HTTP_PROXY.
    assert answer(chat(cfg, {"HTTPS_PROXY": clash.url, "HTTP_PROXY": clash.url})) == "hello from ok"
    assert clash.forwarded == [up.url("ok")]
    # Credentials go to the proxy as Proxy-Authorization on the request itself.
    own = config_file(tmp_path, p("local", up.url("ok"), proxy=locked.url, proxy_auth_env="AUTH"))
    result = chat(own, {"AUTH": f"user:{PASSWORD}"})
    assert answer(result) == "hello from ok"
    assert locked.forwarded == [up.url("ok")]
    never_printed(result)


def test_an_unusable_proxy_variable_is_a_config_error(up: Upstream, tmp_path: Path) -> None:
    cfg = config_file(tmp_path, p("local", up.url("ok")))
    result = chat(cfg, {"http_proxy": f"socks5://user:{PASSWORD}@127.0.0.1:7891"})
    assert result.returncode == 2
    assert "provider 'local': environment variable http_proxy: socks5://" in result.stderr
    assert "Traceback" not in result.stderr
    never_printed(result)


def test_check_and_probe_go_through_the_proxy(
    tls_up: Upstream, up: Upstream, ca_file: str, clash: ConnectProxy, tmp_path: Path
) -> None:
    cfg = config_file(
        tmp_path,
        p("health", tls_up.url("ok"), ca_file=ca_file),
        p("tcp", tls_up.url("ok"), ca_file=ca_file, health_check=""),  # a TCP connect instead
    )
    env = {"HTTPS_PROXY": clash.url}
    rows = {
        r["provider"]: r for r in json.loads(run("check", "--json", config=cfg, env=env).stdout)
    }
    assert rows["health"]["usable"], rows
    assert rows["tcp"]["reachable"], rows
    assert clash.tunnels == [f"127.0.0.1:{tls_up.port}"] * 2
    via = f"proxy 127.0.0.1:{clash.port} from HTTPS_PROXY"
    assert rows["health"]["via"] == rows["tcp"]["via"] == via
    table = run("check", config=cfg, env=env)
    assert table.stdout.count(f"via {via}") == 2, table.stdout
    dead = {"HTTPS_PROXY": "http://127.0.0.1:1"}
    rows = {
        r["provider"]: r for r in json.loads(run("check", "--json", config=cfg, env=dead).stdout)
    }
    assert rows["health"]["health"] == "connect_failed"
    assert rows["health"]["detail"].endswith("(proxy 127.0.0.1:1 from HTTPS_PROXY)")
    assert rows["tcp"]["detail"] == (
        "no TCP connection to its endpoint (proxy 127.0.0.1:1 from HTTPS_PROXY)"
    )
    probed = run("probe", up.url("ok"), "--json", env={"http_proxy": clash.url})
    assert probed.returncode == 0, probed.stderr
    assert json.loads(probed.stdout)["usable"]
    assert up.url("ok") in clash.forwarded


def test_the_tcp_check_tunnels_with_the_proxys_credentials(
    tls_up: Upstream, locked: ConnectProxy, tmp_path: Path
) -> None:
    tcp = {"health_check": "", "proxy": locked.url}
    cfg = config_file(
        tmp_path,
        p("keyed", abroad(tls_up.url("ok")), proxy_auth_env="PROXY_AUTH", **tcp),
        p("keyless", abroad(tls_up.url("ok")), **tcp),
    )
    result = run("check", "--json", config=cfg, env={"PROXY_AUTH": f"user:{PASSWORD}"})
    rows = {r["provider"]: r for r in json.loads(result.stdout)}
    assert rows["keyed"]["reachable"], rows
    assert not rows["keyless"]["reachable"]
    assert rows["keyless"]["detail"] == (
        f"no TCP connection to its endpoint (proxy 127.0.0.1:{locked.port})"
    )
    assert locked.tunnels == [f"{ABROAD}:{tls_up.port}"]
    assert locked.refused == [407]
    never_printed(result)


def test_the_proxy_server_reaches_its_providers_through_https_proxy(
    tls_up: Upstream, ca_file: str, locked: ConnectProxy, tmp_path: Path
) -> None:
    """`agent-reach serve` with HTTPS_PROXY (credentials in it) in its environment: the SDK's
    requests, streamed and not, and the background health checks go through the tunnel; its
    log never holds the password."""
    providers = [
        tls_up.provider("ok", ca_file=ca_file, endpoint=abroad(tls_up.url("ok"))),
        tls_up.provider("backup", ca_file=ca_file, endpoint=abroad(tls_up.url("backup"))),
    ]
    config = proxy_config(providers, health={"mode": "background", "ttl_s": 0.2})
    tls_up.clear()
    env = {"HTTPS_PROXY": f"http://user:{PASSWORD}@127.0.0.1:{locked.port}"}
    server = start(config, tmp_path, tls_up, env=env)
    try:
        client = server.client()
        done = client.chat.completions.create(model="gpt-test", messages=MSG)
        assert done.choices[0].message.content == "hello from ok"
        stream = client.chat.completions.create(model="gpt-test", messages=MSG, stream=True)
        assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == (
            "hello from ok"
        )
        assert locked.tunnels
        assert set(locked.tunnels) == {f"{ABROAD}:{tls_up.port}"}
        assert tls_up.health_hits  # they went through it too: nothing else reaches ABROAD
    finally:
        stop(server)
    log = (tmp_path / "proxy.log").read_text()
    assert PASSWORD not in log
    assert locked.refused == []
