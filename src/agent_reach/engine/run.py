"""One request on its way through the walk (`Run`): pure, but for the request type it carries.

The engine makes one per request (`Engine._run`); the walk, the deadline and the trace so far
live in it, and so do the client's own limits, which only shorten the config's (protocol §4.1).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..chat.request import ChatRequest
from ..core.outcomes import DEADLINE_DETAIL, FIRST_TOKEN, Outcome
from ..core.routing import Policy, Walk
from ..core.trace import Attempt, Reason
from .prepared import PreparedProvider


@dataclass(slots=True)
class Run:
    """One request on its way: the request, its walk through the providers, its deadline (on
    the engine's monotonic clock), and the trace so far."""

    req: ChatRequest
    id: str
    route: str
    walk: Walk
    deadline: float
    policy: Policy = field(default_factory=Policy)
    hedged: bool = True  # whether `hedge_after_ms` applies (not in step mode)
    trace: list[Attempt] = field(default_factory=list)
    own_deadline: bool = False  # the client's `deadline_ms`, shorter than the config's, rules
    input_tokens: int | None = None  # the request's estimated input, once a provider asked
    recorded: bool = True  # its tries tell circuits and budgets and make events
    passed: set[str] = field(default_factory=set)  # keys of pools skipped for remembered state
    # Who answered, by provider name: the key of its pool that did (hedged turns race).
    answered: dict[str, PreparedProvider] = field(default_factory=dict)
    home: str | None = None  # its session's home seat, tried first (`affinity`)

    def first_token_s(self, provider_ms: float | None) -> float | None:
        """How long a stream may go without content (protocol §10): its route's
        `first_token_ms`, else the provider's, or the request's when that is shorter (a client
        may only shorten it); None for no limit."""
        configured = self.policy.first_token_ms or provider_ms
        ms = configured if not self._own_first_token(configured) else self.req.first_token_ms
        return ms / 1000 if ms and self.req.stream else None

    def _own_first_token(self, configured: float | None) -> bool:
        asked = self.req.first_token_ms
        return asked is not None and (configured is None or asked < configured)

    def own_limit(self, outcome: Outcome, provider_ms: float | None) -> bool:
        """Whether `outcome` is the client's doing: a timeout of a limit it set tighter than the
        config's (its `deadline_ms`, or its `first_token_ms` on a stream). Such an outcome says
        nothing about the provider, so it tells no circuit (protocol §4.1)."""
        if outcome.reason is not Reason.TIMEOUT:
            return False
        if outcome.detail.startswith(FIRST_TOKEN):
            return self._own_first_token(self.policy.first_token_ms or provider_ms)
        return self.own_deadline and outcome.detail == DEADLINE_DETAIL

    def left(self, now: float) -> float:
        """Seconds left of the deadline at `now` (monotonic)."""
        return self.deadline - now
