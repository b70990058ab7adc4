"""The simulated providers of `agent-reach demo`, on one aiohttp app (offline, 127.0.0.1):

- `/cloud/v1/…`: an OpenAI-format API that rejects every key with 401;
- `/v1/chat/completions` (OpenAI, SSE when streamed) and `/api/chat` (native Ollama, NDJSON),
  with `/v1/models` and `/api/tags`: one small model. Offered a shell tool (Codex CLI's
  `exec_command`/`shell` or its JavaScript `exec`, Claude Code's `Bash`), it asks to run
  `echo agent-reach-demo`, then answers with what the command printed; asked for JSON of a
  schema (Gemini CLI's routing classifier), it answers JSON of that shape; otherwise it
  explains quantum annealing;
- `/v1/embeddings` (OpenAI): `demo-embed`, the same unit vector for the same text.

A connection-refused provider needs no server: a free port nothing listens on.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    from aiohttp import web

ANSWER = (
    "Quantum annealing searches for the lowest-energy state of a problem encoded in qubits, "
    "letting quantum tunnelling carry it through energy barriers instead of over them."
)
MODELS = ("qwen2:72b", "qwen2.5-coder:7b")  # what the simulated Ollama lists
TOOL_WORD = "agent-reach-demo"
COMMAND = f"echo {TOOL_WORD}"
_USAGE = {"prompt_tokens": 14, "completion_tokens": 31, "total_tokens": 45}


def reply(body: dict[str, Any]) -> tuple[str, dict[str, str] | None]:
    """What the model says to a chat request: (text, None), or ("", a tool call's name and
    JSON arguments) when it is offered a tool and has not run it yet."""
    messages = body.get("messages") or []
    last = messages[-1] if messages and isinstance(messages[-1], dict) else {}
    fmt = body.get("response_format")
    schema = (fmt.get("json_schema") or {}).get("schema") if isinstance(fmt, dict) else None
    if schema is not None:
        return orjson.dumps(schema_instance(schema)).decode(), None
    if last.get("role") == "tool":
        ran = TOOL_WORD in str(last.get("content"))
        return (
            f"The command printed: {TOOL_WORD}" if ran else "The command printed nothing."
        ), None
    tools = body.get("tools") or []
    if not tools:
        return ANSWER, None
    name, arguments = shell_call(tools, COMMAND)
    return "", {"name": name, "arguments": arguments}


def schema_instance(schema: Any) -> Any:
    """A value that `schema` (JSON Schema) accepts: its enums' first values, strings, the
    minimum of numbers, every property of an object."""
    if not isinstance(schema, dict):
        return None
    if schema.get("enum"):
        return schema["enum"][0]
    kind = schema.get("type")
    kind = kind[0] if isinstance(kind, list) else kind
    if kind == "object" or "properties" in schema:
        props = schema.get("properties") or {}
        return {name: schema_instance(sub) for name, sub in props.items()}
    if kind == "array":
        return [schema_instance(schema.get("items"))]
    low = schema.get("minimum", 1)
    return {"string": "agent-reach", "integer": low, "number": low, "boolean": True}.get(str(kind))


def shell_call(tools: list[Any], command: str) -> tuple[str, str]:
    """(name, JSON arguments) of a call to the first shell-like tool offered (Codex's
    `exec_command`/`shell`, Claude Code's `Bash`, Gemini CLI's and Qwen Code's
    `run_shell_command`, OpenCode's `bash`), its first required string field set to
    `command`; else Codex's JavaScript `exec` running it; else the first tool, no arguments."""
    fns = [t.get("function", t) for t in tools if isinstance(t, dict)]
    for wanted in ("exec_command", "shell", "Bash", "run_shell_command", "bash"):
        for fn in fns:
            if fn.get("name") == wanted:
                params = fn.get("parameters") or {}
                required = params.get("required") or list(params.get("properties") or {})
                field = required[0] if required else "command"
                value: Any = command
                if (params.get("properties") or {}).get(field, {}).get("type") == "array":
                    value = ["bash", "-lc", command]
                return wanted, orjson.dumps({field: value}).decode()
    for fn in fns:  # Codex's default model: a JavaScript `exec` that calls the nested tools
        if fn.get("name") == "exec":
            code = f'const r = await tools.exec_command({{cmd: "{command}"}}); text(r);'
            return "exec", orjson.dumps({"input": code}).decode()
    return (str(fns[0].get("name")) if fns else "none"), "{}"


def app() -> web.Application:
    """The simulated providers (see the module docstring)."""
    from aiohttp import web

    async def unauthorized(_: web.Request) -> web.Response:
        error = {"message": "Incorrect API key provided", "type": "invalid_request_error"}
        return web.json_response({"error": {**error, "code": "invalid_api_key"}}, status=401)

    async def tags(_: web.Request) -> web.Response:
        return web.json_response({"models": [{"name": m, "size": 41_000_000} for m in MODELS]})

    async def models(_: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": m} for m in MODELS]})

    app = web.Application()
    app.router.add_get("/cloud/v1/models", unauthorized)
    app.router.add_post("/cloud/v1/chat/completions", unauthorized)
    app.router.add_get("/api/tags", tags)
    app.router.add_post("/api/chat", _ollama)
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/chat/completions", _openai)
    app.router.add_post("/v1/embeddings", _embeddings)
    return app


EMBED_MODEL, EMBED_WIDTH = "demo-embed", 64  # the simulated embedding model and its width


async def _embeddings(request: web.Request) -> web.Response:
    """OpenAI's embeddings API: each input's vector, the same for the same text (a hash of it),
    unit length, `dimensions` wide (default `EMBED_WIDTH`)."""
    from aiohttp import web

    body = await request.json()
    given = body.get("input")
    texts = [given] if isinstance(given, str) else list(given or [])
    width = int(body.get("dimensions") or EMBED_WIDTH)
    data = [
        {"object": "embedding", "index": i, "embedding": _vector(str(text), width)}
        for i, text in enumerate(texts)
    ]
    tokens = sum(len(str(t).split()) for t in texts)
    usage = {"prompt_tokens": tokens, "total_tokens": tokens}
    return web.json_response({"object": "list", "data": data, "model": EMBED_MODEL, "usage": usage})


def _vector(text: str, width: int) -> list[float]:
    import hashlib
    import math

    raw = hashlib.shake_256(text.encode()).digest(width)
    values = [b / 127.5 - 1.0 for b in raw]
    norm = math.sqrt(sum(v * v for v in values)) or 1.0
    return [round(v / norm, 6) for v in values]


async def _ollama(request: web.Request) -> web.StreamResponse:
    from aiohttp import web

    body = await request.json()
    text, call = reply(body)
    model = body.get("model") or MODELS[0]
    done = {
        "model": model,
        "done": True,
        "done_reason": "stop",
        "prompt_eval_count": 14,
        "eval_count": 31,
    }
    if call is not None:
        message = {"role": "assistant", "content": "", "tool_calls": [_ollama_call(call)]}
        frames = [{**done, "message": message}]
    elif body.get("stream"):
        frames = [
            {"model": model, "message": {"role": "assistant", "content": w}, "done": False}
            for w in _pieces(text)
        ]
        frames.append({**done, "message": {"role": "assistant", "content": ""}})
    else:
        await asyncio.sleep(0.005)  # a fast local model
        return web.json_response({**done, "message": {"role": "assistant", "content": text}})
    if not body.get("stream"):
        return web.json_response(frames[0])
    resp = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
    await resp.prepare(request)
    for frame in frames:
        await resp.write(orjson.dumps(frame) + b"\n")
        await asyncio.sleep(0.01)
    return resp


def _ollama_call(call: dict[str, str]) -> dict[str, Any]:
    return {"function": {"name": call["name"], "arguments": orjson.loads(call["arguments"])}}


async def _openai(request: web.Request) -> web.StreamResponse:
    from aiohttp import web

    body = await request.json()
    text, call = reply(body)
    model = body.get("model") or MODELS[0]
    message: dict[str, Any] = {"role": "assistant", "content": text}
    finish = "stop"
    if call is not None:
        message = {"role": "assistant", "content": None, "tool_calls": [_openai_call(call)]}
        finish = "tool_calls"
    head: dict[str, Any] = {"id": "chatcmpl-demo", "created": 1_700_000_000, "model": model}
    if not body.get("stream"):
        choice = {"index": 0, "message": message, "finish_reason": finish}
        answer = {**head, "object": "chat.completion", "choices": [choice], "usage": _USAGE}
        return web.json_response(answer)
    deltas: list[dict[str, Any]] = [{"role": "assistant"}]
    if call is not None:
        deltas.append({"tool_calls": [{"index": 0, **_openai_call(call)}]})
    else:
        deltas += [{"content": w} for w in _pieces(text)]
    chunks: list[dict[str, Any]] = [{"index": 0, "delta": d, "finish_reason": None} for d in deltas]
    chunks.append({"index": 0, "delta": {}, "finish_reason": finish})
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    for c in chunks:
        frame = {**head, "object": "chat.completion.chunk", "choices": [c]}
        await resp.write(b"data: " + orjson.dumps(frame) + b"\n\n")
    if (body.get("stream_options") or {}).get("include_usage"):
        last = {**head, "object": "chat.completion.chunk", "choices": [], "usage": _USAGE}
        await resp.write(b"data: " + orjson.dumps(last) + b"\n\n")
    await resp.write(b"data: [DONE]\n\n")
    return resp


def _pieces(text: str) -> list[str]:
    """`text` as the word-sized pieces a stream sends, spaces kept between them."""
    words = text.split(" ")
    return [w + " " for w in words[:-1]] + words[-1:]


def _openai_call(call: dict[str, str]) -> dict[str, Any]:
    return {"id": "call_demo1", "type": "function", "function": call}
