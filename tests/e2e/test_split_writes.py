"""Requests whose head and body arrive in separate TCP segments, as httpx (the OpenAI Python
SDK's transport) sends them, answered by a provider slower than `server.request_timeout_s`
(2 s here): every answer is a 200 with its whole body, plain and streamed, 20 in a row on each
of four clients at once (issue 18: the body segment was taken for a new request's head, and
its 408 timer cut the answer, or wrote `HTTP/1.1 408` into the chunked stream under way).
An interrupted stream's access line says so, with the provider and the reason."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import openai
import pytest

from ..fakes.upstream import Upstream, proxy_config
from ..rawhttp import connect, read_reply, request
from .test_proxy import MSG, Proxy, start, stop

ROUNDS = 6  # each answer 2.4 s: 24 answers slower than the request timeout, 4 clients at once
ANSWER = "hello from late"


@pytest.fixture(scope="module")
def proxy(upstream: Upstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    late = {"name": "late", "endpoint": upstream.url("late"), "timeout": {"read": 10000}}
    config = proxy_config(
        [late, {"name": "streamcut", "endpoint": upstream.url("streamcut")}],
        fallback_order=["late"],
        server={"request_timeout_s": 2},
    )
    p = start(config, tmp_path_factory.mktemp("split"), upstream)
    yield p
    assert stop(p) == 0


def sdk_plain(proxy: Proxy) -> str:
    answer = proxy.client(timeout=20).chat.completions.create(model="m", messages=MSG)
    return answer.choices[0].message.content or ""


def sdk_streamed(proxy: Proxy) -> str:
    stream = proxy.client(timeout=20).chat.completions.create(model="m", messages=MSG, stream=True)
    return "".join(c.choices[0].delta.content or "" for c in stream if c.choices)


class SplitClient:
    """One keep-alive connection that writes each request's head, then its body, as two
    segments (Nagle off), like httpx."""

    def __init__(self, port: int) -> None:
        self.sock = connect(port, timeout=20)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buffer = bytearray()

    def send(self, stream: bool) -> tuple[int, bytes]:
        body = json.dumps({"model": "m", "messages": MSG, "stream": stream}).encode()
        head = request("POST", "/v1/chat/completions", ("Content-Type", "application/json"))
        framed = head.replace(b"\r\n\r\n", b"\r\nContent-Length: %d\r\n\r\n" % len(body), 1)
        self.sock.sendall(framed)
        self.sock.sendall(body)
        reply = read_reply(self.sock, self.buffer)
        return reply.status, reply.body


def raw_text(status: int, body: bytes, stream: bool) -> str:
    assert status == 200, (status, body[:300])
    if not stream:
        return str(json.loads(body)["choices"][0]["message"]["content"])
    events = [line[6:] for line in body.split(b"\n") if line.startswith(b"data: ")]
    assert events[-1] == b"[DONE]", body[-300:]
    chunks = [json.loads(e) for e in events[:-1]]
    return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)


def rounds(ask: Callable[[], str], out: list[str]) -> None:
    for _ in range(ROUNDS):
        try:
            out.append(ask())
        except Exception as exc:  # every failure is what the test reports
            out.append(f"{type(exc).__name__}: {exc}")


def test_a_provider_slower_than_the_request_timeout_answers_httpx_and_split_writes(
    proxy: Proxy,
) -> None:
    plain, streamed = SplitClient(proxy.port), SplitClient(proxy.port)
    askers: dict[str, Callable[[], str]] = {
        "sdk": lambda: sdk_plain(proxy),
        "sdk stream": lambda: sdk_streamed(proxy),
        "split": lambda: raw_text(*plain.send(False), False),
        "split stream": lambda: raw_text(*streamed.send(True), True),
    }
    results: dict[str, list[str]] = {name: [] for name in askers}
    threads = [
        threading.Thread(target=rounds, args=(ask, results[name])) for name, ask in askers.items()
    ]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    elapsed = time.monotonic() - started
    for client in (plain, streamed):
        client.sock.close()
    wrong = {name: [r for r in got if r != ANSWER] for name, got in results.items()}
    assert all(len(got) == ROUNDS for got in results.values()), results
    assert not any(wrong.values()), wrong
    assert elapsed > ROUNDS * 2.4  # each answer did take longer than the request timeout


def test_an_interrupted_stream_is_logged_as_interrupted(proxy: Proxy, tmp_path: Path) -> None:
    cut = {"X-Agent-Reach-Fallback-Order": "streamcut"}
    stream = proxy.client().chat.completions.create(
        model="m", messages=MSG, stream=True, extra_headers=cut
    )
    got: list[str] = []
    with pytest.raises(openai.APIError, match="failed mid-stream"):
        got.extend(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert got[0] == "partial "
    log = Path(proxy.proc.args[2]).parent / "proxy.log"  # type: ignore[index]
    deadline = time.monotonic() + 5
    lines: list[str] = []
    while time.monotonic() < deadline:
        lines = [ln for ln in log.read_text().splitlines() if "POST /v1/chat/completions" in ln]
        if any("streamcut" in ln for ln in lines):
            break
        time.sleep(0.05)
    line = next(ln for ln in lines if "streamcut" in ln)
    assert " 200 interrupted " in line, line
    assert "provider=- " in line, line
    assert "cut=streamcut:" in line, line
