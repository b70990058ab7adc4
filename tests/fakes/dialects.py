"""Simulated providers of every dialect on 127.0.0.1, for the `probe` and `init` CLI tests.

One aiohttp server in its own thread (so that CLI subprocesses reach it), each dialect under
its own prefix and on its real path, answering whole and streamed requests the way the
provider does (see PROVIDERS.md; the samples follow the dialect tests' recorded ones):

| prefix            | speaks                                  | health             |
|-------------------|-----------------------------------------|--------------------|
| `/openai`         | `/v1/chat/completions` (SSE)            | `GET /v1/models`   |
| `/ollama`, root   | `/api/chat` (NDJSON)                    | `GET /api/tags`    |
| `/custom`         | Ollama's answers at `/chat`             |                    |
| `/anthropic`      | `/v1/messages` (named SSE events)       |                    |
| `/gemini`         | `/v1beta/models/{model}:generateContent` |                    |
| `/dashscope`      | `/api/v1/services/aigc/…/generation`    |                    |
| `/minimax`        | `/v1/text/chatcompletion(_v2)`          |                    |
| `/ernie`          | `/rpc/2.0/ai_custom/v1/wenxinworkshop/chat/{model}` |        |
| `/antique`        | `/identify`: `{"item", "era", "confidence"}` |               |
| `/data`           | `/generate`: `{"data": {"text": …}}`    |                    |

Anthropic, Gemini and ERNIE answer 401 (in their own error shapes) without the key `KEY` in
their header or query. Every request is recorded (`Received`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

from .embeddings import vector
from .serving import Threaded
from .shapes import GEMINI_BAD_KEY, chunk, completion, sse

KEY = "sk-probe-5a6b7c8d9e-SECRET"
OLLAMA_MODELS = ["llama3.2:latest", "qwen2.5:7b", "bge-m3:latest"]  # the last one embeds
ANTIQUE = {"item": "青花瓷瓶", "era": "明永乐", "confidence": 0.92}
DATA = {"id": "gen-42", "data": {"text": "OK from data"}}


def answer(dialect: str) -> str:
    """The text every answer of `dialect` carries."""
    return f"OK from {dialect}"


@dataclass
class Received:
    """One request the server got."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any


Handler = Any  # async (request, body) -> web.StreamResponse


