"""The proxy decision (`proxies`), by tables: which proxy for which URL, given the
environment's variables and a provider's `proxy:` setting, as curl decides."""

from __future__ import annotations

import base64

import pytest

from agent_reach.core import proxies
from agent_reach.core.proxies import Bypass, Proxy, ProxyEnv, choose

HTTPS = "https://api.openai.com/v1/chat/completions"
HTTP = "http://10.1.2.3:11434/api/chat"
CLASH = "http://127.0.0.1:7890"


def shown(proxy: Proxy | None) -> str | None:
    return None if proxy is None else f"{proxy.shown} {proxy.source}"


@pytest.mark.parametrize(
    ("environ", "url", "expected"),
    [
        ({}, HTTPS, None),
        ({"HTTPS_PROXY": CLASH}, HTTPS, "127.0.0.1:7890 HTTPS_PROXY"),
        ({"https_proxy": CLASH}, HTTPS, "127.0.0.1:7890 https_proxy"),
        (
            {"https_proxy": CLASH, "HTTPS_PROXY": "http://other:1"},
            HTTPS,
            "127.0.0.1:7890 https_proxy",
        ),
        ({"HTTPS_PROXY": CLASH}, HTTP, None),  # an http URL takes http_proxy only
        ({"http_proxy": CLASH}, HTTP, "127.0.0.1:7890 http_proxy"),
        ({"http_proxy": CLASH}, HTTPS, None),
        ({"HTTP_PROXY": CLASH}, HTTP, None),  # curl ignores the uppercase one (httpoxy)
        ({"ALL_PROXY": CLASH}, HTTPS, "127.0.0.1:7890 ALL_PROXY"),
        ({"all_proxy": CLASH}, HTTP, "127.0.0.1:7890 all_proxy"),
        (
            {"all_proxy": "socks5://127.0.0.1:7891", "https_proxy": CLASH},
            HTTPS,
            "127.0.0.1:7890 https_proxy",
        ),
        ({"https_proxy": "", "ALL_PROXY": CLASH}, HTTPS, None),  # set but empty: no proxy
        ({"HTTPS_PROXY": "127.0.0.1:7890"}, HTTPS, "127.0.0.1:7890 HTTPS_PROXY"),  # no scheme
        ({"HTTPS_PROXY": "http://proxy.corp"}, HTTPS, "proxy.corp:1080 HTTPS_PROXY"),  # curl's
        ({"HTTPS_PROXY": "http://[::1]:3128/"}, HTTPS, "[::1]:3128 HTTPS_PROXY"),
    ],
)
def test_the_environment_decides_as_curl_does(
    environ: dict[str, str], url: str, expected: str | None
) -> None:
    assert shown(choose(url, None, ProxyEnv.of(environ))) == expected


@pytest.mark.parametrize(
    ("no_proxy", "host", "port", "bypassed"),
    [
        ("", "api.openai.com", 443, False),
        ("*", "api.openai.com", 443, True),
        ("openai.com", "api.openai.com", 443, True),
        ("openai.com", "openai.com", 443, True),
        (".openai.com", "openai.com", 443, True),
        ("*.openai.com", "api.openai.com", 443, True),
        ("openai.com", "notopenai.com", 443, False),
        ("openai.com", "openai.com.evil", 443, False),
        ("OpenAI.COM", "API.openai.com.", 443, True),
        ("deepseek.com, bigmodel.cn ,aliyuncs.com", "open.bigmodel.cn", 443, True),
        ("openai.com:8443", "api.openai.com", 443, False),
        ("openai.com:443", "api.openai.com", 443, True),
        ("127.0.0.1", "127.0.0.1", 8000, True),
        ("127.0.0.1", "127.0.0.2", 8000, False),
        ("10.0.0.0/8", "10.1.2.3", 11434, True),
        ("10.0.0.0/8", "11.1.2.3", 11434, False),
        ("192.168.0.0/16:11434", "192.168.5.5", 11434, True),
        ("192.168.0.0/16:11434", "192.168.5.5", 80, False),
        ("::1", "[::1]", 80, True),
        ("[::1]:80", "::1", 80, True),
        ("fd00::/8", "fd12::5", 80, True),
        ("localhost", "127.0.0.1", 80, False),  # names match names, addresses addresses
        ("openai.com:x", "api.openai.com", 443, False),  # unreadable: matches nothing
        (",,", "api.openai.com", 443, False),
    ],
)
def test_no_proxy_entries(no_proxy: str, host: str, port: int, bypassed: bool) -> None:
    assert Bypass.of(no_proxy).matches(host, port) is bypassed


