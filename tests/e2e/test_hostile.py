"""Hostile clients against `agent-reach serve` with client keys set (issue 14, protocol §14).

Every input, at every layer (HTTP framing, content encoding, auth header bytes, JSON depth and
numbers, field types), gets a 4xx in the error shape of the API its path belongs to (OpenAI's,
or Anthropic's under /v1/messages), at most one short log line and never a traceback. Requests
go over raw sockets, since an HTTP library would refuse to send most of them.
"""

from __future__ import annotations

import gzip
import json
import socket
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from ..conftest import ERROR, assert_valid
from ..fakes.upstream import Upstream
from ..rawhttp import Reply, closed_within, connect, exchange, read_reply, request
from .test_proxy import MSG, Proxy, base_config, start, stop

T = TypeVar("T")
CHAT = "/v1/chat/completions"
JSON = ("Content-Type", "application/json")


@dataclass
class Served:
    proxy: Proxy
    log: Path

    @property
    def port(self) -> int:
        return self.proxy.port

    def lines(self, act: Callable[[], T]) -> tuple[T, list[str]]:
        """What `act` returned and the log lines written while it ran: those between the
        access lines of a `GET /healthz` sent before it and of one sent after it."""
        start = self._mark(self.log.stat().st_size)
        result = act()
        end = self._mark(start)
        with self.log.open("rb") as f:
            f.seek(start)
            lines = f.read(end - start).decode().splitlines()
        return result, lines[:-1]

    def _mark(self, offset: int) -> int:
        """Send the sentinel; the log offset just past its access line (found after `offset`)."""
        assert exchange(self.port, request("GET", "/healthz", key=None)).status == 200
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            with self.log.open("rb") as f:
                f.seek(offset)
                text = f.read()
            at = text.find(b" GET /healthz 200 ")
            end = text.find(b"\n", at) if at >= 0 else -1
            if end >= 0:  # a line read while it is being written has no end yet: read again
                return offset + end + 1
            time.sleep(0.01)
        raise AssertionError("no access line for the sentinel")


@pytest.fixture(scope="module")
def served(upstream: Upstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("hostile")
    proxy = start(base_config(upstream), tmp, upstream, env={"AGENT_REACH_API_KEYS": "k1"})
    yield Served(proxy, tmp / "proxy.log")
    assert stop(proxy) == 0
    assert "Traceback" not in (tmp / "proxy.log").read_text()


def chat(body: Any, *headers: tuple[str, str] | bytes, path: str = CHAT, **kw: Any) -> bytes:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return request("POST", path, JSON, *headers, body=raw, **kw)


def nested(depth: int) -> bytes:
    """A chat request whose body nests `depth` levels (the object itself is the first)."""
    inner = b"[" * (depth - 2) + b"]" * (depth - 2)
    return b'{"messages":[{"role":"user","content":"hi"}],"metadata":{"x":' + inner + b"}}"


def assert_refused(reply: Reply, lines: list[str], status: int, *, anthropic: bool = False) -> str:
    """`reply` is `status` in the path's error shape with a short message, and exactly one
    short log line was written, without a traceback. Returns the message."""
    assert reply.status == status, (reply.status, reply.body)
    body = reply.json()
    if anthropic:
        assert body["type"] == "error", body
        assert isinstance(body["error"]["type"], str), body
    else:
        assert_valid(ERROR, body)
    message: str = body["error"]["message"]
    assert len(message) <= 300, message
    assert len(lines) == 1, lines
    assert len(lines[0]) <= 400, lines[0]
    assert "Traceback" not in lines[0]
    return message


# -- 1. auth header bytes -----------------------------------------------------------------------

BAD_BEARER = b"Authorization: Bearer \xff"


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/models"),
        ("POST", CHAT),
        ("GET", "/metrics"),
        ("GET", "/agent-reach/v1/status"),
        ("POST", "/agent-reach/v1/route"),
        ("POST", "/v1/messages"),
        ("GET", "/nowhere"),
    ],
)
def test_non_utf8_bearer_is_a_401_on_every_path(served: Served, method: str, path: str) -> None:
    raw = request(method, path, BAD_BEARER, body=b"{}", key=None)
    reply, lines = served.lines(lambda: exchange(served.port, raw))
    assert_refused(reply, lines, 401, anthropic=path.startswith("/v1/messages"))


