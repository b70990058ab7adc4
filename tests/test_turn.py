"""One provider's turn, the pure state machine: tables of cases, time stepped by hand."""

from __future__ import annotations

from dataclasses import replace

import pytest

from agent_reach.core.breaker import CLOSED, CircuitState
from agent_reach.core.outcomes import Outcome
from agent_reach.core.routing import Health
from agent_reach.core.trace import Reason
from agent_reach.core.turn import Clamp, Consult, Done, Facts, Gather, Send, Skip, Sleep, Turn

NOW = 1_900_000_000.0
FACTS = Facts(
    serves_model=True,
    model="m",
    sent_model="m",
    circuit=CLOSED,
    missing_key=None,
    exhausted=None,
    has_health=False,
    lease_s=5.0,
)
OK = Outcome(Reason.OK, 200)
DOWN = Outcome(Reason.SERVER_ERROR, 500, "HTTP 500")


def reason(action: object) -> Reason:
    assert isinstance(action, Skip)
    return action.outcome.reason


def test_a_last_resort_skips_every_check() -> None:
    assert Turn("p", True, 0).begin() == Send()
    assert Turn("p", False, 0).begin() == Gather()


@pytest.mark.parametrize(
    ("facts", "expected"),
    [
        ({}, Reason.OK),
        ({"serves_model": False}, Reason.MODEL_UNAVAILABLE),
        ({"serves_model": False, "model": None}, Reason.MODEL_UNAVAILABLE),
        ({"circuit": CircuitState(3, NOW + 10, False, "server_error")}, Reason.CIRCUIT_OPEN),
        ({"exhausted": "100req/day used up"}, Reason.QUOTA_EXHAUSTED),
        ({"missing_key": "KEY"}, Reason.AUTH_FAILED),
        ({"has_health": True}, None),  # a Consult first
    ],
)
def test_consider_the_free_facts(facts: dict[str, object], expected: Reason | None) -> None:
    action = Turn("p", False, 0).consider(replace(FACTS, **facts), NOW)  # type: ignore[arg-type]
    if expected is None:
        assert action == Consult()
    elif expected is Reason.OK:
        assert action == Send()
    else:
        assert reason(action) is expected


def test_skips_for_remembered_state_are_deferred_the_others_not() -> None:
    open_circuit = replace(FACTS, circuit=CircuitState(3, NOW + 10, False, "server_error"))
    skip = Turn("p", False, 0).consider(open_circuit, NOW)
    assert isinstance(skip, Skip)
    assert skip.deferrable
    missing = Turn("p", False, 0).consider(replace(FACTS, missing_key="KEY"), NOW)
    assert isinstance(missing, Skip)
    assert not missing.deferrable


@pytest.mark.parametrize(("includes_auth", "deferred"), [(False, False), (True, True)])
def test_a_bad_keys_circuit_is_no_last_resort_unless_configured(
    includes_auth: bool, deferred: bool
) -> None:
    bad_key = CircuitState(1, NOW + 300, False, "auth_failed")
    facts = replace(FACTS, circuit=bad_key, auth_last_resort=includes_auth)
    skip = Turn("p", False, 0).consider(facts, NOW)
    assert reason(skip) is Reason.CIRCUIT_OPEN
    assert isinstance(skip, Skip)
    assert skip.deferrable is deferred


def test_a_cooled_down_circuit_admits_one_trial_with_its_lease() -> None:
    cooled = replace(FACTS, circuit=CircuitState(3, NOW - 1, False, "server_error"))
    turn = Turn("p", False, 0)
    action = turn.consider(cooled, NOW)
    assert isinstance(action, Send)
    assert action.lease == CircuitState(3, NOW + 5.0, True, "server_error")
    lost = turn.lease_lost()  # another instance took the trial
    assert reason(lost) is Reason.CIRCUIT_OPEN
    assert "another instance" in lost.outcome.detail
    assert lost.deferrable


def test_refused_artifacts_are_left_out_once() -> None:
    refused = Outcome(Reason.ARTIFACT_REJECTED, 400, "Invalid `signature` in `thinking` block")
    turn = Turn("p", False, 0)  # no retries configured: this one is not a retry
    assert turn.sent(refused, 10.0) == Send(bare=True)
    assert turn.sent(refused, 10.0) == Done(False)


def test_a_used_up_usage_limit_has_one_trial_and_no_last_resort() -> None:
    out = CircuitState(1, NOW + 3, False, Reason.QUOTA_EXHAUSTED_UPSTREAM)
    turn = Turn("p", False, 0)
    early = turn.consider(replace(FACTS, circuit=out), NOW)
    assert reason(early) is Reason.QUOTA_EXHAUSTED_UPSTREAM
    assert isinstance(early, Skip)
    assert not early.deferrable
    assert early.outcome.retry_after == 3
    action = turn.consider(replace(FACTS, circuit=out), NOW + 3)
    assert isinstance(action, Send)
    assert action.lease is not None
    lost = turn.lease_lost()
    assert reason(lost) is Reason.QUOTA_EXHAUSTED_UPSTREAM
    assert not lost.deferrable


