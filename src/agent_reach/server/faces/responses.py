"""`/v1/responses`: the OpenAI Responses face of the proxy, the API Codex CLI speaks
(protocol §10.1).

A request is read as a chat request (`dialects.responses.request.decode_request`) and goes
through the same engine as every other; a provider of `format: responses` gets it as it came and
its answer (or stream) comes back as it is, any other provider's answer is rendered as a
`response` object (or the Responses event sequence). A conversation continues from a stored
response (`stored`). Compaction (`POST /v1/responses/compact`, or a request whose input ends in
a `compaction_trigger`) is answered for any provider: the route's model writes the summary, the
client gets it as one sealed `compaction` item, and the item becomes the summary again in any
later request (`dialects.responses.compaction`).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import orjson

from ...chat.request import ChatRequest
from ...core.errors import AllProvidersFailed, StreamInterrupted
from ...core.trace import Result
from ...dialects.responses import compaction
from ...dialects.responses.answer import chat_message, encode_answer
from ...dialects.responses.request import decode_request
from ...dialects.responses.stream import StreamEncoder
from ..http11.wire import Request, StreamResponse
from .face import Face, Serving, owner, seal
from .relay import (
    SSE_HEADERS,
    json_response,
    read_json,
    sse,
    streamed,
    trace_headers,
    whole,
    with_headers,
)
from .stored import continued, delete, retrieve, store_response

if TYPE_CHECKING:
    from ...engine.stream import ChatStream

Events = list[tuple[str, dict[str, Any]]]
EventWriter = Callable[[str | None, bytes], bytes]  # an event's name and data, as bytes to send
# What Codex sends for its provider's prompt cache and turn routing, passed on as it came to a
# provider of `format: responses` (OpenAI's backend routes cache hits by `session-id`); never a
# key, and nothing else of the client's headers.
CACHE_HEADERS = ("session-id", "x-codex-turn-state", "x-codex-window-id")
# What such a provider says back that Codex sends on its next request: passed to Codex.
ECHO_HEADERS = ("x-codex-turn-state",)


async def create(gateway: Serving, request: Request) -> StreamResponse:
    """`POST /v1/responses`."""
    given = await read_json(request)
    body = await continued(gateway, given, owner(request))
    if compaction.triggered(body):
        return await _compaction_turn(gateway, request, given, body)
    req, dropped = chat_request(gateway, body, request)
    native = req.native or {}

    async def keep(answer: dict[str, Any]) -> None:
        await store_response(gateway, request, given, answer)

    async def kept(out: ResponsesEncoder) -> None:
        answer = out.answer()
        if answer is not None:
            await keep(answer)

    if req.stream:
        encoder = functools.partial(ResponsesEncoder, native)
        return await streamed(
            gateway, FACE, request, req, dropped, encoder, finished=kept, echo=ECHO_HEADERS
        )
    render = functools.partial(encode_answer, request=body, created=int(time.time()))
    return await whole(gateway, FACE, req, dropped, render, keep)


def chat_request(
    gateway: Serving, body: dict[str, Any], request: Request
) -> tuple[ChatRequest, tuple[str, ...]]:
    """The Responses request `body` (its conversation whole; its compaction items of ours
    become their summaries) as the engine's request, with the route headers and the cache
    headers of `request` (a POST, or a WebSocket's upgrade), and what its translation leaves
    out. A compaction item not ours is a 400 unless a provider of the route speaks Responses."""
    body = compaction.expanded(body, seal(request))
    inbound = decode_request(body)
    parsed = ChatRequest.checked(inbound.body)
    carried = {h: request.headers[h] for h in CACHE_HEADERS if h in request.headers}
    session = body.get("prompt_cache_key") or carried.get("session-id")
    req = replace(
        parsed, api="responses", native=body, native_headers=carried or None, session=session
    )
    req = with_headers(req, request)
    if (n := compaction.foreign(body)) is not None:
        router = gateway.router
        if not any(router.provider(p).format == "responses" for p in router.candidates(req)):
            raise compaction.not_ours(n)
    return req, inbound.dropped


async def summarize(
    gateway: Serving, request: Request, body: dict[str, Any], trigger: bool = False
) -> tuple[list[dict[str, Any]], Result]:
    """The output of the compaction of `body`'s conversation, and the answer it came from
    (`AllProvidersFailed` as for any request): the route's model is asked for the summary,
    which comes back as one sealed `compaction` item; for a `trigger` (v2), a `format:
    responses` provider gets `body` as it came (not streamed) and its own output passes."""
    ask = compaction.summary_request(body)
    req, _ = chat_request(gateway, ask, request)
    if trigger:
        native, _ = chat_request(gateway, {**body, "stream": False}, request)
        req = replace(req, native=native.native)
    result = await gateway.router.answer(req)
    if result.native and trigger:
        output = result.response.get("output")
        return (output if isinstance(output, list) else []), result
    replaced = len(ask["input"]) - 1
    return [compaction.seal(_text(result), replaced, seal(request))], result


def _text(result: Result) -> str:
    """The text of an answer: a chat completion's, or a Responses provider's own response's."""
    response = result.response
    if result.native:
        output = response.get("output")
        message, _ = chat_message(output if isinstance(output, list) else [])
    else:
        choices = response.get("choices") or [{}]
        message = choices[0].get("message") or {}
    content = message.get("content")
    return content if isinstance(content, str) else ""


def compacted(
    body: dict[str, Any], output: list[dict[str, Any]], result: Result
) -> tuple[Events, dict[str, Any]]:
    """The events of a response whose output is `output` (the compaction), and that response,
    with the usage of the answer it came from."""
    out = StreamEncoder(body, int(time.time()), str(body.get("model") or "unknown"))
    usage = result.response.get("usage")
    if not result.native and isinstance(usage, dict):
        out.usage = usage
    items = [event for item in output for event in out.whole_item(item)]
    events = [*out.start(), *items, *out.finish_events()]
    answer = out.response()
    if result.native:  # a Responses provider's own usage, as it gave it
        for response in (answer, events[-1][1]["response"]):
            response["usage"] = usage
    return events, answer


async def _compaction_turn(
    gateway: Serving, request: Request, given: dict[str, Any], body: dict[str, Any]
) -> StreamResponse:
    """A request ending in `compaction_trigger` (Codex's remote compaction v2): the response
    whose output is the conversation's `compaction`, whole or as its events."""
    try:
        output, result = await summarize(gateway, request, body, trigger=True)
    except AllProvidersFailed as exc:
        return FACE.all_failed(exc)
    events, answer = compacted(body, output, result)
    await store_response(gateway, request, given, answer)
    headers = trace_headers(result.provider, result.trace)
    if body.get("stream") is not True:
        return json_response(answer, headers)
    resp = StreamResponse(headers={**SSE_HEADERS, **headers})
    await resp.prepare(request)
    await resp.write(b"".join(sse(kind, orjson.dumps(data)) for kind, data in events))
    return resp


async def compact(gateway: Serving, request: Request) -> StreamResponse:
    """`POST /v1/responses/compact`: the request's conversation (`input`, after its
    `previous_response_id`'s) as one `compaction` item summarized by the route's model
    (`object: response.compaction`; Codex reads its `output`)."""
    body = await continued(gateway, await read_json(request), owner(request))
    try:
        output, result = await summarize(gateway, request, body)
    except AllProvidersFailed as exc:
        return FACE.all_failed(exc)
    _, response = compacted(body, output, result)
    answer = {
        "id": response["id"],
        "object": "response.compaction",
        "created_at": response["created_at"],
        "output": output,
        "usage": response.get("usage"),
    }
    return json_response(answer, trace_headers(result.provider, result.trace))


class ResponsesEncoder:
    """The stream as Responses events: a chat provider's chunks rendered (with their
    `sequence_number`s), a Responses provider's own events as they came; a cut ends it with
    `response.failed`, numbered after the last event sent. `answer`: the whole response of a
    stream that completed (what `store` keeps). Each event is written by `event` (a
    server-sent event; a line of its own for a WebSocket)."""

    def __init__(self, body: dict[str, Any], stream: ChatStream, event: EventWriter = sse) -> None:
        self._event = event
        self.forwarding = stream.native
        self.out = StreamEncoder(body, int(time.time()), str(body.get("model") or "unknown"))
        self.last: tuple[str | None, bytes] | None = None  # the provider's own, forwarding

    def start(self) -> bytes:
        return b"" if self.forwarding else self._events(self.out.start())

    def chunks(self, batch: list[dict[str, Any]]) -> bytes:
        return self._events([event for chunk in batch for event in self.out.feed(chunk)])

    def frames(self, frames: list[tuple[str | None, bytes]]) -> bytes:
        if frames:
            self.last = frames[-1]
        return b"".join(self._event(event, data) for event, data in frames)

    def end(self) -> bytes:
        return b"" if self.forwarding else self._events(self.out.finish_events())

    def cut(self, exc: StreamInterrupted) -> bytes:
        if self.forwarding:
            seen = orjson.loads(self.last[1]) if self.last is not None else {}
            if isinstance(seen, dict) and isinstance(seen.get("sequence_number"), int):
                self.out.seq = seen["sequence_number"] + 1
        return self._events(self.out.fail(str(exc)))

    def answer(self) -> dict[str, Any] | None:
        if not self.forwarding:
            return self.out.response()
        done = orjson.loads(self.last[1]) if self.last is not None else {}
        response = done.get("response") if isinstance(done, dict) else None
        return response if isinstance(response, dict) else None

    def _events(self, events: Events) -> bytes:
        return b"".join(self._event(kind, orjson.dumps(data)) for kind, data in events)


FACE = Face(
    "responses",
    (
        ("POST", "/v1/responses", create),
        ("POST", "/v1/responses/compact", compact),
        ("GET", "/v1/responses/{id}", retrieve),
        ("DELETE", "/v1/responses/{id}", delete),
    ),
    prefixes=("/v1/responses",),
    usage_limit=True,
)
