"""Simulated providers on 127.0.0.1 for the tests: one aiohttp server, one scenario per path.

`/s/<scenario>/v1/chat/completions` (OpenAI), `/s/<scenario>/api/chat` (Ollama),
`/s/<scenario>/v1/messages` (Anthropic) and the health URLs `/s/<scenario>/v1/models`,
`/s/<scenario>/api/tags`. The server runs in its own
thread with its own loop, so that both in-process tests and CLI subprocesses can reach it.
Every chat request it receives is recorded (headers and JSON body) for assertions.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

ECHOED_KEY_PREFIX = "Incorrect API key provided: "
# What the `claude` scenario (a native Anthropic provider) answers.
CLAUDE_THINKING = {"type": "thinking", "thinking": "Hmm.", "signature": "sig-EqQBCkYIBxgC"}
CLAUDE_TEXT = "hello from claude"
CLAUDE_USAGE = {"input_tokens": 11, "cache_read_input_tokens": 5, "output_tokens": 7}
KEYED_GOOD = "sk-keyed-good-5e6f7a8b"  # the one key the `keyed` scenario accepts


def completion(content: str, model: str = "gpt-test") -> dict[str, Any]:
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
    }


def sse(obj: Any) -> bytes:
    return b"data: " + (obj if isinstance(obj, bytes) else orjson.dumps(obj)) + b"\n\n"


def anthropic_event(name: str, data: dict[str, Any]) -> bytes:
    """One named Anthropic stream event."""
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps({"type": name, **data}) + b"\n\n"


def _delta(kind: str, text: str) -> dict[str, str]:
    return {"type": f"{kind}_delta", kind: text}


def chunk(
    content: str | None = None, finish: str | None = None, role: bool = False
) -> dict[str, Any]:
    delta: dict[str, Any] = {}
    if role:
        delta["role"] = "assistant"
    if content is not None:
        delta["content"] = content
    return {
        "id": "chatcmpl-stream",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": "gpt-test",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


TOOL_WORD = "agent-reach-tool-ok"


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


def shell_call(tools: list[Any]) -> tuple[str, str]:
    """(name, JSON arguments) of a call to the first shell-like tool offered (Codex's
    `exec_command`/`shell`, Claude Code's `Bash`), its first required string field set to an
    `echo` command; else Codex's JavaScript `exec`; else the first tool with no arguments."""
    fns = [t.get("function", t) for t in tools if isinstance(t, dict)]
    for wanted in ("exec_command", "shell", "Bash"):
        for fn in fns:
            if fn.get("name") == wanted:
                params = fn.get("parameters") or {}
                required = params.get("required") or list(params.get("properties") or {})
                field = required[0] if required else "command"
                value: Any = f"echo {TOOL_WORD}"
                if (params.get("properties") or {}).get(field, {}).get("type") == "array":
                    value = ["bash", "-lc", value]
                return wanted, orjson.dumps({field: value}).decode()
    for fn in fns:  # Codex's default model: a JavaScript `exec` that calls the nested tools
        if fn.get("name") == "exec":
            code = f'const r = await tools.exec_command({{cmd: "echo {TOOL_WORD}"}}); text(r);'
            return "exec", orjson.dumps({"input": code}).decode()
    return (str(fns[0].get("name")) if fns else "none"), "{}"


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
    loop: asyncio.AbstractEventLoop | None = None
    switch: str = "ok"  # what the `switch` scenario does: the name of another scenario
    cancelled: list[str] = field(default_factory=list)  # requests whose client went away
    firehose_bytes: int = 0  # content the `firehose` scenario got written

    def url(self, scenario: str, kind: str = "openai") -> str:
        tail = {
            "ollama": "/api/chat",
            "responses": "/v1/responses",
            "anthropic": "/v1/messages",
        }.get(kind, "/v1/chat/completions")
        return f"http://127.0.0.1:{self.port}/s/{scenario}{tail}"

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
        self.switch = "ok"

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
        if scenario == "ollama-readme":  # the local model of examples/config.yaml
            return web.json_response({"models": [{"name": "qwen2.5:7b"}]})
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
        error = {
            "message": ECHOED_KEY_PREFIX + key,
            "type": "invalid_request_error",
            "code": "invalid_api_key",
        }
        return web.json_response({"error": error}, status=401)

    async def s_echourl(self, request: web.Request, body: Any, stream: bool) -> web.StreamResponse:
        """A 401 that quotes the URL it was asked, query (and so an `auth_query` key) included,
        as it came: URL-encoded."""
        error = {"message": f"bad key in {request.raw_path}", "type": "invalid_request_error"}
        return web.json_response({"error": error}, status=401)

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

    async def s_server(self, request: web.Request, body: Any, stream: bool) -> web.StreamResponse:
        return web.json_response(
            {"error": {"message": "internal error", "type": "server_error"}}, status=500
        )

    async def s_badreq(self, request: web.Request, body: Any, stream: bool) -> web.StreamResponse:
        error = {
            "message": "Invalid value for 'top_logprobs': expected an integer",
            "type": "invalid_request_error",
            "code": "invalid_value",
        }
        return web.json_response({"error": error}, status=400)

    async def s_blocked(self, request: web.Request, body: Any, stream: bool) -> web.StreamResponse:
        error = {
            "message": "The response was filtered due to the prompt triggering the content policy",
            "type": "invalid_request_error",
            "code": "content_filter",
        }
        return web.json_response({"error": error}, status=400)

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

    async def s_nofinish(self, request: web.Request, body: Any, stream: bool) -> web.StreamResponse:
        # Content, then a clean end of the body with no finish reason and no [DONE]
        # (Portkey #1797: such a stream was passed on as complete).
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(sse(chunk("half an ", role=True)))
        await resp.write(sse(chunk("answer")))
        return resp

    async def s_context(self, request: web.Request, body: Any, stream: bool) -> web.StreamResponse:
        error = {
            "message": "This model's maximum context length is 131072 tokens",
            "type": "invalid_request_error",
            "code": "context_length_exceeded",
        }
        return web.json_response({"error": error}, status=400)

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

    async def s_slow(self, request: web.Request, body: Any, stream: bool) -> web.StreamResponse:
        try:
            await asyncio.sleep(0.6)
        except asyncio.CancelledError:
            self.cancelled.append("slow")
            raise
        if stream:
            return await self.s_ok(request, body, stream)
        return web.json_response(completion("hello from slow"))

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
        """Answers agent-reach cannot carry: `tool_calls: ["x"]`; a stream whose second chunk
        has `delta.content: 5`."""
        if stream:
            bad = chunk("partial ", role=True)
            bad["choices"][0]["delta"]["content"] = 5
            return await self._stream_chunks(request, [chunk("partial ", role=True), bad])
        answer = completion("x")
        answer["choices"][0]["message"] = {
            "role": "assistant",
            "content": None,
            "tool_calls": ["x"],
        }
        return web.json_response(answer)

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

    async def s_toolcall(self, request: web.Request, body: Any, stream: bool) -> web.StreamResponse:
        """An agent's model: asks to run a shell command with the first shell-like tool it is
        offered, then, given the command's output, answers with a text that quotes it."""
        messages = body.get("messages") or []
        last = messages[-1] if messages else {}
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
        answer = completion("", body.get("model") or "gpt-test")
        answer["choices"][0]["message"] = {
            "role": "assistant",
            "content": None,
            "tool_calls": [call],
        }
        answer["choices"][0]["finish_reason"] = "tool_calls"
        return web.json_response(answer)

    async def _stream_chunks(
        self, request: web.Request, chunks: list[dict[str, Any]]
    ) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for c in chunks:
            await resp.write(sse(c))
        await resp.write(sse(b"[DONE]"))
        return resp

    async def responses(self, request: web.Request) -> web.StreamResponse:
        """A provider that speaks the Responses API itself (`format: responses`)."""
        scenario = request.match_info["scenario"]
        body = orjson.loads(await request.read())
        self.received.append(Received(scenario, request.path, dict(request.headers), body))
        if scenario == "auth":
            return await self.s_auth(request, body, False)
        answer = responses_answer(body.get("model") or "gpt-test")
        if not body.get("stream"):
            return web.json_response(answer)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for n, (kind, data) in enumerate(responses_events(answer)):
            event = {"type": kind, "sequence_number": n, **data}
            await resp.write(f"event: {kind}\n".encode() + sse(event))
        return resp

    async def s_claude(self, request: web.Request, body: Any, stream: bool) -> web.StreamResponse:
        """A native Anthropic provider: a thinking block with its signature, then text."""
        return await self._claude(request, body, stream, cut=False)

    async def s_claudecut(
        self, request: web.Request, body: Any, stream: bool
    ) -> web.StreamResponse:
        """The native Anthropic stream, cut after its first content event."""
        return await self._claude(request, body, stream, cut=True)

    async def _claude(
        self, request: web.Request, body: Any, stream: bool, *, cut: bool
    ) -> web.StreamResponse:
        message = {
            "id": "msg_01ClaudeNative",
            "type": "message",
            "role": "assistant",
            "content": [CLAUDE_THINKING, {"type": "text", "text": CLAUDE_TEXT}],
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
        thinking = {**CLAUDE_THINKING, "thinking": "", "signature": ""}
        for name, data in (
            ("message_start", {"message": start}),
            ("content_block_start", {"index": 0, "content_block": thinking}),
            ("ping", {}),
            ("content_block_delta", {"index": 0, "delta": _delta("thinking", "Hmm.")}),
            (
                "content_block_delta",
                {
                    "index": 0,
                    "delta": {"type": "signature_delta", "signature": CLAUDE_THINKING["signature"]},
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
            await resp.write(anthropic_event(name, data))
            if name == "content_block_delta" and cut:
                await asyncio.sleep(0.05)
                assert request.transport is not None
                request.transport.close()  # the connection dies after the first content
                return resp
        return resp

    # -- running -----------------------------------------------------------------------------

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/s/{scenario}/v1/models", self.models)
        app.router.add_get("/s/{scenario}/api/tags", self.models)
        app.router.add_post("/s/{scenario}/v1/chat/completions", self.chat)
        app.router.add_post("/s/{scenario}/api/chat", self.chat)
        app.router.add_post("/s/{scenario}/v1/responses", self.responses)
        app.router.add_post("/s/{scenario}/v1/messages", self.chat)
        return app

    def start(self) -> None:
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self.loop = loop
            runner = web.AppRunner(
                self.app(), access_log=None, shutdown_timeout=0.1, handler_cancellation=True
            )
            loop.run_until_complete(runner.setup())
            site = web.TCPSite(runner, "127.0.0.1", 0)
            loop.run_until_complete(site.start())
            self.port = runner.addresses[0][1]
            self._runner = runner
            ready.set()
            loop.run_forever()
            loop.run_until_complete(runner.cleanup())
            loop.close()

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        ready.wait(10)

    def stop(self) -> None:
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)


def proxy_config(providers: list[dict[str, Any]], **top: Any) -> dict[str, Any]:
    """A config for tests: no health checks, state in memory, circuits that never open, and
    providers that take any model or none (the simulated ones do)."""
    return {
        "version": "0.3.2",
        "health": {"mode": "off"},
        "state": "memory://",
        "circuit": {"failures": 1000, "cooldown_s": 0, "auth_cooldown_s": 0},
        "defaults": {"model_map": {"*": ""}},
        "providers": providers,
        **top,
    }


def refused_url() -> str:
    """An endpoint on a port where nothing listens."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1/chat/completions"
