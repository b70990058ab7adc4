"""One try of one provider over HTTP: POST the request, read the answer (or the stream up to
its first content chunk), and reduce whatever happened to an `Outcome` through `outcomes`.

`fetch` reads a whole answer; `open_stream` returns a `LiveStream` that has produced content.
Both are bounded by the provider's connect and read timeouts, each capped by what is left of
the request's deadline; nothing of a failed try stays open, whatever ends it (cancellation
included).
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any, Generic, TypeVar

from ..chat import completion
from ..chat.request import ChatRequest
from ..core.outcomes import FIRST_TOKEN, Outcome, classify, filtered, mismatch
from ..core.records import record
from ..core.trace import Reason
from ..dialects import Mismatch, ProviderError, artifacts
from ..dialects.convert import max_tokens_of
from ..dialects.framing import framer
from ..net.exchange import Response
from ..net.transport import (
    CLIENT_ERRORS,
    kind_of,
    past_deadline,
    timeouts,
    transport_failure,
    whole_timeouts,
)
from ..net.upstream import Client
from . import judge
from .live import STREAM_FAILURES, LiveStream, Stalled
from .prepared import PreparedProvider

T_co = TypeVar("T_co", covariant=True)


@record
class Target:
    """One try's what and where: the request, the provider, the model it is asked for, and
    whether the answer is wanted as the provider gave it (`raw_body`: the request asks for
    that, or the provider speaks the request's own API) rather than normalized."""

    prepared: PreparedProvider
    req: ChatRequest
    model: str
    window: int | None = None  # the model's context window, when known
    raw_body: bool = False
    first_token_s: float | None = None  # a stream's first content must come within this
    max_output: int | None = None  # the output cap it takes (configured or learned)
    bare: bool = False  # without reasoning artifacts: the provider refused them (protocol §5)

    @property
    def sent_cap(self) -> int | None:
        """The output cap the request goes with: what it asks for, lowered to `max_output`."""
        asked = max_tokens_of(self.req.body)
        if not isinstance(asked, int):
            return None
        return asked if self.max_output is None else min(asked, self.max_output)

    @classmethod
    def of(
        cls,
        prepared: PreparedProvider,
        req: ChatRequest,
        model: str,
        window: int | None = None,
        first_token_s: float | None = None,
        origins: artifacts.Origins | None = None,
        max_output: int | None = None,
    ) -> Target:
        """The try of `req` on `prepared`, asked for `model` (`prepared.model_for`, whose
        context window is `window`), capped at `max_output`; `origins`: who wrote the
        reasoning of its earlier turns, so that another provider's is left out."""
        speaks = prepared.speaks(req)
        messages = req.body.get("messages")
        if origins and isinstance(messages, list) and not speaks:
            homed = artifacts.home_reasoning(messages, prepared.origin, origins)
            if homed is not messages:
                req = replace(req, body={**req.body, "messages": homed})
        raw = req.raw_response or speaks
        return cls(prepared, req, model, window, raw, first_token_s, max_output)


@record
class Tried(Generic[T_co]):
    """How one try ended: its outcome, what it produced when ok, the raw body when not."""

    outcome: Outcome
    payload: T_co | None = None
    raw: bytes | None = None


def _judge(
    target: Target, resp: Response, raw: bytes, raw_body: bool, now: float
) -> tuple[Outcome, dict[str, Any] | None]:
    return judge.answer(
        target.prepared,
        status=resp.status,
        content_type=resp.content_type,
        raw=raw,
        headers=resp.headers,
        model=target.model,
        requested=target.req.model,
        raw_response=raw_body,
        now=now,
    )


async def fetch(
    session: Client, target: Target, remaining_s: float, now: float
) -> Tried[dict[str, Any]]:
    """One non-streamed try: the answer normalized, or as the provider gave it (`raw_body`)."""
    prepared, req = target.prepared, target.req
    try:
        resp, raw = await session.fetch(
            "POST",
            prepared.url(target.model, False),
            prepared.body(req, target.model, False, target.max_output, target.bare),
            prepared.headers_for(req, False),
            whole_timeouts(prepared.connect_s, prepared.read_s, remaining_s),
            prepared.tls,
            prepared.proxy,
        )
    except CLIENT_ERRORS as exc:
        return Tried(transport_failure(exc, past_deadline(exc), prepared.proxy))
    outcome, response = _judge(target, resp, raw, target.raw_body, now)
    return Tried(outcome, response, None if outcome.reason is Reason.OK else raw)


async def open_stream(
    session: Client, target: Target, remaining_s: float, now: float
) -> Tried[LiveStream]:
    """One streamed try, up to its first content chunk (protocol §10 "Streaming")."""
    prepared = target.prepared
    if prepared.has_hooks:  # hooks transform whole answers: ask for one, replay it
        whole = await fetch(session, replace(target, raw_body=False), remaining_s, now)
        chunks = None if whole.payload is None else completion.as_chunks(whole.payload)
        return Tried(
            whole.outcome, None if chunks is None else LiveStream.replay(chunks), whole.raw
        )
    limit = asyncio.timeout(remaining_s)
    first = asyncio.timeout(target.first_token_s)  # None: no limit of its own
    resp: Response | None = None
    live: LiveStream | None = None
    status: int | None = None
    handed_over = False
    try:
        async with limit, first:
            resp = await session.request(
                "POST",
                prepared.url(target.model, True),
                prepared.body(target.req, target.model, True, target.max_output, target.bare),
                prepared.headers_for(target.req, True),
                timeouts(prepared.connect_s, prepared.read_s, remaining_s),
                prepared.tls,
                prepared.proxy,
            )
            status = resp.status
            ctype = resp.content_type
            if not 200 <= status < 300 or ctype == "application/json" or "html" in ctype:
                # An error, or a whole answer to a stream request: judge it as one.
                raw = await resp.read()
                outcome, body = _judge(target, resp, raw, False, now)
                if body is None:
                    return Tried(outcome, None, raw)
                return Tried(outcome, LiveStream.replay(completion.as_chunks(body)))
            ctx = prepared.context(target.model, int(now))
            live = LiveStream(
                resp,
                framer(prepared.dialect.framing),
                prepared.dialect.decoder(ctx),
                keep_frames=prepared.speaks(target.req),
                mark=prepared.tag_frame,
                redactor=prepared.redactor or None,
            )
            if not await live.first_content():
                return Tried(_empty(live, status))
            handed_over = True
            return Tried(Outcome(Reason.OK, status), live)
    except STREAM_FAILURES as exc:
        if first.expired() and not limit.expired():
            ms = round((target.first_token_s or 0) * 1000)
            return Tried(Outcome(Reason.TIMEOUT, status, f"{FIRST_TOKEN} {ms} ms"))
        return Tried(stream_failure(exc, limit, status, now, prepared))
    finally:  # also on cancellation: nothing of a failed try stays open
        if not handed_over:
            if live is not None:
                await live.aclose()
            elif resp is not None:
                resp.close()


def _empty(live: LiveStream, status: int) -> Outcome:
    """Why a stream ended before any content: the provider filtered it, or said nothing."""
    choices = [c for chunk in live.pending for c in chunk.get("choices") or ()]
    if completion.filtered(choices):
        return filtered(status)
    return mismatch("stream ended without content", status)


def stream_failure(
    exc: BaseException,
    limit: asyncio.Timeout | None,
    status: int | None,
    now: float,
    prepared: PreparedProvider | None = None,
) -> Outcome:
    """A stream's failure: an error the provider reported, an unreadable frame, or a failure
    below HTTP (`limit` None: after the first chunk, when no deadline timer runs; `prepared`:
    before it, to name its proxy)."""
    if isinstance(exc, ProviderError):
        return classify(status=status, error=exc.info, now=now)
    if isinstance(exc, Mismatch):
        return mismatch(str(exc), status)
    if isinstance(exc, Stalled):
        return Outcome(Reason.TIMEOUT, status, str(exc))
    if limit is None:
        kind, text = kind_of(exc)
        return classify(transport=kind, transport_detail=text)
    return transport_failure(exc, limit.expired(), prepared.proxy if prepared else None)
