"""Streams both ways: a provider's Responses events as chat chunks (`ResponsesDecoder`), and
chat chunks as the Responses event sequence for a client (`StreamEncoder`), with
`sequence_number`s, ending in `response.completed` (or `response.failed` after a cut)."""

from __future__ import annotations

from typing import Any

from ...core.outcomes import ErrorInfo
from ..base import Context, Decoder, Dialect, Mismatch, ProviderError
from ..convert import object_at, text_of, tool_call
from .answer import (
    FINISH,
    call_item,
    chat_usage,
    custom_input,
    error_code,
    message_item,
    new_id,
    reasoning_item,
    response_object,
    response_usage,
    text_part,
)
from .tools import tool_map


class ResponsesDecoder(Decoder):
    """Responses stream events as chat chunks."""

    def __init__(self, ctx: Context, dialect: Dialect) -> None:
        super().__init__(ctx, dialect)
        self.calls: dict[Any, int] = {}  # a function_call item's id (or output index) → index

    def feed(self, event: str | None, data: bytes) -> list[dict[str, Any]]:
        obj = self.frame_object(event, data)
        kind = obj.get("type") or event
        if kind in ("response.created", "response.in_progress"):
            response = object_at(obj, "response")
            if isinstance(response.get("id"), str) and response["id"]:
                self.id = response["id"]
            if isinstance(response.get("model"), str) and response["model"]:
                self.model = response["model"]
            return []
        if kind == "response.output_text.delta":
            return self.emit(content=str(obj.get("delta") or "") or None)
        if kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
            return self.emit(reasoning=str(obj.get("delta") or "") or None)
        if kind == "response.output_item.added":
            item = object_at(obj, "item")
            if item.get("type") != "function_call":
                return []
            n = len(self.calls)
            self.calls[item.get("id") or obj.get("output_index")] = n
            call = tool_call(str(item.get("call_id") or ""), str(item.get("name", "")), "")
            return self.emit(tool_calls=[{"index": n, **call}])
        if kind == "response.function_call_arguments.delta":
            found = self.calls.get(obj.get("item_id"), self.calls.get(obj.get("output_index")))
            if found is None:
                raise Mismatch("function_call_arguments.delta for an item never added")
            piece = {"index": found, "function": {"arguments": str(obj.get("delta") or "")}}
            return self.emit(tool_calls=[piece])
        if kind in ("response.completed", "response.incomplete"):
            response = object_at(obj, "response")
            reason = object_at(response, "incomplete_details").get("reason")
            finish = FINISH.get(str(reason), "tool_calls" if self.calls else "stop")
            return self.emit(finish=finish, usage=chat_usage(response.get("usage")))
        if kind in ("response.failed", "error"):
            err = object_at(object_at(obj, "response"), "error") or obj
            raise ProviderError(
                ErrorInfo(str(err.get("message") or "response failed"), error_code(err.get("code")))
            )
        return []  # part added/done, item done, text done and events this version ignores