def test_a_thousand_bad_bearers_write_a_thousand_short_lines(served: Served) -> None:
    one = request("GET", "/v1/models", BAD_BEARER, key=None)

    def flood() -> list[int]:
        with connect(served.port) as sock:
            sock.sendall(one * 1000)  # pipelined on one keep-alive connection
            buffer = bytearray()
            return [read_reply(sock, buffer).status for _ in range(1000)]

    statuses, lines = served.lines(flood)
    assert statuses == [401] * 1000
    assert len(lines) == 1000
    assert sum(len(line) + 1 for line in lines) < 100_000
    assert all(" GET /v1/models 401 " in line for line in lines)


@pytest.mark.parametrize(
    ("headers", "why"),
    [
        ([("Authorization", "Bearer  k1")], "must be 'Bearer KEY'"),
        ([("Authorization", "Bearer k1 k1")], "must be 'Bearer KEY'"),
        ([("Authorization", "Basic azE6")], "must be 'Bearer KEY'"),
        ([("Authorization", "Bearer")], "must be 'Bearer KEY'"),
        ([("Authorization", "Bearer k2")], "not valid"),
        ([("Authorization", "Bearer k1"), ("Authorization", "Bearer k2")], "one proxy key"),
        ([("Authorization", "Bearer wrong"), ("Authorization", "Bearer k1")], "one proxy key"),
        ([("Authorization", "Bearer k1"), ("x-api-key", "wrong")], "one proxy key"),
        ([("x-api-key", "k1"), ("X-Api-Key", "k2")], "one proxy key"),
        ([("x-api-key", "k1 k1")], "visible ASCII"),
        ([], "is required"),
    ],
)
def test_the_key_is_parsed_exactly(
    served: Served, headers: list[tuple[str, str]], why: str
) -> None:
    raw = request("GET", "/v1/models", *headers, key=None)
    reply, lines = served.lines(lambda: exchange(served.port, raw))
    assert why in assert_refused(reply, lines, 401)
    assert "k1" not in reply.body.decode()


@pytest.mark.parametrize(
    "header",
    [
        ("Authorization", "Bearer k1"),
        ("Authorization", "bearer k1"),
        ("x-api-key", "k1"),
        # HTTP strips the whitespace around a header's value (RFC 9110 §5.5): not part of it
        ("Authorization", "Bearer k1 "),
    ],
)
def test_one_valid_key_in_either_header_passes(served: Served, header: tuple[str, str]) -> None:
    reply = exchange(served.port, request("GET", "/v1/models", header, key=None))
    assert reply.status == 200
    assert reply.json()["object"] == "list"


def test_one_key_in_both_headers_passes(served: Served) -> None:
    """Claude Code's `apiKeyHelper` (what `setup claude --write` writes) sends its key as
    `x-api-key` and as a Bearer token: one key, twice."""
    both = (("Authorization", "Bearer k1"), ("x-api-key", "k1"))
    reply = exchange(served.port, request("GET", "/v1/models", *both, key=None))
    assert reply.status == 200


# -- 2. JSON depth and numbers ------------------------------------------------------------------


@pytest.mark.parametrize("depth", [129, 254, 255, 1000, 1022])
def test_deep_json_is_refused_when_read(served: Served, depth: int) -> None:
    reply, lines = served.lines(lambda: exchange(served.port, chat(nested(depth))))
    assert "nests deeper than 128 levels" in assert_refused(reply, lines, 400)


