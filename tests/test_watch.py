"""What `run` says while the program runs (`cli/watch.py`), by table of engine events: only
what is new. `run` itself, with real programs and providers: tests/e2e/test_run.py."""

from __future__ import annotations

from agent_reach.cli.watch import Watch
from agent_reach.core.events import CapEvent, RequestEvent
from agent_reach.core.trace import Attempt, Reason


def said(*events: object) -> list[str]:
    lines: list[str] = []
    watch = Watch(lines.append)
    for event in events:
        watch(event)  # type: ignore[arg-type]
    return [*lines, watch.summary()]


def request(*attempts: Attempt) -> RequestEvent:
    answered = attempts[-1].provider if attempts[-1].ok else None
    return RequestEvent(route="", provider=answered, trace=attempts, stream=False, model="m")


DEAD = Attempt("dead", Reason.CONNECT_FAILED, detail="connection refused", sent=True)
OK = Attempt("ok", Reason.OK, sent=True)
BACKUP = Attempt("backup", Reason.OK, sent=True)
FLAKY = Attempt("ok", Reason.SERVER_ERROR, status=500, detail="internal error", sent=True)


def test_the_same_failover_is_said_once() -> None:
    assert said(request(DEAD, OK), request(DEAD, OK), request(DEAD, OK)) == [
        "dead connect_failed (connection refused) → ok ok, 0.0 s",
        "3 requests, 3 failed over, 0 failed; answered by ok (3)",
    ]


def test_a_new_failure_or_another_answer_is_said() -> None:
    assert said(request(DEAD, OK), request(DEAD, FLAKY, BACKUP), request(DEAD, BACKUP)) == [
        "dead connect_failed (connection refused) → ok ok, 0.0 s",
        "dead connect_failed → ok server_error (internal error) → backup ok, 0.0 s",
        "3 requests, 3 failed over, 0 failed; answered by backup (2), ok (1)",
    ]


def test_requests_no_provider_answered_are_one_line_and_a_count() -> None:
    failed = request(DEAD)
    assert said(failed, failed, failed, request(DEAD, OK)) == [
        "m: no provider answered: dead connect_failed (connection refused), 0.0 s",
        "(and 2 more like it)",
        "dead connect_failed → ok ok, 0.0 s",
        "4 requests, 1 failed over, 3 failed; answered by ok (1)",
    ]


def test_a_learned_cap_is_said() -> None:
    cap = CapEvent(provider="ds", model="deepseek-chat", before=None, tokens=8192, keep_s=3600)
    assert said(cap)[0] == (
        "ds: deepseek-chat takes at most 8192 output tokens (its refusal said so), kept for 3600 s"
    )
