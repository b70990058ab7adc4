"""One embeddings try (protocol §10.3): a request's inputs split into batches of at most the
provider's `max_batch` (and `VALUES_PER_BATCH` numbers), sent a few at a time, their vectors
checked and put back in input order. The answer is one provider's: a batch that fails fails
the whole try (the walk moves on with every input), and the others still under way are
cancelled.

The payload is the answer in OpenAI's shape (`object: list`, `data`, `model`, `usage`), each
vector compact (`wire.Vector`); the faces write it in their API and encoding.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from ..chat.request import ChatRequest
from ..core.outcomes import OK, Outcome, mismatch
from ..dialects import Mismatch
from ..dialects import embeddings as wire
from ..net.transport import CLIENT_ERRORS, past_deadline, transport_failure, whole_timeouts
from ..net.upstream import Client
from . import judge
from .prepared import PreparedProvider
from .send import Target, Tried

AT_ONCE = 4  # batches of one request under way at a time
CHECKED_AT_ONCE = 64  # vectors checked between two turns of the event loop
EXCERPT = 4096  # bytes of a malformed answer kept for its attempt
# Numbers one upstream answer may hold (inputs x width): its parse holds the event loop and
# a Python float's 32 bytes each for as long as it takes (~15-50 ms at this size), so a batch
# is cut smaller than `max_batch` for wide vectors (256 inputs of 1,024, 64 of 4,096).
VALUES_PER_BATCH = 256 * 1024


class _Failed(Exception):
    """A batch's failure, with what ended it (the first wins)."""

    def __init__(self, outcome: Outcome, raw: bytes | None) -> None:
        self.outcome, self.raw = outcome, raw


def url(prepared: PreparedProvider, model: str) -> str:
    """The embeddings URL of `prepared` for `model`, the key in its query when `auth_query`
    says so (the config checked there is one: `Provider` validation)."""
    spec = prepared.spec
    configured = spec.embeddings.endpoint if spec.embeddings else None
    kind = wire.kind_of(spec.format)
    if configured is None and kind == "gemini":
        return wire.gemini_url(prepared.url(model, False))
    found = configured or wire.default_url(kind, spec.endpoint)
    assert found is not None
    return prepared.keyed(found)


def batch_size(prepared: PreparedProvider, width: int) -> int:
    """How many inputs one request to `prepared` holds: its `max_batch`, fewer for wide vectors
    (`VALUES_PER_BATCH`)."""
    spec = prepared.spec.embeddings
    assert spec is not None
    limit = spec.max_batch or wire.MAX_BATCH[wire.kind_of(prepared.spec.format)]
    return min(limit, max(1, VALUES_PER_BATCH // width))


def requests(prepared: PreparedProvider, req: ChatRequest) -> int:
    """How many requests a try of `req` on `prepared` sends: its batches."""
    size = batch_size(prepared, req.body["dimensions"])
    return -(-len(req.body["input"]) // size)


def batches(inputs: list[Any], size: int) -> list[list[Any]]:
    """`inputs` cut in order into lists of at most `size`."""
    return [inputs[i : i + size] for i in range(0, len(inputs), size)]


async def send(
    session: Client, target: Target, remaining_s: float, now: float
) -> Tried[dict[str, Any]]:
    """One try of an embeddings request (`target.req.body`: its `input` list and the space's
    `dimensions`) on `target.prepared`, asked for `target.model`."""
    prepared, body = target.prepared, target.req.body
    spec = prepared.spec.embeddings
    assert spec is not None
    kind = wire.kind_of(prepared.spec.format)
    width: int = body["dimensions"]
    inputs: list[Any] = body["input"]
    address = url(prepared, target.model)
    sent_width = width if spec.send_dimensions else None
    gate = asyncio.Semaphore(AT_ONCE)
    timeouts = whole_timeouts(prepared.connect_s, prepared.read_s, remaining_s)

    async def one(part: list[Any]) -> tuple[list[wire.Vector], int]:
        payload = wire.request_body(kind, target.model, part, sent_width)
        async with gate:
            try:
                resp, raw = await session.fetch(
                    "POST",
                    address,
                    orjson.dumps(payload),
                    prepared.headers,
                    timeouts,
                    prepared.tls,
                    prepared.proxy,
                )
            except CLIENT_ERRORS as exc:
                raise _Failed(
                    transport_failure(exc, past_deadline(exc), prepared.proxy), None
                ) from None
        refused, answer = judge.parsed(
            prepared, resp.status, resp.content_type, raw, resp.headers, now
        )
        if refused is not None:
            raise _Failed(refused, raw)
        head, raw = raw[:EXCERPT], b""  # the answer's text is not kept while it is checked
        try:
            found, tokens = wire.vectors(kind, answer, len(part))
            tokens = tokens or wire.estimated_tokens(part)  # Gemini's batches say none
            del answer  # each vector's numbers are freed as it is made compact
            for i in range(len(found)):
                found[i] = wire.checked(i, found[i], width)
                if i % CHECKED_AT_ONCE == CHECKED_AT_ONCE - 1:
                    await asyncio.sleep(0)  # every other client's turn
        except Mismatch as exc:
            raise _Failed(mismatch(str(exc), resp.status), head) from None
        return found, tokens

    size = batch_size(prepared, width)
    failed: list[_Failed] = []
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(one(part)) for part in batches(inputs, size)]
    except* _Failed as failures:
        failed = [f for f in failures.exceptions if isinstance(f, _Failed)]
    if failed:
        return Tried(failed[0].outcome, None, failed[0].raw)
    vectors = [v for task in tasks for v in task.result()[0]]
    tokens = sum(task.result()[1] for task in tasks)
    return Tried(OK, answer_of(target.req.model or "", vectors, tokens))


def answer_of(space: str, vectors: list[wire.Vector], tokens: int) -> dict[str, Any]:
    """The answer in OpenAI's shape, for space `space`."""
    return {
        "object": "list",
        "data": [
            {"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)
        ],
        "model": space,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }
