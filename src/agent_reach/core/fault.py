"""Whose fault it is when no provider answered (protocol §5.1): the status a request that failed
gets, in every face (the proxy's status code, `AllProvidersFailed.status`, the CLI's `--json`).
Pure.

Failover exists for provider failures. A failure every provider would repeat, because the
request itself is at fault, must reach the client as the client's error (a 4xx, which SDKs do
not retry), quickly:

- every attempt `model_unavailable`, no model given: 400 `model_required` (param `model`);
- every attempt `model_unavailable`: 404 `model_not_found`;
- the walk stopped on `content_blocked`: 400 `content_filter` (the provider's refusal);
- the last real attempt `context_exceeded`, or every provider skipped for a context window its
  estimated input exceeds: 400 `context_length_exceeded`;
- every real attempt `bad_request`: 400 `bad_request` (the first provider's message);
- any attempt rate limited or out of quota (sent, or skipped for it), the others failures of
  the providers: 429 `rate_limited`, with `Retry-After` the soonest known reopening (the
  reason that lasts: a dead provider beside a used-up one gives the same status every time);
- anything else: 502 `all_providers_failed`.

A real attempt is one that was sent (not a skip).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .trace import EFFECTS, Attempt, Reason


@dataclass(frozen=True, slots=True)
class Fault:
    """The status of a failed request, and what to tell its client."""

    status: int
    code: str
    message: str  # "" to use the failure's own summary
    param: str | None = None
    retry_after: float | None = None  # seconds, for a 429
    used_up: bool = False  # a 429 whose every provider is out of quota (not rate limited)


def fault_of(attempts: Sequence[Attempt], stopped: bool = False, model: str | None = None) -> Fault:
    """The fault of a request whose `attempts` produced no answer; `stopped`: the walk
    stopped on a `content_blocked` refusal (protocol §5.1); `model`: the requested model, as
    a message may quote it."""
    real = [a for a in attempts if a.sent]
    if attempts and all(a.reason is Reason.MODEL_UNAVAILABLE for a in attempts):
        if all(a.detail == "no model given" for a in attempts):
            message = "the request names no model and no provider has one to use"
            return Fault(400, "model_required", message, param="model")
        return Fault(404, "model_not_found", _unserved(model))
    if stopped and real and real[-1].reason is Reason.CONTENT_BLOCKED:
        return Fault(400, "content_filter", _said(real[-1]))
    if real and real[-1].reason is Reason.CONTEXT_EXCEEDED:
        return Fault(400, "context_length_exceeded", _said(real[-1]))
    if attempts and all(a.reason is Reason.CONTEXT_EXCEEDED for a in attempts):
        return Fault(400, "context_length_exceeded", _said(attempts[0]))
    if real and all(a.reason is Reason.BAD_REQUEST for a in real):
        return Fault(400, "bad_request", _said(real[0]))
    later = [a for a in attempts if _later(a.reason)]
    if later:
        waits = [a.retry_after for a in later if a.retry_after is not None]
        message = (
            "every provider is rate limited or out of quota"
            if all(_later(a.reason) for a in real)
            else "no provider can answer now: rate limited or out of quota, or down"
        )
        # A used-up quota is skipped until its window resets; a rate limit is tried again.
        used_up = all(EFFECTS[a.reason].skip for a in later)
        wait = min(waits) if waits else None
        return Fault(429, "rate_limited", message, retry_after=wait, used_up=used_up)
    return Fault(502, "all_providers_failed", "")


def _later(reason: Reason) -> bool:
    """A "come back later" reason: a rate limit, or a used-up quota (its status is 429)."""
    return EFFECTS[reason].status == 429


# The coding agents' model names, by their prefix: a route for the whole family serves every
# version the agent sends (`claude-sonnet-…`, `claude-haiku-…`), where one named after a
# single name would miss the next.
_FAMILIES = (("claude-", "Claude Code's"), ("gpt-", "Codex's"), ("gemini-", "Gemini CLI's"))


def _unserved(model: str | None) -> str:
    """No provider serves `model` (as quoted): which one, and the two lines of config that
    fix it; for an agent's model name, a route for every name of its family."""
    if model is None:
        return "no provider serves the requested model"
    name = model.strip("'\"")
    family = next(((p, who) for p, who in _FAMILIES if name.startswith(p)), None)
    route = model if family is None else f"'{family[0]}*'"
    every = "" if family is None else f" (every one of {family[1]} model names)"
    return (
        f"no provider serves the requested model {model}; to send it to a provider, add to"
        ' that provider `model_map: {"*": <a model it serves>}`, or add a route named after'
        f" it: `routes: {{{route}: [<providers>]}}`{every}"
    )


def _said(attempt: Attempt) -> str:
    """What the refusing provider said, naming it."""
    return f"{attempt.provider}: {attempt.detail}" if attempt.detail else attempt.provider
