"""Streams both ways: a provider's named Messages events as chat chunks (`AnthropicDecoder`:
message_start, content_block_start/delta/stop, message_delta, message_stop; an `error`
event ends the stream as a provider error), and chat chunks as the Messages events for a
client (`StreamEncoder`)."""

from __future__ import annotations

from typing import Any

from ...chat import completion
from ...core.outcomes import ErrorInfo
from ..base import Context, Decoder, Dialect, Mismatch, ProviderError, loads
from ..convert import object_at, text_of, tool_call
from .answer import chat_usage, message_id, message_usage, stop_reason, tool_use_id


class AnthropicDecoder(Decoder):
    """Anthropic's named stream events as OpenAI chunks."""

    def __init__(self, ctx: Context, dialect: Dialect) -> None:
        super().__init__(ctx, dialect)
        self.tools: dict[int, int] = {}  # content block index → tool call index
        self.usage: dict[str, Any] = {}  # message_start's usage, updated by message_delta

    def feed(self, event: str | None, data: bytes) -> list[dict[str, Any]]:
        obj = loads(data)
        if not isinstance(obj, dict):
            raise Mismatch("stream event is not a JSON object")
        kind = obj.get("type") or event
        if kind == "error" or event == "error":
            raise ProviderError(self.dialect.error_of(obj) or ErrorInfo(str(obj)[:300]))
        if kind == "message_start":
            msg = object_at(obj, "message")
            if isinstance(msg.get("id"), str) and msg["id"]:
                self.id = msg["id"]
            if isinstance(msg.get("model"), str) and msg["model"]:
                self.model = msg["model"]
            if isinstance(msg.get("usage"), dict):
                self.usage.update(msg["usage"])
            return []
        if kind == "content_block_start":
            return self._block_start(obj)
        if kind == "content_block_delta":
            return self._block_delta(obj)
        if kind == "message_delta":
            delta = object_at(obj, "delta")
            if isinstance(obj.get("usage"), dict):
                self.usage.update({k: v for k, v in obj["usage"].items() if v is not None})
            finish = completion.finish_reason(delta.get("stop_reason"))
            if self.tools and finish == "stop":
                finish = "tool_calls"
            return self.emit(finish=finish, usage=chat_usage(self.usage))
        if kind == "message_stop":
            self.finished = True
        return []  # ping, content_block_stop, and events this version does not know

    def _block_start(self, obj: dict[str, Any]) -> list[dict[str, Any]]:
        block = object_at(obj, "content_block")
        kind = block.get("type")
        if kind == "tool_use":
            n = len(self.tools)
            self.tools[obj.get("index", n)] = n
            call = tool_call(str(block.get("id") or ""), str(block.get("name", "")), "")
            return self.emit(tool_calls=[{"index": n, **call}])
        if kind == "text":
            return self.emit(content=block.get("text") or None)
        if kind == "thinking":
            return self.emit(reasoning=block.get("thinking") or None)
        return []

    def _block_delta(self, obj: dict[str, Any]) -> list[dict[str, Any]]:
        delta = object_at(obj, "delta")
        kind = delta.get("type")
        if kind == "text_delta" and isinstance(delta.get("text"), str):
            return self.emit(content=delta["text"])
        if kind == "thinking_delta" and isinstance(delta.get("thinking"), str):
            return self.emit(reasoning=delta["thinking"])
        if kind == "input_json_delta" and delta.get("partial_json"):
            n = self.tools.get(obj.get("index", -1))
            if n is None:
                raise Mismatch("input_json_delta for a block that is not a tool_use")
            piece = {"index": n, "function": {"arguments": str(delta["partial_json"])}}
            return self.emit(tool_calls=[piece])
        return []  # signature_delta and others carry nothing for OpenAI


Event = tuple[str, dict[str, Any]]


