"""`/v1/responses`: the OpenAI Responses face of the proxy, the API Codex CLI speaks
(protocol §10.1).

A request is read as a chat request (`dialects.responses.request.decode_request`) and goes
through the same engine as every other; a provider of `format: responses` gets it as it came and its
answer (or stream) comes back as it is, any other provider's answer is rendered as a
`response` object (or the Responses event sequence). Responses created with `store` not false
are kept in the state store for `server.responses_ttl_s`, so that `previous_response_id`
continues a conversation and `GET` / `DELETE /v1/responses/{id}` find them; each belongs to the
client key that created it (`guard.owner`), and is not found for any other. Each turn is
stored once (its own input, the response, the id of the one before it); a continuation walks
the links back, and is refused (413) when the conversation passes `server.max_body_bytes`, as
the client sending it whole would be. The store keeps `server.responses_max_*` of them in
all and `server.responses_key_max_*` per client key, evicting the oldest.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import orjson

from ...chat.request import ChatRequest
from ...core.errors import RequestError, StreamInterrupted, quoted
from ...dialects.responses.answer import encode_answer
from ...dialects.responses.request import decode_request
from ...dialects.responses.stream import StreamEncoder
from ...state import Keep
from ..http11.wire import Request, Response, StreamResponse
from .face import Face, Serving, owner
from .relay import (
    json_response,
    read_json,
    sse,
    streamed,
    whole,
    with_headers,
)

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
    req, dropped = chat_request(body, request)
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


def chat_request(body: dict[str, Any], request: Request) -> tuple[ChatRequest, tuple[str, ...]]:
    """The Responses request `body` (its conversation whole) as the engine's request, with the
    route headers and the cache headers of `request` (a POST, or a WebSocket's upgrade), and
    what its translation leaves out."""
    inbound = decode_request(body)
    parsed = ChatRequest.checked(inbound.body)
    carried = {h: request.headers[h] for h in CACHE_HEADERS if h in request.headers}
    session = body.get("prompt_cache_key") or carried.get("session-id")
    req = replace(
        parsed, api="responses", native=body, native_headers=carried or None, session=session
    )
    return with_headers(req, request), inbound.dropped


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


# -- stored responses ---------------------------------------------------------------------------


async def continued(gateway: Serving, body: dict[str, Any], who: str) -> dict[str, Any]:
    """The request with the conversation of its `previous_response_id` (each turn's input
    and output items, oldest first, not instructions) in front of its own input."""
    previous = body.get("previous_response_id")
    if previous is None:
        return body
    if not isinstance(previous, str) or not previous:
        raise RequestError("'previous_response_id' must be a string", param="previous_response_id")
    limit = gateway.config.server.max_body_bytes
    turns: list[dict[str, Any]] = []
    size = 0
    link: Any = previous
    while isinstance(link, str):  # older records hold the whole conversation, and no link
        stored, length = await _load(gateway, link, who, previous if turns else None)
        size += length
        if size > limit:
            raise RequestError(
                f"the conversation of previous_response_id is over {limit} bytes "
                "(server.max_body_bytes): start a new one, or send a shorter one whole",
                status=413,
                param="previous_response_id",
            )
        turns.append(stored)
        link = stored.get("previous")
    history = [
        item
        for turn in reversed(turns)
        for item in (*turn["input"], *output_items(turn["response"]))
    ]
    return {**body, "input": [*history, *input_items(body)]}


def input_items(body: dict[str, Any]) -> list[Any]:
    """A request's own `input` as items (none when it has none)."""
    given = body.get("input")
    if given is None:
        return []
    if isinstance(given, str):
        return [{"type": "message", "role": "user", "content": given}]
    if not isinstance(given, list):
        raise RequestError("'input' must be a string or an array of items", param="input")
    return given


def output_items(response: dict[str, Any]) -> list[Any]:
    output = response.get("output")
    return output if isinstance(output, list) else []


async def _load(
    gateway: Serving, id: str, who: str, later: str | None = None
) -> tuple[dict[str, Any], int]:
    """The stored response `id` if `who` owns it, and its stored size; else 404, as if there
    were none (saying so for a turn before `later`'s)."""
    found = await gateway.router.store.load_response(id, time.time())
    kept: dict[str, Any] = orjson.loads(found) if found is not None else {}
    if found is None or kept.get("owner", "") != who:
        message = f"no stored response with id {quoted(id)}"
        if later:
            message = (
                f"the conversation of {quoted(later)} is no longer stored whole: {message} "
                "(expired, deleted, or evicted past server.responses_*max_*)"
            )
        raise RequestError(message, status=404, param="id")
    return kept, len(found)


async def store_response(
    gateway: Serving, request: Request, given: dict[str, Any], answer: dict[str, Any]
) -> None:
    """Store the response with the request's own input (`given`, not the conversation before
    it: that is linked) and who asked for it, unless the request said `store: false`."""
    if given.get("store") is False or not isinstance(answer.get("id"), str):
        return
    who = owner(request)
    record = {
        "response": answer,
        "input": input_items(given),
        "previous": given.get("previous_response_id"),
        "owner": who,
    }
    server = gateway.config.server
    keep = Keep(
        who,
        server.responses_max_count,
        server.responses_max_bytes,
        server.responses_key_max_count,
        server.responses_key_max_bytes,
    )
    kept = orjson.dumps(record).decode()
    await gateway.router.store.save_response(
        answer["id"], kept, time.time(), server.responses_ttl_s, keep
    )


async def retrieve(gateway: Serving, request: Request) -> Response:
    """`GET /v1/responses/{id}`: a stored response. With `stream=true` a client resumes the
    events of a background response, and the proxy runs none (it answers `background` at
    once): a 400 naming `stream`, as OpenAI answers it for a response that was not one."""
    stored, _ = await _load(gateway, request.match_info["id"], owner(request))
    if request.query.get("stream", "false") != "false":
        raise RequestError(
            "'stream' resumes a background response's events, and this proxy answers "
            "`background` at once: retrieve the response whole (no `stream`)",
            param="stream",
        )
    return json_response(stored["response"])


async def delete(gateway: Serving, request: Request) -> Response:
    """`DELETE /v1/responses/{id}`."""
    id = request.match_info["id"]
    await _load(gateway, id, owner(request))
    if not await gateway.router.store.delete_response(id, time.time()):
        raise RequestError(f"no stored response with id {quoted(id)}", status=404, param="id")
    return json_response({"id": id, "object": "response", "deleted": True})


FACE = Face(
    "responses",
    (
        ("POST", "/v1/responses", create),
        ("GET", "/v1/responses/{id}", retrieve),
        ("DELETE", "/v1/responses/{id}", delete),
    ),
    prefixes=("/v1/responses",),
    usage_limit=True,
)
