"""Streams both ways: a provider's `alt=sse` events (each a whole GenerateContentResponse) as
chat chunks (`GeminiDecoder`), and chat chunks as the Gemini stream for a client
(`StreamEncoder`)."""

from __future__ import annotations

from typing import Any

from ..base import Context, Decoder, Dialect, Mismatch
from ..convert import object_at, text_of, tool_call
from .answer import candidate, chat_usage, finish_of, function_call, pieces, response_body


class GeminiDecoder(Decoder):
    """Gemini `alt=sse` events (each a whole GenerateContentResponse) as OpenAI chunks."""

    def __init__(self, ctx: Context, dialect: Dialect) -> None:
        super().__init__(ctx, dialect)
        self.calls: dict[int, int] = {}  # candidate index → tool calls so far

    def feed(self, event: str | None, data: bytes) -> list[dict[str, Any]]:
        obj = self.frame_object(event, data)
        if isinstance(obj.get("responseId"), str) and obj["responseId"]:
            self.id = obj["responseId"]
        if isinstance(obj.get("modelVersion"), str) and obj["modelVersion"]:
            self.model = obj["modelVersion"]
        candidates = obj.get("candidates")
        if not isinstance(candidates, list) or not candidates:
            if not isinstance(obj.get("usageMetadata"), dict):
                raise Mismatch("no candidates")
            return []  # a usage-only event
        usage = chat_usage(obj.get("usageMetadata"))
        out = []
        for i, c in enumerate(candidates):
            if not isinstance(c, dict):
                raise Mismatch("stream candidate is not an object")
            index = c["index"] if isinstance(c.get("index"), int) else i
            text, thought, found = pieces(c)
            first = self.calls.get(index, 0)
            calls = [
                {
                    "index": first + n,
                    **tool_call(
                        str(fc.get("id") or f"call_{first + n}"),
                        str(fc.get("name", "")),
                        fc.get("args"),
                    ),
                }
                for n, fc in enumerate(found)
            ]
            self.calls[index] = first + len(calls)
            finish = finish_of(c, self.calls[index] > 0, None)
            out += self.choice(index, text, thought, calls, finish, usage)
        return out


class StreamEncoder:
    """Chat chunks as Gemini's stream: `feed` each chunk, then `end` once; each returns the
    `GenerateContentResponse` objects to send. Text and thoughts go as they come; a tool call
    goes whole (Gemini sends a `functionCall` in one part), when the answer ends, with the
    finish reason and the usage."""

    def __init__(self) -> None:
        self.source: dict[str, Any] = {}  # the first chunk's id and model
        self.calls: dict[int, dict[str, Any]] = {}  # chat tool call index → the call so far
        self.finish: Any = None
        self.usage: Any = None

    def feed(self, chunk: dict[str, Any]) -> list[dict[str, Any]]:
        if not self.source:
            self.source = {"id": chunk.get("id"), "model": chunk.get("model")}
        if chunk.get("usage") is not None:
            self.usage = chunk["usage"]
        parts: list[dict[str, Any]] = []
        for c in chunk.get("choices") or ():
            if c.get("index", 0) != 0:
                continue  # one candidate: Gemini CLI asks for one
            delta = object_at(c, "delta")
            if isinstance(delta.get("reasoning_content"), str) and delta["reasoning_content"]:
                parts.append({"text": delta["reasoning_content"], "thought": True})
            text = text_of(delta.get("content"))
            if text:
                parts.append({"text": text})
            for call in delta.get("tool_calls") or ():
                self._gather(call)
            if c.get("finish_reason"):
                self.finish = c["finish_reason"]
        if not parts:
            return []
        return [response_body([candidate(parts, None, 0)], None, self.source)]

    def _gather(self, piece: dict[str, Any]) -> None:
        call = self.calls.setdefault(
            piece.get("index", 0), {"id": None, "function": {"name": "", "arguments": ""}}
        )
        fn = object_at(piece, "function")
        if piece.get("id"):
            call["id"] = piece["id"]
        if fn.get("name"):
            call["function"]["name"] += str(fn["name"])
        if isinstance(fn.get("arguments"), str):
            call["function"]["arguments"] += fn["arguments"]

    def end(self) -> list[dict[str, Any]]:
        parts = [function_call(c) for _, c in sorted(self.calls.items())] or [{"text": ""}]
        last = candidate(parts, self.finish or "stop", 0)
        return [response_body([last], self.usage, self.source)]