def test_json_as_deep_as_the_cap_goes_upstream(served: Served) -> None:
    served.proxy.upstream.clear()
    reply = exchange(served.port, chat(nested(128)))
    assert reply.status == 200, reply.body
    assert (
        served.proxy.upstream.bodies("ok")[-1]["metadata"]["x"]
        == json.loads(nested(128))["metadata"]["x"]
    )


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("stream", "false"),
        ("stream", "yes"),
        ("stream", 1),
        ("max_tokens", 10**30),  # past 64 bits (2**40 and 0 are the schema's, and pass)
        ("max_tokens", 1.5),
        ("max_completion_tokens", True),
        ("n", 1000),
        ("temperature", "hot"),
        ("seed", 2**64 - 1),
        ("stop", 1),
        ("tools", "all"),
        ("tool_choice", 3),
        ("response_format", "json"),
        ("agent_reach", 0),
        ("agent_reach", []),
        ("agent_reach", "x"),
    ],
)
def test_fields_the_proxy_reads_have_strict_types(served: Served, field: str, value: Any) -> None:
    raw = chat({"messages": MSG, field: value})
    reply, lines = served.lines(lambda: exchange(served.port, raw))
    assert_refused(reply, lines, 400)
    assert reply.json()["error"]["param"] == field


def test_message_fields_have_strict_types(served: Served) -> None:
    raw = chat({"messages": [{"role": "user", "content": 5}]})
    reply, lines = served.lines(lambda: exchange(served.port, raw))
    assert_refused(reply, lines, 400)
    assert reply.json()["error"]["param"] == "messages[0].content"


# -- 3. content encodings -----------------------------------------------------------------------

BODY = json.dumps({"messages": MSG}).encode()


@pytest.mark.parametrize(
    ("encoding", "payload", "status"),
    [
        ("gzip", BODY, 400),  # says gzip, is not
        ("deflate", BODY, 400),
        ("gzip", gzip.compress(BODY, mtime=0)[:-12], 400),  # cut short
        ("br", BODY, 415),
        ("zstd", BODY, 415),
        ("compress", BODY, 415),
        ("gzip, gzip", gzip.compress(gzip.compress(BODY, mtime=0), mtime=0), 415),
        (
            "gzip",
            gzip.compress(b'{"messages": [], "pad": "' + b"x" * 100_000 + b'"}', mtime=0),
            413,
        ),
    ],
)
def test_bodies_that_do_not_decode(
    served: Served, encoding: str, payload: bytes, status: int
) -> None:
    raw = chat(payload, ("Content-Encoding", encoding))
    reply, lines = served.lines(lambda: exchange(served.port, raw))
    message = assert_refused(reply, lines, status)
    if status == 413:
        assert message == "request body over 20000 bytes (server.max_body_bytes)"


def test_a_gzip_bombs_413_closes_its_connection_soon(served: Served) -> None:
    bomb = gzip.compress(b'{"messages": [], "pad": "' + b"x" * 10_000_000 + b'"}')
    head = request(
        "POST",
        CHAT,
        JSON,
        ("Content-Encoding", "gzip"),
        ("Content-Length", str(len(bomb) + 100_000)),  # and more that never comes
    )
    with connect(served.port) as sock:
        sock.sendall(head + bomb)
        assert read_reply(sock).status == 413
        closed = closed_within(sock, 5.0)
    assert closed is not None
    assert closed < 5, closed  # LINGER_S (1 s): not aiohttp's 10 s of lingering


@pytest.mark.parametrize(
    ("encoding", "payload"),
    [("gzip", gzip.compress(BODY, mtime=0)), ("deflate", zlib.compress(BODY)), ("identity", BODY)],
)
def test_gzip_and_deflate_bodies_are_decoded(served: Served, encoding: str, payload: bytes) -> None:
    reply = exchange(served.port, chat(payload, ("Content-Encoding", encoding)))
    assert reply.status == 200, reply.body
    assert reply.json()["choices"][0]["message"]["content"] == "hello from ok"


# -- 4. protocol garbage --------------------------------------------------------------------------


