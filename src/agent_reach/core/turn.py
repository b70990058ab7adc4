"""One provider's turn in a request's walk, as a state machine. Pure.

Theory of operation
-------------------
The engine does the I/O; this machine decides, in the style of h11: the engine asks what to
do next, does it, and tells the machine what happened. No clock is read here: `now` (the wall
clock, which circuits are kept in) and `left_s` (what is left of the request's deadline) come
in as arguments, so the machine is tested by tables of cases, stepping time by hand.

    begin()                    -> Gather | Send          (a last resort skips every check)
    consider(facts, now)       -> Skip | Consult | Send    (protocol §4 step 1, §5.1 windows;
                                                          a bad key's circuit is no last resort)
    checked(health, checked_now, now) -> Skip | Send          (its health check, cached or run now)
    over_budget(detail, reopens_in) -> Skip              (a budget filled up just before sending)
    lease_lost()               -> Skip                   (another instance holds the trial)
    sent(outcome, left_s, cap, fields) -> Clamp | Sleep | Send | Done
                                                         (a retry; once with a lower cap; once
                                                          without refused reasoning artifacts;
                                                          or the end of the turn)
    woke(left_s)               -> Send | Skip            (after the retry's wait)

A refusal that states the provider's output cap in its known wording for the field sent
(`fields`), below the cap that was sent (`cap`), is a `Clamp`: the engine sends once more with
it, and remembers it only once that try answered (`clamped`; protocol §4, output caps).
A `Send` carries the half-open lease to take first, when the circuit's cooldown has passed
(the one trial, protocol §5: `breaker.admit`). What a sent outcome does to the provider's circuit
is `breaker.record`'s to decide, and whether it counts against its budgets is
`quota.counts`'s; the engine applies both to every outcome a `Send` produced.
"""

from __future__ import annotations

from . import breaker
from .breaker import CircuitState
from .caps import stated_cap
from .outcomes import DEADLINE_DETAIL, Outcome
from .records import record
from .routing import Health, health_verdict, precheck, retry_delay
from .trace import EFFECTS, Reason


@record
class Facts:
    """What the engine knows of a provider before trying it, all free of network cost."""

    serves_model: bool
    model: str | None  # the model the request names
    sent_model: str  # the model this provider would be asked for
    circuit: CircuitState
    missing_key: str | None  # the key variable's name when it is not set
    exhausted: str | None  # which budget is used up, if one is
    has_health: bool  # a health check to consult (the mode is not off, it has a URL)
    lease_s: float  # how long a half-open trial may hold the circuit
    reopens_in: float | None = None  # seconds until the used-up budget's window ends
    context_window: int | None = None  # the input tokens it accepts, when known
    larger_than: int | None = None  # the walk needs a window larger than this (a refusal)
    auth_last_resort: bool = False  # `last_resort_includes_auth`: a bad key's circuit defers
    input_tokens: int | None = None  # the request's estimated input, when a window is known
    refused_model: str | None = None  # why `sent_model` cannot go in its URL, if it cannot


@record
class Gather:
    """Collect the provider's `Facts` and `consider` them."""


@record
class Skip:
    """Not tried this time; recorded with its reason (and the health check's time and status
    when a check ran for it). `counts`: a failed health check that tells the circuit.
    `final`: not tried as last resort either (a circuit opened by a bad key, §4.2)."""

    outcome: Outcome
    ms: float = 0.0
    counts: bool = False
    final: bool = False

    @property
    def deferrable(self) -> bool:
        """Skipped only for remembered state: tried again as last resort (protocol §4.2)."""
        return EFFECTS[self.outcome.reason].deferred and not self.final


@record
class Consult:
    """Consult the provider's health check (cached, or run now), then `checked`."""


@record
class Send:
    """Send one try, after taking `lease` (the half-open trial) when there is one; `bare`:
    without the reasoning artifacts of earlier turns (the provider refused them); `restart`:
    the request as it came, not the prefill of a cut answer (the provider refused that)."""

    lease: CircuitState | None = None
    bare: bool = False
    restart: bool = False


@record
class Clamp:
    """Send again with at most `tokens` output tokens, the most the provider said it takes."""

    tokens: int


@record
class Sleep:
    """Wait, then `woke` (a retry)."""

    seconds: float


@record
class Done:
    """The turn is over: the provider answered (`ok`), or the walk moves on."""

    ok: bool


Action = Gather | Skip | Consult | Send | Clamp | Sleep | Done
DEADLINE_SPENT = Outcome(Reason.TIMEOUT, None, DEADLINE_DETAIL)


def _bad_key(facts: Facts) -> bool:
    """Whether the provider's open circuit is a bad key's, kept out of the last resort."""
    return facts.circuit.cause == Reason.AUTH_FAILED and not facts.auth_last_resort


