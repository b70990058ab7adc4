"""`GET /v1/responses` upgraded to a WebSocket: the Responses API over one socket, as Codex
(`supports_websockets`, `OpenAI-Beta: responses_websockets=2026-02-06`) and OpenAI's SDK
(`client.responses.connect()`) speak it (protocol §10.1.2).

The client sends `response.create` messages, each a Responses request less `stream` and
`background`; each is one request through the engine, exactly as a streamed `POST
/v1/responses` (failover, circuits, budgets, trace, an access line of its own, `WS`), and its
events go back as text messages, one event each, written by the HTTP face's
`ResponsesEncoder`. One response at a time: a `response.create` while one streams gets the
error `response_already_in_flight`, and the one under way goes on.

The socket keeps the conversation of its last `KEPT` responses (`Turns`), so that a
`previous_response_id` continues without the state store, `store: false` included; one of
`store` not false is also stored as over HTTP, and an id the socket no longer holds is looked
up there (else `previous_response_not_found`, on which Codex resends the whole conversation).
`generate: false` reaches no provider: it answers a response with no output whose id a later
turn continues, inheriting its `tools` and `instructions` when it sends none. What the socket
keeps is dropped with it. Every error is a Responses `error` event on the socket, which stays
open; after `server.websocket_max_s` the socket gets OpenAI's error
`websocket_connection_limit_reached` and is closed 1001, and the client reconnects.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import orjson

from ...chat.request import ChatRequest
from ...core.errors import AllProvidersFailed, RequestError
from ...dialects.responses import compaction
from ...dialects.responses.request import decode_request
from ...dialects.responses.stream import StreamEncoder
from .. import log
from ..http11.websocket import Switch, WebSocket, accept_token
from ..http11.wire import Request, StreamResponse
from .face import Serving, openai_error, owner
from .relay import BadBody, check_depth, relay
from .responses import FACE as HTTP
from .responses import ResponsesEncoder, chat_request, compacted, summarize
from .stored import continued, input_items, output_items, store_response

KEPT = 4  # responses whose conversation a socket keeps (the latest; older ones: the store)
LIMIT_CODE = "websocket_connection_limit_reached"
BUSY_CODE = "response_already_in_flight"
_NOT_CREATE = ("type", "generate", "stream", "background")  # a message's fields no request has


@dataclass(frozen=True, slots=True)
class Turn:
    """A response the socket keeps: the conversation up to it (every item of its input and
    output, and of those before it), its size, and the `tools` and `instructions` of a
    `generate: false` warm-up (None for a generated response)."""

    items: tuple[Any, ...]
    size: int
    tools: Any = None
    instructions: Any = None


class Turns:
    """The socket's latest `KEPT` responses by id, oldest evicted; one whose conversation is
    over `max_bytes` is not kept (continuing it would be refused, as over HTTP)."""

    def __init__(self, max_bytes: int, kept: int = KEPT) -> None:
        self._turns: OrderedDict[str, Turn] = OrderedDict()
        self._max_bytes = max_bytes
        self._kept = kept

    def get(self, id: str) -> Turn | None:
        return self._turns.get(id)

    def keep(self, id: str, turn: Turn) -> None:
        if turn.size > self._max_bytes:
            return
        self._turns[id] = turn
        self._turns.move_to_end(id)
        while len(self._turns) > self._kept:
            self._turns.popitem(last=False)


class Refused(Exception):
    """A message answered with an error event: its status, message, code and param."""

    def __init__(
        self, status: int, message: str, code: str | None = None, param: str | None = None
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.param = status, code, param


def error_event(
    status: int,
    message: str,
    code: str | None = None,
    param: str | None = None,
    headers: dict[str, str] | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """A Responses `error` event (the schema's `ResponseErrorEvent`), with the HTTP status and
    OpenAI error body the request would have had, as Codex reads them (`headers`: its
    Retry-After or x-should-retry)."""
    error = openai_error(status, message, code=code, param=param, **fields)["error"]
    event: dict[str, Any] = {
        "type": "error",
        "status": status,
        "error": error,
        "code": error["code"],
        "message": message,
        "param": error["param"],
        "sequence_number": 0,
    }
    if headers:
        event["headers"] = headers
    return event


def farewell(max_s: float) -> str:
    """The error a socket gets when it has been open `max_s` (OpenAI's words and code)."""
    message = (
        f"Responses websocket connection limit reached ({max_s / 60:g} minutes). "
        "Create a new websocket connection to continue."
    )
    return orjson.dumps(error_event(400, message, LIMIT_CODE)).decode()


async def connect(gateway: Serving, request: Request) -> StreamResponse:
    """`GET /v1/responses` with `Upgrade: websocket` (behind the guard, as every path: the same
    client keys, and the socket holds one of its key's requests under way); 426 without it."""
    accept = accept_token(request)
    session = Session(gateway, request)
    return Switch(session.run, accept, farewell(gateway.config.server.websocket_max_s))


def line(_event: str | None, data: bytes) -> bytes:
    """An event as a line of its own (a WebSocket message, `_Messages`; its data names its
    type): a provider's frame whose JSON spans lines is written on one."""
    if b"\n" in data:
        data = orjson.dumps(orjson.loads(data))
    return data + b"\n"


class _Messages:
    """A response's events as text messages (a `relay.Sink`), one a line."""

    def __init__(self, ws: WebSocket) -> None:
        self.ws = ws

    @property
    def ending(self) -> bool:
        return False  # the server's shutdown closes the socket (1001) rather than cancel

    async def write(self, data: bytes) -> None:
        for event in data.split(b"\n"):
            if event:
                await self.ws.send(event.decode())


class Session:
    """One socket's messages: each `response.create` a turn, one at a time."""

    def __init__(self, gateway: Serving, request: Request) -> None:
        self.gateway = gateway
        self.request = request
        self.who = owner(request)
        self.turns = Turns(gateway.config.server.max_body_bytes)
        self._turn: asyncio.Task[None] | None = None

    async def run(self, ws: WebSocket, request: Request) -> None:
        """Answer the socket's messages until it closes (`request`: its upgrade's); a turn
        under way when it closes is cancelled, with its upstream."""
        try:
            while (message := await ws.receive()) is not None:
                try:
                    frame = _frame(message, self.gateway.config.server.max_body_bytes)
                except Refused as exc:
                    await _refuse(ws, exc)
                    continue
                kind = frame.get("type")
                if kind == "response.processed":  # Codex's receipt: nothing to say
                    continue
                if kind != "response.create":
                    said = f"unsupported event type {str(kind)[:100]!r}: send response.create"
                    await _refuse(ws, Refused(400, said, "unsupported_event_type", "type"))
                elif self._turn is not None and not self._turn.done():
                    said = "a response is under way on this socket: send the next when it ends"
                    await _refuse(ws, Refused(409, said, BUSY_CODE))
                else:
                    ws.busy = True
                    self._turn = asyncio.create_task(self.create(ws, frame))
        finally:
            if self._turn is not None and not self._turn.done():
                self._turn.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._turn

    async def create(self, ws: WebSocket, frame: dict[str, Any]) -> None:
        """One `response.create`: a request through the engine, its events on the socket, an
        access line of its own."""
        start = time.monotonic()
        served = log.turn()
        if isinstance(frame.get("model"), str):  # the engine's event names it, when it runs
            served.model = frame["model"]
        status = 200
        try:
            status = await self._answer(ws, frame)
        except asyncio.CancelledError:
            status = 499  # the client went away
            raise
        except ConnectionError:
            status = 499
        except Exception as exc:  # a bug of ours: still an error event, and one line in the log
            status = 500
            log.server_log.error("response.create on %s failed", self.request.path, exc_info=exc)
            with contextlib.suppress(ConnectionError):
                await _refuse(ws, Refused(500, "internal error"))
        finally:
            log.turn_line(self.request.path, status, time.monotonic() - start, served)
            ws.settle()

    async def _answer(self, ws: WebSocket, frame: dict[str, Any]) -> int:
        """The turn's events, or its error event; the status it would have had over HTTP."""
        try:
            await self._create(ws, frame)
        except Refused as exc:
            await _refuse(ws, exc)
            return exc.status
        except RequestError as exc:
            await _refuse(ws, Refused(exc.status, str(exc), param=exc.param))
            return exc.status
        except AllProvidersFailed as exc:
            status, body, headers = HTTP.failure(exc)
            error = body["error"]
            said = {k.lower(): v for k, v in (headers or {}).items()}
            event = error_event(status, str(error.get("message") or ""), headers=said)
            event |= {"error": error, "code": error.get("code"), "param": error.get("param")}
            await ws.send(orjson.dumps(event).decode())
            return status
        return 200

    async def _create(self, ws: WebSocket, frame: dict[str, Any]) -> None:
        if frame.get("background") is True:
            raise Refused(400, "'background' is not supported over WebSocket", param="background")
        given = {k: v for k, v in frame.items() if k not in _NOT_CREATE}
        body, before = await self._continued(given)
        if frame.get("generate") is False:
            await self._warm(ws, given, body, before)
            return
        if compaction.triggered(body):
            await self._compact(ws, given, body)
            return
        native = {**body, "stream": True}
        req, _ = chat_request(self.gateway, native, self.request)
        stream = await self.gateway.router.stream(req)
        try:
            out = ResponsesEncoder(native, stream, line)
            if not await relay(_Messages(ws), stream, out):
                return
            answer = out.answer()
        finally:
            await stream.aclose()
        if answer is None or not isinstance(answer.get("id"), str):
            return
        output = output_items(answer)
        size = before + len(orjson.dumps(input_items(given))) + len(orjson.dumps(output))
        self.turns.keep(answer["id"], Turn((*body["input"], *output), size))
        await store_response(self.gateway, self.request, given, answer)

    async def _continued(self, given: dict[str, Any]) -> tuple[dict[str, Any], int]:
        """The request with the conversation of its `previous_response_id` in front of its
        input (from the socket, else the store), and that conversation's size; a warm-up's
        tools and instructions when it sends none."""
        previous = given.get("previous_response_id")
        body = {k: v for k, v in given.items() if k != "previous_response_id"}
        if previous is None:
            body["input"] = input_items(given)
            return body, 0
        if not isinstance(previous, str) or not previous:
            raise Refused(
                400, "'previous_response_id' must be a string", None, "previous_response_id"
            )
        turn = self.turns.get(previous)
        if turn is None:
            try:
                found = await continued(self.gateway, given, self.who)
            except RequestError as exc:
                if exc.status != 404:
                    raise
                message = f"Previous response with id {previous!r} not found."
                raise Refused(
                    400, message, "previous_response_not_found", "previous_response_id"
                ) from None
            found.pop("previous_response_id", None)
            return found, len(orjson.dumps(found.get("input")))
        body["input"] = [*turn.items, *input_items(given)]
        size = turn.size + len(orjson.dumps(body["input"][len(turn.items) :]))
        limit = self.gateway.config.server.max_body_bytes
        if size > limit:
            message = (
                f"the conversation of previous_response_id is over {limit} bytes "
                "(server.max_body_bytes): start a new one"
            )
            raise Refused(413, message, param="previous_response_id")
        if turn.tools is not None and "tools" not in body:
            body["tools"] = turn.tools
        if turn.instructions is not None and "instructions" not in body:
            body["instructions"] = turn.instructions
        return body, turn.size

    async def _compact(self, ws: WebSocket, given: dict[str, Any], body: dict[str, Any]) -> None:
        """A request ending in `compaction_trigger`: the response whose output is the
        conversation's `compaction`; a turn continuing it continues from that output alone."""
        output, result = await summarize(self.gateway, self.request, body, trigger=True)
        events, answer = compacted(body, output, result)
        for _, data in events:
            await ws.send(orjson.dumps(data).decode())
        self.turns.keep(answer["id"], Turn(tuple(output), len(orjson.dumps(output))))
        await store_response(self.gateway, self.request, given, answer)

    async def _warm(
        self, ws: WebSocket, given: dict[str, Any], body: dict[str, Any], before: int
    ) -> None:
        """`generate: false`: no provider; a response with no output whose id a later turn
        continues (checked as a request would be, so that its errors come now)."""
        ChatRequest.checked(decode_request(body).body)
        encoder = StreamEncoder(body, int(time.time()), str(body.get("model") or "unknown"))
        for _, data in [*encoder.start(), *encoder.finish_events()]:
            await ws.send(orjson.dumps(data).decode())
        answer = encoder.response()
        size = before + len(orjson.dumps(input_items(given)))
        turn = Turn(tuple(body["input"]), size, body.get("tools"), body.get("instructions"))
        self.turns.keep(answer["id"], turn)


def _frame(message: str | bytes, limit: int) -> dict[str, Any]:
    """A message as a JSON object (of at most `limit` bytes, a request's)."""
    if isinstance(message, bytes):
        raise Refused(400, "send events as text messages (JSON), not binary ones")
    if len(message) > limit:  # characters: at least as many bytes
        raise Refused(413, f"the message is over {limit} bytes (server.max_body_bytes)")
    try:
        frame = orjson.loads(message)
    except orjson.JSONDecodeError as exc:
        raise Refused(400, f"the message is not valid JSON: {exc}") from None
    if not isinstance(frame, dict):
        raise Refused(400, "the message must be a JSON object with a 'type'")
    try:
        check_depth(frame)
    except BadBody as exc:
        raise Refused(400, str(exc)) from None
    return frame


async def _refuse(ws: WebSocket, exc: Refused) -> None:
    event = error_event(exc.status, str(exc), exc.code, exc.param)
    await ws.send(orjson.dumps(event).decode())


FACE = dataclasses.replace(HTTP, routes=(("GET", "/v1/responses", connect), *HTTP.routes))
"""The Responses face's row: `responses.FACE`'s routes and the WebSocket's."""
