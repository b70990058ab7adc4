"""Whatever a client without a key sends to the status page and its login form is a 4xx
(protocol §14): a cookie or a form that is not UTF-8, an unknown charset, broken multipart."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ..fakes.upstream import Upstream
from ..rawhttp import exchange
from .test_proxy import Proxy, base_config, start, stop


@pytest.fixture(scope="module")
def proxy(upstream: Upstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    tmp = tmp_path_factory.mktemp("keyless")
    p = start(base_config(upstream), tmp, upstream, env={"AGENT_REACH_API_KEYS": "k1"})
    yield p
    assert stop(p) == 0
    assert "Traceback" not in (tmp / "proxy.log").read_text()


def raw(proxy: Proxy, head: bytes, body: bytes = b"") -> int:
    """The status of `head` (its request line, then header lines) with `body`."""
    line, _, rest = head.partition(b"\r\n")
    framed = b"%s\r\nHost: 127.0.0.1\r\n%s\r\nContent-Length: %d\r\n\r\n" % (line, rest, len(body))
    return exchange(proxy.port, framed + body).status


@pytest.mark.parametrize("cookie", [b"\xff\xfe", b"k\xc3", b"\xed\xa0\x80"])
def test_a_cookie_that_is_not_utf8_is_a_401(proxy: Proxy, cookie: bytes) -> None:
    head = b"GET /agent-reach/ HTTP/1.1\r\nCookie: agent_reach_key=" + cookie
    assert raw(proxy, head) == 401


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        (b"application/x-www-form-urlencoded", b"key=%FF%FE"),
        (b"application/x-www-form-urlencoded", b"key=\xff\xfe"),
        (b"application/x-www-form-urlencoded; charset=no-such-charset", b"key=k1"),
        (b"multipart/form-data; boundary=b", b"--b\r\nContent-Disposition: form-data\r\n\r\nx"),
        (b"multipart/form-data", b"--b\r\n"),
    ],
)
def test_a_login_form_that_cannot_be_read_is_a_400(
    proxy: Proxy, content_type: bytes, body: bytes
) -> None:
    head = b"POST /agent-reach/login HTTP/1.1\r\nContent-Type: " + content_type
    assert raw(proxy, head, body) in (400, 401)