class Turn:
    """One provider's turn: its checks (unless it is a last resort), then its tries."""

    __slots__ = (
        "_facts",
        "bare",
        "clamped",
        "last_resort",
        "prefilled",
        "provider",
        "retries",
        "tries",
    )

    def __init__(
        self, provider: str, last_resort: bool, retries: int | None, prefilled: bool = False
    ) -> None:
        self.provider = provider
        self.prefilled = prefilled  # it is sent a cut answer as a prefill, to go on from
        self.last_resort = last_resort
        self.retries = retries
        self.tries = 0
        self.clamped: int | None = None  # the cap a `Clamp` lowered the try to
        self.bare = False  # its reasoning artifacts were refused and are left out
        self._facts: Facts | None = None

    def begin(self) -> Gather | Send:
        """A last resort is tried whatever remembered state says (protocol §4.2)."""
        return Send() if self.last_resort else Gather()

    def consider(self, facts: Facts, now: float) -> Skip | Consult | Send:
        """The skip checks that need no network, then its health check, or admission. A
        model its URL cannot take comes first: never deferred, so never a last resort."""
        self._facts = facts
        if facts.refused_model is not None:
            return Skip(Outcome(Reason.MODEL_UNAVAILABLE, None, facts.refused_model))
        skip = precheck(
            serves_model=facts.serves_model,
            model=facts.model,
            circuit=facts.circuit,
            missing_key=facts.missing_key,
            now=now,
            exhausted=facts.exhausted,
        )
        if skip is not None:
            if skip.reason is Reason.QUOTA_EXHAUSTED:
                wait = facts.reopens_in
            elif skip.reason is Reason.QUOTA_EXHAUSTED_UPSTREAM:
                wait = max(0.0, facts.circuit.open_until - now)
            else:
                wait = None
            final = skip.reason is Reason.CIRCUIT_OPEN and _bad_key(facts)
            return Skip(Outcome(skip.reason, None, skip.detail, wait), final=final)
        small = facts.context_window
        if facts.larger_than is not None and small is not None and small <= facts.larger_than:
            detail = f"context_window {small} is not larger than {facts.larger_than}, too small"
            return Skip(Outcome(Reason.CONTEXT_EXCEEDED, None, detail))
        if small is not None and facts.input_tokens is not None and facts.input_tokens > small:
            detail = f"estimated input {facts.input_tokens} tokens exceeds context_window {small}"
            return Skip(Outcome(Reason.CONTEXT_EXCEEDED, None, detail))
        if facts.has_health:
            return Consult()
        return self._admit(now)

    def checked(self, health: Health, checked_now: bool, now: float) -> Skip | Send:
        """What its health check says; a check run for this request tells the circuit."""
        assert self._facts is not None
        verdict = health_verdict(
            health, model=self._facts.sent_model, checked_now=checked_now, now=now
        )
        if verdict is not None:
            return Skip(verdict, health.ms if checked_now else 0.0, counts=True)
        return self._admit(now)

    def _admit(self, now: float) -> Skip | Send:
        assert self._facts is not None
        circuit = self._facts.circuit
        allowed, leased = breaker.admit(circuit, now, self._facts.lease_s)
        if not allowed:
            detail = breaker.opened_detail(circuit, now)
            return Skip(Outcome(Reason.CIRCUIT_OPEN, None, detail), final=_bad_key(self._facts))
        return Send(None if leased is circuit or leased == circuit else leased)

    def over_budget(self, detail: str, reopens_in: float) -> Skip:
        """A request budget was full when the try came to take its request from it (others
        running at once took the rest): skipped as `consider` skips a used-up budget."""
        return Skip(Outcome(Reason.QUOTA_EXHAUSTED, None, detail, reopens_in))

    def lease_lost(self) -> Skip:
        """The half-open trial went to another instance sharing the store (after a used-up
        usage limit, no last resort follows it)."""
        detail = "half-open: the one trial is another instance's"
        out = self._facts is not None and self._facts.circuit.out
        reason = Reason.QUOTA_EXHAUSTED_UPSTREAM if out else Reason.CIRCUIT_OPEN
        return Skip(Outcome(reason, None, detail))

    def sent(
        self,
        outcome: Outcome,
        left_s: float,
        cap: int | None = None,
        fields: frozenset[str] = frozenset(),
    ) -> Clamp | Sleep | Send | Done:
        """After a try: done when it answered; once per turn a `Clamp` when it refused the
        output cap sent (`cap`, in one of `fields`) and said what it takes
        (`outcomes.stated_cap`); once a `Send` without the reasoning artifacts it refused; a
        retry when its `retries` allow one and the wait leaves time before the deadline; else
        the walk moves on at once."""
        if outcome.reason is Reason.OK:
            return Done(True)
        if self.clamped is None and left_s > 0:
            allowed = stated_cap(outcome, fields, cap)
            if allowed is not None:
                self.clamped = allowed
                return Clamp(allowed)
        if outcome.reason is Reason.ARTIFACT_REJECTED and not self.bare:
            self.bare = True  # once: the same provider, without what it refused
            return Send(bare=True)
        if outcome.reason is Reason.BAD_REQUEST and self.prefilled:
            self.prefilled = False  # once: it refused the prefill; it begins the answer again
            return Send(bare=self.bare, restart=True)
        delay = retry_delay(outcome, tries=self.tries, retries=self.retries, remaining_s=left_s)
        if delay is None:
            return Done(False)
        self.tries += 1
        return Sleep(delay)

    def woke(self, left_s: float) -> Send | Skip:
        """After a retry's wait: send again, unless the deadline is spent."""
        return Send(bare=self.bare) if left_s > 0 else Skip(DEADLINE_SPENT)
