"""Fake embedding providers on 127.0.0.1, one per path prefix, each answering in its format with
vectors that are a pure function of (space, text, width) (`vector`), so that a test can tell
which space a vector came from and that none was mixed in. Every request is recorded.

| prefix           | speaks                                          | does                                 |
|------------------|-------------------------------------------------|--------------------------------------|
| `/ok/<space>`    | OpenAI `POST /v1/embeddings`                    | the space's vectors                  |
| `/dash/<space>`  | OpenAI's shape                                  | refuses over 10 inputs, as DashScope |
| `/wide/<space>`  | OpenAI's shape                                  | vectors one dimension too wide       |
| `/bools/<space>` | OpenAI's shape                                  | vectors of `true` and `false`        |
| `/auth/<space>`  | OpenAI's shape                                  | 401, as OpenAI answers a bad key     |
| `/ollama/<space>`| Ollama `POST /api/embed`                        | the space's vectors                  |
| `/gemini/<space>`| Gemini `…/models/{model}:batchEmbedContents`    | the space's vectors                  |
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

from .serving import Threaded

DASHSCOPE_BATCH = 10
DASHSCOPE_TOO_MANY = {
    "error": {
        "code": "InvalidParameter",
        "param": None,
        "message": "<400> InternalError.Algo.InvalidParameter: Value error, batch size is "
        "invalid, it should not be larger than 10.: input.contents",
        "type": "InvalidParameter",
    }
}
BAD_KEY = {
    "error": {
        "message": "Incorrect API key provided: sk-wrong. You can find your API key at "
        "https://platform.openai.com/account/api-keys.",
        "type": "invalid_request_error",
        "param": None,
        "code": "invalid_api_key",
    }
}


def vector(space: str, text: str, width: int) -> list[float]:
    """The vector of `text` in `space`: `width` float32-exact values in [-1, 1)."""
    out: list[float] = []
    counter = 0
    while len(out) < width:
        digest = hashlib.sha256(f"{space}\0{text}\0{counter}".encode()).digest()
        out.extend(v / 2**31 for v in struct.unpack("<8i", digest))
        counter += 1
    return [struct.unpack("<f", struct.pack("<f", v))[0] for v in out[:width]]


@dataclass
class Seen:
    path: str
    body: Any


@dataclass
class EmbeddingServer:
    """The fakes; `seen` every request, `port` once started."""

    seen: list[Seen] = field(default_factory=list)
    port: int = 0

    def url(self, kind: str, space: str) -> str:
        """A provider's chat endpoint (its embeddings URL is the one beside it)."""
        base = f"http://127.0.0.1:{self.port}/{kind}/{space}"
        if kind == "ollama":
            return f"{base}/api/chat"
        if kind == "gemini":
            return f"{base}/v1beta/models"
        return f"{base}/v1/chat/completions"

    def calls(self, kind: str, space: str) -> list[Seen]:
        return [s for s in self.seen if s.path.startswith(f"/{kind}/{space}/")]

    async def openai(self, request: web.Request) -> web.Response:
        kind, space = request.match_info["kind"], request.match_info["space"]
        body = orjson.loads(await request.read())
        self.seen.append(Seen(request.path, body))
        if kind == "auth":
            return web.json_response(BAD_KEY, status=401)
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        if kind == "dash" and len(inputs) > DASHSCOPE_BATCH:
            return web.json_response(DASHSCOPE_TOO_MANY, status=400)
        width = body.get("dimensions") or 1536
        wide = width + 1 if kind == "wide" else width
        data = [
            {
                "object": "embedding",
                "index": i,
                "embedding": vector(space, t, width)[:width] + [0.0] * (wide - width),
            }
            for i, t in enumerate(inputs)
        ]
        if kind == "bools":
            for item in data:
                item["embedding"] = [n % 2 == 0 for n in range(width)]
        tokens = sum(len(t) if isinstance(t, list) else len(t.split()) for t in inputs)
        usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        return web.json_response(
            {"object": "list", "data": data, "model": body["model"], "usage": usage}
        )

    async def ollama(self, request: web.Request) -> web.Response:
        space = request.match_info["space"]
        body = orjson.loads(await request.read())
        self.seen.append(Seen(request.path, body))
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        width = body.get("dimensions") or 1024
        return web.json_response(
            {
                "model": body["model"],
                "embeddings": [vector(space, t, width) for t in inputs],
                "total_duration": 14143917,
                "prompt_eval_count": len(inputs),
            }
        )

    async def gemini(self, request: web.Request) -> web.Response:
        space = request.match_info["space"]
        body = orjson.loads(await request.read())
        self.seen.append(Seen(request.path_qs, body))
        out = []
        for ask in body["requests"]:
            text = ask["content"]["parts"][0]["text"]
            out.append({"values": vector(space, text, ask.get("outputDimensionality") or 3072)})
        return web.json_response({"embeddings": out})

    def app(self) -> web.Application:
        app = web.Application(client_max_size=2**26)
        app.router.add_post("/{kind}/{space}/v1/embeddings", self.openai)
        app.router.add_post("/ollama/{space}/api/embed", self.ollama)
        app.router.add_post("/gemini/{space}/v1beta/models/{call}", self.gemini)
        return app

    def start(self) -> None:
        self._server = Threaded()
        self.port = self._server.serve(self.app())

    def stop(self) -> None:
        self._server.stop()