def test_no_proxy_lowercase_wins_and_applies_to_the_environment_only() -> None:
    env = ProxyEnv.of({"HTTPS_PROXY": CLASH, "no_proxy": "openai.com", "NO_PROXY": "*"})
    assert choose(HTTPS, None, env) is None
    assert choose("https://api.anthropic.com/v1/messages", None, env) is not None
    # A provider's own `proxy:` is not bypassed by NO_PROXY; `none` ignores the variables.
    assert shown(choose(HTTPS, "http://10.0.0.1:3128", env)) == "10.0.0.1:3128 proxy"
    assert choose("https://api.anthropic.com/v1/messages", "none", env) is None
    assert choose("https://api.anthropic.com/v1/messages", " NONE ", env) is None
    assert choose("https://api.anthropic.com/v1/messages", "", env) is None  # curl's -x ""


def test_credentials_from_the_url_or_the_auth_variable() -> None:
    proxy = choose(HTTPS, "http://me%40corp:p%3Ass@127.0.0.1:7890", ProxyEnv())
    assert proxy is not None
    assert (proxy.user, proxy.password) == ("me@corp", "p:ss")
    assert proxy.authorization == "Basic " + base64.b64encode(b"me@corp:p:ss").decode()
    assert "p:ss" not in repr(proxy)
    assert "p%3Ass" not in repr(proxy)
    assert proxy.url == "http://127.0.0.1:7890"
    assert proxy.named == "proxy 127.0.0.1:7890"
    # `proxy_auth_env`'s `user:password` replaces the URL's; it applies to the env's proxy too.
    other = choose(HTTPS, None, ProxyEnv.of({"HTTPS_PROXY": CLASH}), "bob:s3:cret")
    assert other is not None
    assert (other.user, other.password) == ("bob", "s3:cret")
    assert other.named == "proxy 127.0.0.1:7890 from HTTPS_PROXY"
    bare = choose(HTTPS, CLASH, ProxyEnv())
    assert bare is not None
    assert bare.authorization is None


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("socks5://u:secret@127.0.0.1:7891", "socks5:// proxies are not supported"),
        ("https://u:secret@127.0.0.1:7890", "https:// proxies are not supported"),
        ("http://u:secret@127.0.0.1:7890/path", "no path"),
        ("http://u:secret@127.0.0.1:port", "a port number"),
        ("http://u:secret@:7890", "expected http://host:port"),
    ],
)
def test_what_is_not_an_http_proxy_is_refused_without_its_password(
    value: str, problem: str
) -> None:
    with pytest.raises(ValueError, match=problem) as err:
        proxies.parse(value)
    assert "secret" not in str(err.value)
    assert "***@" in str(err.value)
    with pytest.raises(ValueError, match="environment variable HTTPS_PROXY: ") as env_err:
        choose(HTTPS, None, ProxyEnv.of({"HTTPS_PROXY": value}))
    assert "secret" not in str(env_err.value)


def test_redacted() -> None:
    assert proxies.redacted("http://u:pw@h:1") == "http://***@h:1"
    assert proxies.redacted("u:p@w@h:1") == "***@h:1"
    assert proxies.redacted("http://h:1") == "http://h:1"