class StreamEncoder:
    """Chat chunks as the Messages stream: `feed` each chunk, then `end` once; each returns
    (event name, data) pairs in the order Anthropic sends them (message_start,
    content_block_start, ping, content_block_delta…, content_block_stop, …, message_delta,
    message_stop). A new block closes the one before; a late arguments piece of an earlier
    tool call still goes to that call's block index, which is how SDKs address deltas."""

    def __init__(self) -> None:
        self.started = False
        self.block = -1  # index of the open block, -1 while none is
        self.kind: str | None = None  # the open block's type
        self.tools: dict[int, int] = {}  # chat tool call index → block index
        self.finish: str | None = None
        self.usage: Any = None

    def feed(self, chunk: dict[str, Any]) -> list[Event]:
        out = [] if self.started else self._start(chunk.get("model"))
        if chunk.get("usage") is not None:
            self.usage = chunk["usage"]
        for c in chunk.get("choices") or ():
            if c.get("index", 0) != 0:
                continue  # a Messages answer has one choice
            delta = c.get("delta") or {}
            if delta.get("reasoning_content"):
                out += self._text("thinking", delta["reasoning_content"])
            if delta.get("content"):
                out += self._text("text", delta["content"])
            for call in delta.get("tool_calls") or ():
                out += self._tool(call)
            if c.get("finish_reason"):
                self.finish = c["finish_reason"]
        return out

    def end(self) -> list[Event]:
        out = ([] if self.started else self._start(None)) + self._close()
        delta = {"stop_reason": stop_reason(self.finish, bool(self.tools)), "stop_sequence": None}
        usage = message_usage(self.usage)
        out.append(("message_delta", {"type": "message_delta", "delta": delta, "usage": usage}))
        out.append(("message_stop", {"type": "message_stop"}))
        return out

    def _start(self, model: Any) -> list[Event]:
        self.started = True
        message: dict[str, Any] = {
            "id": message_id(),
            "type": "message",
            "role": "assistant",
            "model": model if isinstance(model, str) and model else "unknown",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 0, "output_tokens": 0},  # known at message_delta
        }
        return [("message_start", {"type": "message_start", "message": message})]

    def _close(self) -> list[Event]:
        if self.kind is None:
            return []
        self.kind = None
        return [("content_block_stop", {"type": "content_block_stop", "index": self.block})]

    def _open(self, block: dict[str, Any]) -> list[Event]:
        out = self._close()
        self.block += 1
        self.kind = block["type"]
        start = {"type": "content_block_start", "index": self.block, "content_block": block}
        out.append(("content_block_start", start))
        if self.block == 0:
            out.append(("ping", {"type": "ping"}))
        return out

    def _delta(self, index: int, delta: dict[str, Any]) -> Event:
        return (
            "content_block_delta",
            {"type": "content_block_delta", "index": index, "delta": delta},
        )

    def _text(self, kind: str, piece: Any) -> list[Event]:
        if not isinstance(piece, str):
            piece = text_of(piece) or ""
        out: list[Event] = []
        if self.kind != kind:
            empty = {"type": "text", "text": ""}
            if kind == "thinking":
                empty = {"type": "thinking", "thinking": "", "signature": ""}
            out = self._open(empty)
        field = "text" if kind == "text" else "thinking"
        out.append(self._delta(self.block, {"type": f"{field}_delta", field: piece}))
        return out

    def _tool(self, call: dict[str, Any]) -> list[Event]:
        n = call.get("index", 0)
        fn = object_at(call, "function")
        out: list[Event] = []
        if n not in self.tools:
            block = {
                "type": "tool_use",
                "id": tool_use_id(call.get("id")),
                "name": str(fn.get("name") or ""),
                "input": {},
            }
            out = self._open(block)
            self.tools[n] = self.block
        args = fn.get("arguments")
        if isinstance(args, str) and args:
            out.append(
                self._delta(self.tools[n], {"type": "input_json_delta", "partial_json": args})
            )
        return out
