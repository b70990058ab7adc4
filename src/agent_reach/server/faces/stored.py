"""Stored responses (protocol §10.1): a response created with `store` not false is kept in the
state store for `server.responses_ttl_s`, so that `previous_response_id` continues a
conversation (`continued`) and `GET` / `DELETE /v1/responses/{id}` find it; each belongs to the
client key that created it (`guard.owner`), and is not found for any other. Each turn is
stored once (its own input, the response, the id of the one before it); a continuation walks
the links back, and is refused (413) when the conversation passes `server.max_body_bytes`, as
the client sending it whole would be. The store keeps `server.responses_max_*` of them in all
and `server.responses_key_max_*` per client key, evicting the oldest.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from ...core.errors import RequestError, quoted
from ...state import Keep
from ..http11.wire import Request, Response
from .face import Serving, owner
from .relay import json_response


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