def garbage(path: str) -> dict[str, list[bytes]]:
    """Requests aiohttp's parser refuses, aimed at `path`."""
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k1\r\n".encode()
    return {
        "bad chunk size": [head + b"Transfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n"],
        "bad chunk size, later": [
            head + b"Transfer-Encoding: chunked\r\n\r\n",
            b"zz\r\nabc\r\n0\r\n\r\n",
        ],
        "8 KB URL": [f"GET {path}?q={'a' * 8200} HTTP/1.1\r\nHost: x\r\n\r\n".encode()],
        "200 headers": [head + b"".join(b"X-%d: y\r\n" % i for i in range(200)) + b"\r\n"],
        "NUL in a header": [head + b"X-A: a\x00b\r\nContent-Length: 0\r\n\r\n"],
        "bare CR in a header": [head + b"X-A: a\rb\r\nContent-Length: 0\r\n\r\n"],
        "CL and TE": [head + b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"],
        "bad Content-Length": [head + b"Content-Length: 1x\r\n\r\n"],
        "bad method": [f"G(T {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode()],
        "bad version": [f"GET {path} HTTP/1.x\r\nHost: x\r\n\r\n".encode()],
    }


@pytest.mark.parametrize("case", list(garbage(CHAT)))
@pytest.mark.parametrize("path", [CHAT, "/v1/messages"])
def test_protocol_garbage_gets_the_api_shape(served: Served, case: str, path: str) -> None:
    pieces = garbage(path)[case]
    reply, lines = served.lines(lambda: exchange(served.port, *pieces, pause=0.2))
    message = assert_refused(reply, lines, 400, anthropic=path == "/v1/messages")
    assert "malformed HTTP request" in message or "body could not be read" in message


def test_an_http2_preface_is_told_to_speak_http11(served: Served) -> None:
    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
    reply, lines = served.lines(lambda: exchange(served.port, preface))
    assert "HTTP/2 is not supported" in assert_refused(reply, lines, 400)


def test_connect_is_405(served: Served) -> None:
    raw = b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n"
    reply, lines = served.lines(lambda: exchange(served.port, raw))
    assert_refused(reply, lines, 405)


def test_wrong_methods_are_405_with_allow(served: Served) -> None:
    reply, lines = served.lines(lambda: exchange(served.port, request("DELETE", CHAT)))
    assert_refused(reply, lines, 405)
    assert reply.headers["allow"] == "POST"


UPGRADE = (
    ("Upgrade", "websocket"),
    ("Connection", "Upgrade"),
    ("Sec-WebSocket-Version", "13"),
    ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
)


@pytest.mark.parametrize("path", [CHAT, "/v1/messages"])
def test_an_upgrade_no_route_takes_is_426_at_once(served: Served, path: str) -> None:
    """Issue 49: an agent asking for a WebSocket where no route speaks one (before issue 52,
    Codex on `/v1/responses`): a 405 made Codex try again seven times over 6-7 s, a 426 makes
    it post over HTTP at once."""
    reply, lines = served.lines(lambda: exchange(served.port, request("GET", path, *UPGRADE)))
    message = assert_refused(reply, lines, 426, anthropic=path == "/v1/messages")
    assert message == "no upgrade to 'websocket' here: send the request over HTTP/1.1"
    assert reply.headers["upgrade"] == "HTTP/1.1"
    models = exchange(served.port, request("GET", "/v1/models", *UPGRADE))
    assert models.status == 200  # a route that answers GET answers it, the upgrade left aside


def test_expect_100_continue_is_checked_against_the_limit_first(served: Served) -> None:
    raw = request("POST", CHAT, JSON, ("Expect", "100-continue"), ("Content-Length", "999999"))
    reply, lines = served.lines(lambda: exchange(served.port, raw))
    message = assert_refused(reply, lines, 413)
    assert message == "request body over 20000 bytes (server.max_body_bytes)"
    assert b"100 Continue" not in reply.head

    def within_the_limit() -> tuple[bytes, int]:  # 100 Continue, then the answer
        with connect(served.port) as sock:
            length = ("Content-Length", str(len(BODY)))
            sock.sendall(request("POST", CHAT, JSON, ("Expect", "100-continue"), length))
            interim = sock.recv(100)
            sock.sendall(BODY)
            return interim, read_reply(sock).status

    (interim, status), _ = served.lines(within_the_limit)
    assert interim.startswith(b"HTTP/1.1 100 Continue")
    assert status == 200
    raw = request("POST", CHAT, JSON, ("Expect", "200-ok"), body=BODY)
    reply, lines = served.lines(lambda: exchange(served.port, raw))
    assert_refused(reply, lines, 417)


def test_a_body_over_the_limit_names_the_limit_and_the_setting(served: Served) -> None:
    raw = chat({"messages": MSG, "pad": "x" * 30000})
    reply, lines = served.lines(lambda: exchange(served.port, raw))
    message = assert_refused(reply, lines, 413)
    assert message == "request body over 20000 bytes (server.max_body_bytes)"
    chunked = request(
        "POST",
        CHAT,
        JSON,
        ("Transfer-Encoding", "chunked"),
        body=b"".join(b"%x\r\n%s\r\n" % (1000, b"x" * 1000) for _ in range(25)) + b"0\r\n\r\n",
    )
    reply, lines = served.lines(lambda: exchange(served.port, chunked))
    assert assert_refused(reply, lines, 413) == message


# -- 7. step mode ----------------------------------------------------------------------------------


@pytest.mark.parametrize("provider", [0, False, "", [], {"name": "ok"}])
def test_step_mode_refuses_a_provider_that_is_not_a_name(served: Served, provider: Any) -> None:
    raw = chat({"provider": provider, "prompt": "hi"}, path="/agent-reach/v1/route")
    reply, lines = served.lines(lambda: exchange(served.port, raw))
    assert_refused(reply, lines, 400)
    assert reply.json()["error"]["param"] == "provider"


def test_step_mode_refuses_an_empty_route(served: Served) -> None:
    raw = chat({"prompt": "hi"}, path="/agent-reach/v1/route?route=")
    reply, lines = served.lines(lambda: exchange(served.port, raw))
    assert_refused(reply, lines, 400)


# -- 8. errors quote little of what was sent ------------------------------------------------------


def test_thousands_of_unknown_names_are_not_echoed(served: Served) -> None:
    names = [f"nope-{i}" for i in range(1500)]
    raw = chat({"messages": MSG, "agent_reach": {"fallback_order": names}})
    reply, lines = served.lines(lambda: exchange(served.port, raw))
    message = assert_refused(reply, lines, 400)
    assert message.startswith("fallback_order names unknown provider(s): 'nope-0, nope-1")
    assert message.endswith("…'")


def test_a_long_route_header_is_not_echoed(served: Served) -> None:
    raw = chat({"messages": MSG}, ("X-Agent-Reach-Route", "r" * 8000))
    reply, lines = served.lines(lambda: exchange(served.port, raw))
    assert assert_refused(reply, lines, 404).count("r") <= 220


def test_raw_header_bytes_come_back_escaped(served: Served) -> None:
    raw = chat({"messages": MSG}, b"X-Agent-Reach-Route: \xff\xfe")
    reply, lines = served.lines(lambda: exchange(served.port, raw))
    message = assert_refused(reply, lines, 404)
    assert "'\\xff\\xfe'" in message, message
    assert "udc" not in message


def test_unknown_paths_answer_in_their_api_shape(served: Served) -> None:
    reply, lines = served.lines(lambda: exchange(served.port, request("GET", "/v1/messages/x")))
    assert_refused(reply, lines, 404, anthropic=True)
    reply, lines = served.lines(lambda: exchange(served.port, request("GET", "/v2/x")))
    assert_refused(reply, lines, 404)


def test_still_answering_after_all_that(served: Served) -> None:
    reply = exchange(served.port, chat({"messages": MSG}))
    assert reply.status == 200
    assert reply.json()["choices"][0]["message"]["content"] == "hello from ok"


def test_a_request_refused_before_its_body_closes_its_connection_soon(served: Served) -> None:
    """Issue 40, 2: a 401 decided on the head while a body within `max_body_bytes` is announced
    and comes a byte at a time: the connection closes after the linger (the trickle dropped),
    it does not stay alive reading the body into memory, holding a connection slot."""
    head = request("POST", CHAT, JSON, ("Content-Length", "15000"), key="wrong")
    with connect(served.port) as sock:
        sock.sendall(head + b"{")
        assert read_reply(sock).status == 401
        start = time.monotonic()
        closed = None
        while closed is None and time.monotonic() - start < 5.0:
            try:
                sock.sendall(b" ")
            except OSError:  # closed under the trickle
                closed = time.monotonic() - start
                break
            closed = closed_within(sock, 0.2)
    assert closed is not None, "still open after 5 s of trickling"
    assert closed < 3.0, closed


# -- 9. the size of a request head (issue 40, 4) ---------------------------------------------------

HEAD_CAP = 32 * 1024  # server.max_head_bytes' default


def send_while_open(sock: socket.socket, pieces: list[bytes]) -> int:
    """Send `pieces` one by one until the proxy stops taking them; how many went."""
    for i, piece in enumerate(pieces):
        try:
            sock.sendall(piece)
        except OSError:
            return i
    return len(pieces)


@pytest.mark.parametrize("path", [CHAT, "/v1/messages", "/v1beta/models/m:generateContent"])
def test_an_unfinished_head_past_the_cap_is_431_at_once(served: Served, path: str) -> None:
    """Headers of 8,000 bytes and no blank line (the review sent 127, a megabyte: held until
    `request_timeout_s`): answered 431 once the head passes `max_head_bytes`, in the path's API
    shape. Ten of them: what is sent fits the socket buffers, so it is all in before the
    answer's linger ends, however slow the machine."""
    lines = [b"X-Pad-%d: %s\r\n" % (i, b"p" * 8000) for i in range(10)]

    def unfinished() -> tuple[Reply, float]:
        with connect(served.port, timeout=5.0) as sock:
            start = time.monotonic()
            sock.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\n".encode())
            send_while_open(sock, lines)
            return read_reply(sock), time.monotonic() - start

    (reply, took), log = served.lines(unfinished)
    expected = f"the request head is over {HEAD_CAP} bytes (server.max_head_bytes)"
    if "v1beta" in path:  # Google's shape
        assert reply.status == 431
        assert reply.json() == {
            "error": {"code": 431, "message": expected, "status": "INVALID_ARGUMENT"}
        }
        assert len(log) == 1, log
    else:
        assert assert_refused(reply, log, 431, anthropic=path == "/v1/messages") == expected
    assert took < 10, took  # at once, not at request_timeout_s


def test_one_header_line_that_never_ends_is_431(served: Served) -> None:
    """A header value sent on and on without its CRLF: llhttp would gather it without end."""

    def endless() -> Reply:
        with connect(served.port, timeout=5.0) as sock:
            sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Endless: ")
            send_while_open(sock, [b"e" * 4096] * 16)
            return read_reply(sock)

    reply, log = served.lines(endless)
    assert assert_refused(reply, log, 431).endswith("(server.max_head_bytes)")


def test_a_whole_head_past_the_cap_is_431(served: Served) -> None:
    """The same cap when the whole head, blank line and all, comes in one write."""
    pads = [(f"X-Pad-{i}", "p" * 7000) for i in range(5)]
    reply, log = served.lines(lambda: exchange(served.port, chat({"messages": MSG}, *pads)))
    assert_refused(reply, log, 431)


def test_a_head_just_under_the_cap_is_served(served: Served) -> None:
    pads = [(f"X-Pad-{i}", "p" * 7000) for i in range(4)]  # 28 KB and the usual lines
    reply = exchange(served.port, chat({"messages": MSG}, *pads))
    assert reply.status == 200, reply.body
    assert reply.json()["choices"][0]["message"]["content"] == "hello from ok"
