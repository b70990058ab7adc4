"""What the engine walks the providers for: an operation (protocol §3). The walk, the turns,
circuits, budgets, state and the trace are the engine's; an operation is what differs: how one
try is sent and judged (`send`, the body and the judge of an answer), which providers can do
it at all (`takes`), whether its tries are recorded (circuits, budgets, events, the attempt
log) and whether a failed try moves on to the next provider.

`ANSWER` is a chat answer whole, `STREAM` a stream up to its first content, `COUNT` the input
tokens of a request in a provider's own API (Messages `count_tokens`): one try at the first
provider that counts, recorded nowhere; `EMBED` the vectors of a request's inputs, from the
providers that serve its embedding space (the request's `model`), each by its own model name.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import orjson

from ..chat.request import ChatRequest
from ..core.outcomes import OK, Outcome
from ..core.trace import Reason
from ..net.transport import CLIENT_ERRORS, whole_timeouts
from ..net.upstream import Client
from . import embed
from .live import LiveStream
from .prepared import PreparedProvider
from .send import Target, Tried, fetch, open_stream

T = TypeVar("T")
Sender = Callable[[Client, Target, float, float], Awaitable[Tried[T]]]
NO_COUNT = Outcome(Reason.SCHEMA_MISMATCH, None, "answered no count")


def _counts(prepared: PreparedProvider, req: ChatRequest) -> bool:
    return prepared.counts(req) is not None


@dataclass(frozen=True, slots=True)
class Operation(Generic[T]):
    """One kind of request the walk is for: `send` one try; `takes`: whether a provider can
    do it (one that cannot is passed over, and nothing is said of it); `recorded`: whether
    its tries tell circuits and budgets and make events (which the attempt log, metrics and
    alerts hear); `fails_over`: whether a failed try moves on to the next provider."""

    name: str
    send: Sender[T]
    takes: Callable[[PreparedProvider, ChatRequest], bool] | None = None  # None: every one
    recorded: bool = True
    fails_over: bool = True
    # The model a provider is asked for; None: its chat one (`PreparedProvider.model_for`,
    # for the providers whose `models` serve the request's).
    model: Callable[[PreparedProvider, str], str] | None = None
    # How many upstream requests one try sends, which it takes from request budgets up front;
    # None: one.
    requests: Callable[[PreparedProvider, ChatRequest], int] | None = None

    def model_for(self, prepared: PreparedProvider, requested: str | None) -> str:
        if self.model is None:
            return prepared.model_for(requested)
        return self.model(prepared, requested or "")

    def serves(self, prepared: PreparedProvider, requested: str | None) -> bool:
        """Whether `prepared` may be asked (an operation with models of its own: `takes`
        chose it)."""
        return self.model is not None or prepared.serves(requested)


async def count(session: Client, target: Target, remaining_s: float, _now: float) -> Tried[int]:
    """The input tokens of a request as its provider counts them (`PreparedProvider.counts`):
    `ok` with the count, else `NO_COUNT` (any status but 200, a body without one, a failure
    below HTTP); within its connect and read timeouts and what is left of the deadline,
    judged by nothing else."""
    prepared, req = target.prepared, target.req
    url = prepared.counts(req)
    if url is None:
        return Tried(NO_COUNT)
    try:
        resp, raw = await session.fetch(
            "POST",
            url,
            prepared.count_body(req),
            prepared.headers_for(req, False),
            whole_timeouts(prepared.connect_s, prepared.read_s, remaining_s),
            prepared.tls,
            prepared.proxy,
        )
    except CLIENT_ERRORS:
        return Tried(NO_COUNT)
    try:
        counted = orjson.loads(raw).get("input_tokens") if resp.status == 200 and raw else None
    except (orjson.JSONDecodeError, AttributeError):
        return Tried(NO_COUNT)
    if isinstance(counted, int) and not isinstance(counted, bool):
        return Tried(OK, counted)
    return Tried(NO_COUNT)


def _embeds(prepared: PreparedProvider, req: ChatRequest) -> bool:
    served = prepared.spec.embeddings
    if served is None or (req.model or "") not in served.models:
        return False
    return served.token_input or not req.body.get("tokens")


def _embedding_model(prepared: PreparedProvider, space: str) -> str:
    served = prepared.spec.embeddings
    assert served is not None
    return served.models[space]


ANSWER: Operation[dict[str, Any]] = Operation("answer", fetch)
STREAM: Operation[LiveStream] = Operation("stream", open_stream)
COUNT: Operation[int] = Operation("count_tokens", count, _counts, recorded=False, fails_over=False)
EMBED: Operation[dict[str, Any]] = Operation(
    "embed", embed.send, _embeds, model=_embedding_model, requests=embed.requests
)


def for_request(req: ChatRequest) -> Operation[dict[str, Any]]:
    """What a whole-answer request is for: vectors (an embeddings request), else a reply."""
    return EMBED if req.api == "embeddings" else ANSWER