@pytest.mark.parametrize(
    ("health", "probed", "expected", "ms", "counts"),
    [
        (Health(True, NOW, OK, frozenset({"m"})), True, None, 0.0, False),
        (Health(True, NOW, OK, frozenset({"x"})), False, Reason.MODEL_UNAVAILABLE, 0.0, True),
        (Health(False, NOW - 4, DOWN, ms=7.0), False, Reason.UNHEALTHY, 0.0, True),
        (Health(False, NOW, DOWN, ms=7.0), True, Reason.UNHEALTHY, 7.0, True),
        (
            Health(False, NOW, Outcome(Reason.CONNECT_FAILED), ms=1.0),
            True,
            Reason.CONNECT_FAILED,  # a check run for this request fails it as a request would
            1.0,
            True,
        ),
    ],
)
def test_what_the_health_check_says(
    health: Health, probed: bool, expected: Reason | None, ms: float, counts: bool
) -> None:
    turn = Turn("p", False, 0)
    assert turn.consider(replace(FACTS, has_health=True), NOW) == Consult()
    action = turn.checked(health, probed, NOW)
    if expected is None:
        assert action == Send()
        return
    assert isinstance(action, Skip)
    assert (action.outcome.reason, action.ms, action.counts) == (expected, ms, counts)


def test_retries_step_through_time_and_stop_at_the_deadline() -> None:
    turn = Turn("p", False, 2)
    assert turn.sent(DOWN, left_s=10.0) == Sleep(0.1)  # backoff 0.1 s, then 0.2 s
    assert turn.woke(left_s=9.9) == Send()
    assert turn.sent(DOWN, left_s=9.8) == Sleep(0.2)
    assert turn.woke(left_s=9.6) == Send()
    assert turn.sent(DOWN, left_s=9.5) == Done(False)  # its 2 retries are used
    assert Turn("p", False, 2).sent(OK, left_s=1.0) == Done(True)
    late = Turn("p", False, 2)
    assert late.sent(DOWN, left_s=0.05) == Done(False)  # the wait would pass the deadline
    waited = Turn("p", False, 2)
    waited.sent(DOWN, left_s=1.0)
    assert reason(waited.woke(left_s=0.0)) is Reason.TIMEOUT  # spent while it slept
    limited = Outcome(Reason.RATE_LIMITED, 429, "slow down", retry_after=3.0)
    assert Turn("p", False, 1).sent(limited, left_s=10.0) == Sleep(3.0)  # its Retry-After


def test_what_is_never_retried() -> None:
    for outcome in (Outcome(Reason.AUTH_FAILED, 401), Outcome(Reason.BAD_REQUEST, 400)):
        assert Turn("p", False, 5).sent(outcome, left_s=10.0) == Done(False)


REFUSED_CAP = Outcome(
    Reason.BAD_REQUEST, 400, "Invalid max_tokens value, the valid range of max_tokens is [1, 8192]"
)
FIELDS = frozenset({"max_tokens"})


@pytest.mark.parametrize(
    ("outcome", "sent_cap", "left_s", "clamps"),
    [
        (REFUSED_CAP, 64000, 10.0, True),
        (REFUSED_CAP, 8192, 10.0, False),  # it went out at the cap it states: nothing to lower
        (REFUSED_CAP, None, 10.0, False),  # the request set no cap
        (REFUSED_CAP, 64000, 0.0, False),  # no time left
        (replace(REFUSED_CAP, detail="max_tokens参数非法。请检查文档。"), 64000, 10.0, False),
    ],
)
def test_a_refused_output_cap_is_clamped_once(
    outcome: Outcome, sent_cap: int | None, left_s: float, clamps: bool
) -> None:
    turn = Turn("p", False, 0)
    action = turn.sent(outcome, left_s, sent_cap, FIELDS)
    assert action == (Clamp(8192) if clamps else Done(False))
    assert turn.clamped == (8192 if clamps else None)  # what the engine keeps once answered
    assert turn.sent(outcome, left_s, sent_cap, FIELDS) == Done(False)  # once per turn


def test_an_estimated_input_over_the_context_window_is_skipped() -> None:
    over = replace(FACTS, context_window=1000, input_tokens=1001)
    skip = Turn("p", False, 0).consider(over, NOW)
    assert reason(skip) is Reason.CONTEXT_EXCEEDED
    assert isinstance(skip, Skip)
    assert not skip.deferrable
    fits = replace(FACTS, context_window=1000, input_tokens=1000)
    assert Turn("p", False, 0).consider(fits, NOW) == Send()


def test_a_refused_prefill_is_asked_once_more_as_the_request_came() -> None:
    """Issue 51: a provider sent a cut answer as a prefill answers 400: once more, the request
    as it came (`restart`); a second 400 ends its turn."""
    turn = Turn("p", False, 0, prefilled=True)
    refused = Outcome(Reason.BAD_REQUEST, 400, "the last message must be a user message")
    assert turn.sent(refused, left_s=10) == Send(restart=True)
    assert turn.sent(refused, left_s=10) == Done(False)
    assert Turn("q", False, 0).sent(refused, left_s=10) == Done(False)  # no prefill: its end