@dataclass
class DialectServer:
    """The running server; `url(path)` is a full URL on it."""

    port: int = 0
    received: list[Received] = field(default_factory=list)

    def url(self, path: str = "") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    @property
    def host(self) -> str:
        """`127.0.0.1:PORT`, the form of `$OLLAMA_HOST`."""
        return f"127.0.0.1:{self.port}"

    def chats(self, prefix: str) -> list[Received]:
        """The POSTs received under `prefix`."""
        return [r for r in self.received if r.method == "POST" and r.path.startswith(prefix)]

    # -- the dialects ---------------------------------------------------------------------------

    async def openai_models(self, request: web.Request, body: Any) -> web.StreamResponse:
        return web.json_response(
            {"object": "list", "data": [{"id": "gpt-test", "object": "model"}]}
        )

    async def openai(self, request: web.Request, body: Any) -> web.StreamResponse:
        text = answer("openai")
        if body.get("stream"):
            first, rest = text[:3], text[3:]
            return await _stream(
                request,
                sse(chunk({"role": "assistant", "content": first}), chunk({"content": rest})),
                sse(chunk({}, "stop"), "[DONE]"),
            )
        return web.json_response(completion(text, body.get("model") or "gpt-test", id="chatcmpl-1"))

    async def ollama_tags(self, request: web.Request, body: Any) -> web.StreamResponse:
        return web.json_response({"models": [{"name": m, "model": m} for m in OLLAMA_MODELS]})

    async def ollama_embed(self, request: web.Request, body: Any) -> web.StreamResponse:
        inputs = body["input"] if isinstance(body.get("input"), list) else [body.get("input")]
        width = body.get("dimensions") or 1024
        vectors = [vector(body["model"], str(t), width) for t in inputs]
        return web.json_response({"model": body["model"], "embeddings": vectors})

    async def ollama(self, request: web.Request, body: Any) -> web.StreamResponse:
        if not isinstance(body.get("messages"), list):
            return web.json_response({"error": "messages are required"}, status=400)
        model = body.get("model") or OLLAMA_MODELS[0]
        text = answer("ollama")

        def line(content: str, done: bool) -> bytes:
            obj: dict[str, Any] = {
                "model": model,
                "created_at": "2025-01-01T00:00:00Z",
                "message": {"role": "assistant", "content": content},
                "done": done,
            }
            if done:
                obj.update(done_reason="stop", prompt_eval_count=4, eval_count=3)
            return orjson.dumps(obj) + b"\n"

        if body.get("stream", True):  # Ollama streams unless told not to
            return await _stream(
                request,
                line(text[:3], False),
                line(text[3:], False) + line("", True),
                content_type="application/x-ndjson",
            )
        return web.Response(body=line(text, True), content_type="application/json")

    async def anthropic(self, request: web.Request, body: Any) -> web.StreamResponse:
        if request.headers.get("x-api-key") != KEY:
            error = {"type": "authentication_error", "message": "invalid x-api-key"}
            return web.json_response({"type": "error", "error": error}, status=401)
        if "max_tokens" not in body or not request.headers.get("anthropic-version"):
            error = {"type": "invalid_request_error", "message": "max_tokens: Field required"}
            return web.json_response({"type": "error", "error": error}, status=400)
        text = answer("anthropic")
        message = {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "content": [{"type": "text", "text": text}],
            "model": body.get("model") or "claude-test",
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 3, "output_tokens": 3},
        }
        if not body.get("stream"):
            return web.json_response(message)

        def event(name: str, data: dict[str, Any]) -> str:
            return f"event: {name}\ndata: {orjson.dumps({'type': name, **data}).decode()}\n\n"

        start = {**message, "content": [], "stop_reason": None}
        return await _stream(
            request,
            event("message_start", {"message": start})
            + event(
                "content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}
            )
            + event(
                "content_block_delta",
                {"index": 0, "delta": {"type": "text_delta", "text": text[:3]}},
            ),
            event(
                "content_block_delta",
                {"index": 0, "delta": {"type": "text_delta", "text": text[3:]}},
            )
            + event("content_block_stop", {"index": 0})
            + event(
                "message_delta",
                {"delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 3}},
            )
            + event("message_stop", {}),
        )

    async def gemini(self, request: web.Request, body: Any) -> web.StreamResponse:
        if request.headers.get("x-goog-api-key") != KEY and request.query.get("key") != KEY:
            return web.json_response(GEMINI_BAD_KEY, status=400)
        model, _, method = request.match_info["call"].partition(":")
        if not isinstance(body.get("contents"), list) or method not in (
            "generateContent",
            "streamGenerateContent",
        ):
            error = {"code": 400, "message": "bad request", "status": "INVALID_ARGUMENT"}
            return web.json_response({"error": error}, status=400)
        text = answer("gemini")

        def piece(part: str, finish: bool) -> dict[str, Any]:
            candidate: dict[str, Any] = {
                "content": {"parts": [{"text": part}], "role": "model"},
                "index": 0,
            }
            out: dict[str, Any] = {"candidates": [candidate], "modelVersion": model}
            if finish:
                candidate["finishReason"] = "STOP"
                out["usageMetadata"] = {
                    "promptTokenCount": 3,
                    "candidatesTokenCount": 3,
                    "totalTokenCount": 6,
                }
            return out

        if method == "streamGenerateContent":
            return await _stream(request, sse(piece(text[:3], False)), sse(piece(text[3:], True)))
        return web.json_response(piece(text, True))

    async def dashscope(self, request: web.Request, body: Any) -> web.StreamResponse:
        messages = (body.get("input") or {}).get("messages")
        if not isinstance(messages, list):
            return web.json_response(
                {"code": "InvalidParameter", "message": "input.messages is required"}, status=400
            )
        text = answer("dashscope")

        def output(content: str, finish: str) -> dict[str, Any]:
            return {
                "output": {
                    "choices": [
                        {
                            "message": {"role": "assistant", "content": content},
                            "finish_reason": finish,
                        }
                    ]
                },
                "usage": {"total_tokens": 6, "output_tokens": 3, "input_tokens": 3},
                "request_id": "req-1",
            }

        if request.headers.get("X-DashScope-SSE") == "enable":

            def event(n: int, content: str, finish: str) -> str:
                data = orjson.dumps(output(content, finish)).decode()
                return f"id:{n}\nevent:result\n:HTTP_STATUS/200\ndata:{data}\n\n"

            return await _stream(request, event(1, text[:3], "null"), event(2, text[3:], "stop"))
        return web.json_response(output(text, "stop"))

    async def minimax(self, request: web.Request, body: Any) -> web.StreamResponse:
        ok = {"status_code": 0, "status_msg": ""}
        text = answer("minimax")
        if request.path.endswith("_v2"):
            if body.get("stream"):
                return await _stream(
                    request,
                    sse(chunk({"role": "assistant", "content": text[:3]})),
                    sse(chunk({"content": text[3:]}, "stop"), "[DONE]"),
                )
            return web.json_response(
                {
                    "id": "mm-1",
                    "object": "chat.completion",
                    "created": 1_700_000_000,
                    "model": body.get("model") or "MiniMax-Text-01",
                    "choices": [
                        {
                            "index": 0,
                            "finish_reason": "stop",
                            "message": {"role": "assistant", "content": text},
                        }
                    ],
                    "usage": {"total_tokens": 6},
                    "base_resp": ok,
                }
            )
        messages = body.get("messages")
        if not isinstance(messages, list) or any("sender_type" not in m for m in messages):
            return web.json_response(
                {"base_resp": {"status_code": 2013, "status_msg": "invalid params"}}
            )

        def v1(delta: str, finish: bool) -> dict[str, Any]:
            choice: dict[str, Any] = {"index": 0, "delta": delta}
            out: dict[str, Any] = {"model": "abab5.5-chat", "choices": [choice], "base_resp": ok}
            if finish:
                choice["finish_reason"] = "stop"
                out.update(reply=text, usage={"total_tokens": 6})
            return out

        if body.get("stream"):
            return await _stream(request, sse(v1(text[:3], False)), sse(v1(text[3:], True)))
        return web.json_response(
            {
                "created": 1_700_000_000,
                "model": "abab5.5-chat",
                "reply": text,
                "choices": [
                    {"finish_reason": "stop", "messages": [{"sender_type": "BOT", "text": text}]}
                ],
                "usage": {"total_tokens": 6},
                "base_resp": ok,
            }
        )

    async def ernie(self, request: web.Request, body: Any) -> web.StreamResponse:
        if request.query.get("access_token") != KEY:
            return web.json_response(
                {"error_code": 110, "error_msg": "Access token invalid or no longer valid"}
            )
        text = answer("ernie")

        def piece(n: int, result: str, end: bool) -> dict[str, Any]:
            out: dict[str, Any] = {
                "id": "as-1",
                "object": "chat.completion",
                "created": 1_700_000_000,
                "sentence_id": n,
                "is_end": end,
                "result": result,
            }
            if end:
                out.update(finish_reason="normal", usage={"total_tokens": 6})
            return out

        if body.get("stream"):
            return await _stream(
                request, sse(piece(0, text[:3], False)), sse(piece(1, text[3:], True))
            )
        whole = piece(0, text, True)
        del whole["sentence_id"], whole["is_end"]
        return web.json_response(whole)

    async def antique(self, request: web.Request, body: Any) -> web.StreamResponse:
        return web.json_response(ANTIQUE)

    async def data(self, request: web.Request, body: Any) -> web.StreamResponse:
        return web.json_response(DATA)

    # -- running --------------------------------------------------------------------------------

    def _route(self, handler: Handler) -> Any:
        async def handle(request: web.Request) -> web.StreamResponse:
            raw = await request.read()
            try:
                body = orjson.loads(raw) if raw else {}
            except orjson.JSONDecodeError:
                body = {}
            self.received.append(
                Received(
                    request.method, request.path, dict(request.query), dict(request.headers), body
                )
            )
            return await handler(request, body if isinstance(body, dict) else {})

        return handle

    def app(self) -> web.Application:
        app = web.Application()
        get, post = app.router.add_get, app.router.add_post
        get("/openai/v1/models", self._route(self.openai_models))
        post("/openai/v1/chat/completions", self._route(self.openai))
        for prefix in ("", "/ollama"):
            get(f"{prefix}/api/tags", self._route(self.ollama_tags))
            post(f"{prefix}/api/chat", self._route(self.ollama))
            post(f"{prefix}/api/embed", self._route(self.ollama_embed))
        post("/custom/chat", self._route(self.ollama))
        post("/anthropic/v1/messages", self._route(self.anthropic))
        post("/gemini/v1beta/models/{call}", self._route(self.gemini))
        post(
            "/dashscope/api/v1/services/aigc/text-generation/generation",
            self._route(self.dashscope),
        )
        post("/minimax/v1/text/chatcompletion", self._route(self.minimax))
        post("/minimax/v1/text/chatcompletion_v2", self._route(self.minimax))
        post("/ernie/rpc/2.0/ai_custom/v1/wenxinworkshop/chat/{model}", self._route(self.ernie))
        post("/antique/identify", self._route(self.antique))
        post("/data/generate", self._route(self.data))
        return app


@contextmanager
def running() -> Iterator[DialectServer]:
    """A `DialectServer` on a free port of 127.0.0.1, in its own thread, for the block."""
    server, threaded = DialectServer(), Threaded()
    server.port = threaded.serve(server.app())
    try:
        yield server
    finally:
        threaded.stop()


async def _stream(
    request: web.Request, *pieces: str | bytes, content_type: str = "text/event-stream"
) -> web.StreamResponse:
    """A streamed answer written piece by piece."""
    resp = web.StreamResponse(headers={"Content-Type": content_type})
    await resp.prepare(request)
    for piece in pieces:
        await resp.write(piece.encode() if isinstance(piece, str) else piece)
        await asyncio.sleep(0)
    await resp.write_eof()
    return resp