class StreamEncoder:
    """Chat chunks rendered as the Responses event sequence (protocol §10.1).

    `start()` gives `response.created` and `response.in_progress`; `feed(chunk)` the events a
    chunk produces (an output item opens at its first piece and closes when another kind of
    item starts); `finish_events()` closes what is open and ends with `response.completed` carrying
    the whole response; `fail(message)` ends a cut stream with `response.failed`. Events are
    `(type, data)` pairs, `data` with its increasing `sequence_number`.
    """

    def __init__(self, request: dict[str, Any], created: int, model: str) -> None:
        self.request = request
        self.created = created
        self.model = model
        self.id = new_id("resp")
        self.seq = 0
        self.output: list[dict[str, Any]] = []  # items done
        self.open: dict[str, Any] | None = None  # the message or reasoning item being written
        self.text: list[str] = []
        self.tools = tool_map(request)
        self.calls: dict[int, dict[str, Any]] = {}  # chat tool call index → open item
        self.finish: str | None = None
        self.usage: dict[str, Any] | None = None

    def _event(self, kind: str, **data: Any) -> tuple[str, dict[str, Any]]:
        event = {"type": kind, "sequence_number": self.seq, **data}
        self.seq += 1
        return kind, event

    def _response(self, status: str, error: dict[str, Any] | None = None) -> dict[str, Any]:
        return response_object(
            self.request,
            id=self.id,
            created=self.created,
            model=self.model,
            status=status,
            output=list(self.output),
            usage=response_usage(self.usage) if status != "in_progress" else None,
            finish=self.finish,
            error=error,
        )

    def start(self) -> list[tuple[str, dict[str, Any]]]:
        response = self._response("in_progress")
        return [
            self._event("response.created", response=response),
            self._event("response.in_progress", response=response),
        ]

    def whole_item(self, item: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        """An output item that is whole at once (a `compaction`): added, then done."""
        index = len(self.output)
        self.output.append(item)
        return [
            self._event("response.output_item.added", output_index=index, item=item),
            self._event("response.output_item.done", output_index=index, item=item),
        ]

    def feed(self, chunk: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        if chunk.get("model"):
            self.model = chunk["model"]
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        out: list[tuple[str, dict[str, Any]]] = []
        for c in chunk.get("choices") or ():
            if c.get("index", 0) != 0:
                continue  # the Responses API has one answer
            delta = c.get("delta") or {}
            if delta.get("reasoning_content"):
                out += self._write("reasoning", delta["reasoning_content"])
            content = delta.get("content")
            if content and not isinstance(content, str):  # a list of parts, as some send
                content = text_of(content)
            if content:
                out += self._write("message", content)
            for call in delta.get("tool_calls") or ():
                out += self._call(call)
            if c.get("finish_reason"):
                self.finish = c["finish_reason"]
        return out

    def _write(self, kind: str, text: str) -> list[tuple[str, dict[str, Any]]]:
        out: list[tuple[str, dict[str, Any]]] = []
        if self.open is None or self.open["type"] != kind:
            out += self._close()
            out += self._open(kind)
        item, index = self.open, len(self.output)
        assert item is not None
        self.text.append(text)
        seq, self.seq = self.seq, self.seq + 1  # `_event`'s, without its keywords' dicts
        if kind == "message":
            event = {
                "type": "response.output_text.delta",
                "sequence_number": seq,
                "item_id": item["id"],
                "output_index": index,
                "content_index": 0,
                "delta": text,
                "logprobs": [],
            }
        else:
            event = {
                "type": "response.reasoning_summary_text.delta",
                "sequence_number": seq,
                "item_id": item["id"],
                "output_index": index,
                "summary_index": 0,
                "delta": text,
            }
        out.append((event["type"], event))
        return out

    def _open(self, kind: str) -> list[tuple[str, dict[str, Any]]]:
        """Open a message (`kind` "message") or reasoning item and its first part."""
        index = len(self.output)
        if kind == "message":
            item = message_item(new_id("msg"), "", "in_progress")
            part = ("response.content_part.added", "content_index", text_part(""))
        else:
            item = reasoning_item(new_id("rs"), "")
            empty = {"type": "summary_text", "text": ""}
            part = ("response.reasoning_summary_part.added", "summary_index", empty)
        self.open, self.text = item, []
        kind, at, first = part
        return [
            self._event("response.output_item.added", output_index=index, item=item),
            self._event(kind, item_id=item["id"], output_index=index, **{at: 0}, part=first),
        ]

    def _close(self) -> list[tuple[str, dict[str, Any]]]:
        """Close the open message or reasoning item, and any function calls."""
        out: list[tuple[str, dict[str, Any]]] = []
        item, index = self.open, len(self.output)
        if item is not None:
            text = "".join(self.text)
            ids = {"item_id": item["id"], "output_index": index}
            if item["type"] == "message":
                done = message_item(item["id"], text)
                out += [
                    self._event(
                        "response.output_text.done", **ids, content_index=0, text=text, logprobs=[]
                    ),
                    self._event(
                        "response.content_part.done", **ids, content_index=0, part=text_part(text)
                    ),
                ]
            else:
                done = reasoning_item(item["id"], text)
                part = {"type": "summary_text", "text": text}
                out += [
                    self._event(
                        "response.reasoning_summary_text.done", **ids, summary_index=0, text=text
                    ),
                    self._event(
                        "response.reasoning_summary_part.done", **ids, summary_index=0, part=part
                    ),
                ]
            out.append(self._event("response.output_item.done", output_index=index, item=done))
            self.output.append(done)
            self.open = None
        for call in self.calls.values():
            out += self._call_done(call)
        self.calls = {}
        return out

    def _call(self, call: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        """A piece of a chat tool call: the item opens at its first piece; a function's
        arguments stream as they come, a custom tool's input goes out whole at the end."""
        out: list[tuple[str, dict[str, Any]]] = []
        n = call.get("index", 0)
        fn = call.get("function") or {}
        state = self.calls.get(n)
        if state is None:
            if self.open is not None:
                out += self._close()
            index = len(self.output) + len(self.calls)
            call_id = str(call.get("id") or new_id("call"))
            item = call_item(call_id, str(fn.get("name") or ""), "", self.tools, done=False)
            state = self.calls[n] = {"item": item, "index": index, "args": []}
            out.append(self._event("response.output_item.added", output_index=index, item=item))
        args = fn.get("arguments")
        if isinstance(args, str) and args:
            state["args"].append(args)
            if state["item"]["type"] == "function_call":
                out.append(
                    self._event(
                        "response.function_call_arguments.delta",
                        item_id=state["item"]["id"],
                        output_index=state["index"],
                        delta=args,
                    )
                )
        return out

    def _call_done(self, call: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        item, index, args = call["item"], call["index"], "".join(call["args"])
        ids = {"item_id": item["id"], "output_index": index}
        if item["type"] == "custom_tool_call":
            done = {**item, "input": custom_input(args)}
            events = [
                self._event("response.custom_tool_call_input.delta", **ids, delta=done["input"]),
                self._event("response.custom_tool_call_input.done", **ids, input=done["input"]),
            ]
        else:
            done = {**item, "arguments": args, "status": "completed"}
            events = [
                self._event(
                    "response.function_call_arguments.done",
                    **ids,
                    name=done["name"],
                    arguments=args,
                )
            ]
        events.append(self._event("response.output_item.done", output_index=index, item=done))
        self.output.append(done)
        return events

    def finish_events(self) -> list[tuple[str, dict[str, Any]]]:
        """Close what is open and end the stream with `response.completed`."""
        out = self._close()
        out.append(self._event("response.completed", response=self._response("completed")))
        return out

    def fail(self, message: str, code: str = "server_error") -> list[tuple[str, dict[str, Any]]]:
        """End a stream cut by its provider: `response.failed`, never `response.completed`."""
        error = {"code": code, "message": message}
        return [self._event("response.failed", response=self._response("failed", error))]

    def response(self) -> dict[str, Any]:
        """The whole response as the stream has told it so far (for storing)."""
        return self._response("completed")
