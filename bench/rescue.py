"""Streams rescued: cut, stalled and malformed streams replayed through each client API.

    .venv/bin/python bench/rescue.py [--answers 12] [--concurrency 8] [--json]

A simulated primary streams an answer (random words, sent in pieces of 1 to 6 characters, so
cuts fall inside words) and, after a random share of it, fails in one of four ways: its
connection is closed (`cut`), it goes silent (`stall`, the route's `stall_ms: 200`), it sends
two malformed frames and closes (`garbage`), or it sends one malformed frame and carries on
soundly (`one-bad`, which needs no rescue). The next provider of the route (`continue_on_cut:
true`) finishes the answer the way a model may: carrying on exactly (`exact`), starting over
from the beginning (`top`) or from the last word it was given (`word`), each asked with an
instruction; or continuing a prefill (`prefill`, `assistant_prefill: true`). Each combination is
sent through `agent-reach serve` by the official SDKs, as a Chat Completions, Responses and
Messages stream. Printed: the share of complete answers (the client read exactly the answer,
and the stream ended cleanly), the characters the client read twice (target 0), and the
characters the continuing model repeated (what the client would read twice without the trim).
Traffic stays on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import tempfile
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import openai
import yaml
from aiohttp import web

from agent_reach.net.ports import free_port
from common import Processes, agent_reach_serve, sse_chunk
from tests.fakes.serving import Threaded

FAILURES = ("cut", "stall", "garbage", "one-bad")
STYLES = ("exact", "top", "word", "prefill")
APIS = ("chat", "responses", "messages")
WORDS = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "a",
    "lazy",
    "dog",
    "while",
    "seven",
    "tired",
    "agents",
    "route",
    "every",
    "token",
    "through",
    "one",
    "small",
    "proxy",
    "that",
    "never",
    "repeats",
    "itself",
    "or",
    "loses",
    "a",
    "word",
    "of",
    "what",
    "was",
    "said",
]
STALL_MS = 200


def answer(n: int) -> str:
    """Answer `n`: 30 to 60 words, the same for the primary and the continuation; no word
    twice in a row (see docs/decisions.md: a doubled word right after a cut between words
    reads as a restart)."""
    rng = random.Random(n)
    words: list[str] = []
    length = rng.randint(30, 60)
    while len(words) < length:
        word = rng.choice(WORDS)
        if not words or word != words[-1]:
            words.append(word)
    return " ".join(words).capitalize() + "."


def pieces(text: str, rng: random.Random) -> list[str]:
    out, i = [], 0
    while i < len(text):
        step = rng.randint(1, 6)
        out.append(text[i : i + step])
        i += step
    return out


def chunk(content: str | None = None, finish: str | None = None) -> bytes:
    return sse_chunk(content, finish, "bench")


BAD = b'data: {"choices": [\n\n'


class Upstream:
    """The simulated providers: `/p/<failure>` primaries and `/c/<style>` continuations."""

    def __init__(self) -> None:
        self.repeated = 0  # characters the continuations sent again
        self.port = 0

    async def primary(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        n = int(body["messages"][0]["content"].split("#")[1])
        failure = request.match_info["name"]
        text = answer(n)
        rng = random.Random(n * 7 + len(failure))
        parts = pieces(text, rng)
        stop = rng.randint(1, len(parts) - 1)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i, part in enumerate(parts):
            if i == stop:
                if failure == "one-bad":
                    await resp.write(BAD)
                    continue_sound = True
                else:
                    continue_sound = False
                if not continue_sound:
                    if failure == "stall":
                        await asyncio.sleep(30)
                    if failure == "garbage":
                        await resp.write(BAD * 2)
                    assert request.transport is not None
                    request.transport.close()
                    return resp
            await resp.write(chunk(part))
        await resp.write(chunk(finish="stop") + b"data: [DONE]\n\n")
        return resp

    async def continuation(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        messages = body["messages"]
        text = answer(int(messages[0]["content"].split("#")[1]))
        partial = next(m["content"] for m in reversed(messages) if m["role"] == "assistant")
        style = request.match_info["name"]
        if messages[-1]["role"] == "assistant" or style == "exact":
            start = len(partial)  # a prefill (or a model that does as it is told)
        elif style == "top":
            start = 0
        else:
            start = partial.rstrip().rfind(" ") + 1
        self.repeated += len(partial) - start
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for part in pieces(text[start:], random.Random(len(partial))):
            await resp.write(chunk(part))
        await resp.write(chunk(finish="stop") + b"data: [DONE]\n\n")
        return resp

    def start(self) -> None:
        app = web.Application()
        app.router.add_post("/p/{name}/v1/chat/completions", self.primary)
        app.router.add_post("/c/{name}/v1/chat/completions", self.continuation)
        self.port = Threaded().serve(app, cancel=True)


def config(port: int) -> dict[str, Any]:
    base = f"http://127.0.0.1:{port}"
    providers: list[dict[str, Any]] = [
        {"name": f"p-{f}", "endpoint": f"{base}/p/{f}/v1/chat/completions"} for f in FAILURES
    ]
    for style in STYLES:
        provider = {"name": f"c-{style}", "endpoint": f"{base}/c/{style}/v1/chat/completions"}
        if style == "prefill":
            provider["assistant_prefill"] = True
        providers.append(provider)
    for p in providers:
        p |= {"api_key_env": "", "model_map": {"*": "bench"}, "timeout": {"read": 5000}}
    routes = {
        f"{f}-{s}": {
            "providers": [f"p-{f}", f"c-{s}"],
            "continue_on_cut": True,
            **({"stall_ms": STALL_MS} if f == "stall" else {}),
        }
        for f in FAILURES
        for s in STYLES
    }
    return {
        "health": {"mode": "off"},
        "state": "memory://",
        "circuit": {"failures": 1000, "cooldown_s": 0},
        "providers": providers,
        "routes": routes,
    }


@dataclass
class Read:
    text: str
    clean: bool  # the stream ended as a complete answer ends in its API


def read_chat(base: str, route: str, prompt: str) -> Read:
    client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0)
    headers = {"X-Agent-Reach-Route": route}
    with client:
        try:
            stream = client.chat.completions.create(
                model="m",
                messages=[{"role": "user", "content": prompt}],
                stream=True,
                extra_headers=headers,
            )
            text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        except openai.APIError:
            return Read("", False)
    return Read(text, True)


def read_responses(base: str, route: str, prompt: str) -> Read:
    client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0)
    text, clean = [], False
    with client:
        stream = client.responses.create(
            model="m", input=prompt, stream=True, extra_headers={"X-Agent-Reach-Route": route}
        )
        for event in stream:
            if event.type == "response.output_text.delta":
                text.append(event.delta)
            clean = event.type == "response.completed"
    return Read("".join(text), clean)


def read_messages(base: str, route: str, prompt: str) -> Read:
    client = anthropic.Anthropic(base_url=base, api_key="unused", max_retries=0)
    text = []
    with client:
        try:
            with client.messages.stream(
                model="m",
                max_tokens=1000,
                messages=[{"role": "user", "content": prompt}],
                extra_headers={"X-Agent-Reach-Route": route},
            ) as stream:
                text = list(stream.text_stream)
                clean = stream.get_final_message().stop_reason == "end_turn"
        except anthropic.APIError:
            return Read("".join(text), False)
    return Read("".join(text), clean)


READERS: dict[str, Callable[[str, str, str], Read]] = {
    "chat": read_chat,
    "responses": read_responses,
    "messages": read_messages,
}


def ready(url: str, timeout_s: float) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        try:
            with urllib.request.urlopen(url, timeout=1):
                return True
        except OSError:
            time.sleep(0.05)
    return False


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--answers", type=int, default=12, help="answers per combination")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    upstream = Upstream()
    upstream.start()
    port = free_port()
    rows: dict[tuple[str, str, str], list[tuple[bool, int]]] = {}
    with Processes() as procs, tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "rescue.yaml"
        path.write_text(yaml.safe_dump(config(upstream.port)))
        procs.start(agent_reach_serve(path, port), log=Path(tmp) / "proxy.log")
        base = f"http://127.0.0.1:{port}"
        if not ready(base + "/healthz", 15):
            raise SystemExit((Path(tmp) / "proxy.log").read_text())
        jobs = [
            (f, s, api, n)
            for f in FAILURES
            for s in STYLES
            for api in APIS
            for n in range(args.answers)
        ]

        def one(job: tuple[str, str, str, int]) -> None:
            failure, style, api, n = job
            expected = answer(n)
            got = READERS[api](base, f"{failure}-{style}", f"answer #{n}")
            complete = got.clean and got.text == expected
            twice = (
                max(0, len(got.text) - len(expected)) if got.text.endswith(expected[-20:]) else 0
            )
            rows.setdefault((failure, style, api), []).append((complete, twice))

        start = time.perf_counter()
        with ThreadPoolExecutor(args.concurrency) as pool:
            list(pool.map(one, jobs))
        elapsed = time.perf_counter() - start
    results = {
        "-".join(key): {
            "complete": sum(c for c, _ in runs) / len(runs),
            "duplicated_chars": sum(t for _, t in runs),
        }
        for key, runs in sorted(rows.items())
    }
    total = [r for runs in rows.values() for r in runs]
    summary = {
        "answers": len(total),
        "complete": sum(c for c, _ in total) / len(total),
        "duplicated_chars": sum(t for _, t in total),
        "repeated_by_the_models": upstream.repeated,
        "seconds": round(elapsed, 1),
    }
    if args.json:
        print(json.dumps({"summary": summary, "combinations": results}, indent=2))
        return
    print(f"{'failure':<9} {'continuation':<13} {'api':<10} {'complete':>9} {'read twice':>11}")
    for (failure, style, api), runs in sorted(rows.items()):
        share = sum(c for c, _ in runs) / len(runs)
        twice = sum(t for _, t in runs)
        print(f"{failure:<9} {style:<13} {api:<10} {share:>8.0%} {twice:>11}")
    print(
        f"\n{summary['answers']} answers in {summary['seconds']} s: {summary['complete']:.0%} "
        f"complete, {summary['duplicated_chars']} characters read twice; the continuing models "
        f"repeated {summary['repeated_by_the_models']} characters (what the client would have "
        "read twice without the trim)"
    )


if __name__ == "__main__":
    main()
