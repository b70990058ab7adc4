"""`POST /v1/messages` and `POST /v1/messages/count_tokens`: the Anthropic Messages face of the
proxy (protocol §10.1), the API Claude Code speaks.

A Messages request is read into the engine's chat request
(`dialects.anthropic.request.decode_request`) and keeps the body as it came (`native`): a
`format: anthropic` provider gets that body and its answer or stream is forwarded as it is;
any other provider's answer is rendered back into Messages, with `X-Agent-Reach-Dropped`
naming what that provider was not sent.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import orjson

from ...chat.request import ChatRequest
from ...core.errors import StreamInterrupted
from ...dialects.anthropic.answer import encode_answer
from ...dialects.anthropic.request import decode_request
from ...dialects.anthropic.schema import estimate_tokens
from ...dialects.anthropic.stream import StreamEncoder
from ..http11.wire import Request, Response, StreamResponse
from .face import Face, Serving, by_class
from .relay import json_response, read_json, sse, streamed, whole, with_headers

if TYPE_CHECKING:
    from ...engine.stream import ChatStream


def _betas(given: str | None, allowed: list[str]) -> str | None:
    """The client's `anthropic-beta` flags that `server.anthropic_betas` lets through (a
    beta may add server-side tools or change billing: the config decides, not the client)."""
    if not given:
        return None
    if "*" in allowed:
        return given
    kept = [flag for f in given.split(",") if (flag := f.strip()) in allowed]
    return ",".join(kept) or None


async def create(gateway: Serving, request: Request) -> StreamResponse:
    """`POST /v1/messages`: one message, whole or streamed, with failover."""
    body = await read_json(request)
    inbound = decode_request(body)
    req = replace(
        ChatRequest.checked(inbound.body),
        api="messages",
        native=body,
        native_headers=_beta(gateway, request),
        marked=inbound.marked,
        raw_response=False,  # a Messages client always gets a Messages body
    )
    req = with_headers(req, request)  # its session from its `metadata` too
    if req.stream:
        return await streamed(gateway, FACE, request, req, inbound.dropped, MessagesEncoder)
    return await whole(gateway, FACE, req, inbound.dropped, encode_answer)


async def count_tokens(gateway: Serving, request: Request) -> Response:
    """`POST /v1/messages/count_tokens`: counted by the route's first native Anthropic
    provider, else (or when it gives no count) a local estimate."""
    body = await read_json(request)
    estimate = estimate_tokens(body)  # checks the request too
    asked: dict[str, Any] = {k: body[k] for k in ("model", "messages", "agent_reach") if k in body}
    req = replace(
        with_headers(ChatRequest.checked(asked), request),
        api="messages",
        native=body,
        native_headers=_beta(gateway, request),
    )
    counted = await gateway.router.count_tokens(req)
    if counted is None:
        return json_response({"input_tokens": estimate})
    provider, tokens = counted
    return json_response({"input_tokens": tokens}, {"X-Agent-Reach-Provider": provider})


def _beta(gateway: Serving, request: Request) -> dict[str, str] | None:
    """The client's `anthropic-beta` header (Anthropic needs it for beta fields), with the
    flags `server.anthropic_betas` allows."""
    beta = _betas(request.headers.get("anthropic-beta"), gateway.config.server.anthropic_betas)
    return {"anthropic-beta": beta} if beta else None


class MessagesEncoder:
    """The stream as Messages events: a chat provider's chunks rendered, a Messages provider's
    own events as it sent them; a cut after the start ends it with `event: error`."""

    def __init__(self, stream: ChatStream) -> None:
        self.forwarding = stream.native
        self.events = StreamEncoder()

    def start(self) -> bytes:
        return b""

    def chunks(self, batch: list[dict[str, Any]]) -> bytes:
        return _sse([(e, orjson.dumps(d)) for chunk in batch for e, d in self.events.feed(chunk)])

    def frames(self, frames: list[tuple[str | None, bytes]]) -> bytes:
        return _sse(frames)

    def end(self) -> bytes:
        if self.forwarding:
            return b""
        return _sse([(e, orjson.dumps(d)) for e, d in self.events.end()])

    def cut(self, exc: StreamInterrupted) -> bytes:
        attempts = [a.to_dict() for a in exc.attempts]
        return sse("error", orjson.dumps(anthropic_error(500, str(exc), attempts=attempts)))


async def models(gateway: Serving, request: Request) -> Response:
    """`GET /v1/models` from an Anthropic client (it sends `anthropic-version`; Claude Code's
    gateway model discovery): every name a request may ask for, as Anthropic lists them, a page
    at a time (`limit` 1-1000, default 20; `after_id` or `before_id`)."""
    names = [m["id"] for m in gateway.model_names()]
    query = request.query
    limit = query.get("limit", "20")
    if not limit.isdigit() or not 1 <= int(limit) <= 1000:
        return FACE.error_response(400, "limit: expected a whole number from 1 to 1000")
    start, end = 0, len(names)
    for param in ("after_id", "before_id"):
        given = query.get(param)
        if given is None:
            continue
        if given not in names:
            return FACE.error_response(400, f"{param}: no model {given!r}")
        if param == "after_id":
            start = names.index(given) + 1
        else:
            end = names.index(given)
    count = int(limit)
    backwards = "before_id" in query and "after_id" not in query
    page = names[max(start, end - count) : end] if backwards else names[start : start + count]
    more = (start < end - count) if backwards else (start + count < end)
    listed = [
        {"type": "model", "id": n, "display_name": n, "created_at": "1970-01-01T00:00:00Z"}
        for n in page
    ]
    first, last = (page[0], page[-1]) if page else (None, None)
    return json_response({"data": listed, "has_more": more, "first_id": first, "last_id": last})


def _sse(frames: list[tuple[str | None, bytes]]) -> bytes:
    return b"".join(sse(e, d) for e, d in frames)


_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",  # the SDKs' error types have no `request_too_large`
    429: "rate_limit_error",
    529: "overloaded_error",
}


def anthropic_error(status: int, message: str, **fields: Any) -> dict[str, Any]:
    """Anthropic's error body, `{"type": "error", "error": {"type", "message"}}`, with its
    types (an OpenAI type given is not one: the status decides); no `code` or `param`."""
    asked = fields.pop("type", None)
    kind = asked if asked in _ANTHROPIC_TYPES.values() else _ANTHROPIC_TYPES.get(status)
    for name in ("code", "param"):
        fields.pop(name, None)
    error = {"type": kind or by_class(status), "message": message, **fields}
    return {"type": "error", "error": error}


FACE = Face(
    "messages",
    (("POST", "/v1/messages", create), ("POST", "/v1/messages/count_tokens", count_tokens)),
    anthropic_error,
    prefixes=("/v1/messages",),
    too_long="prompt is too long",
    failed_type=False,
)
