"""The pure core by tables: paths, outcomes, breaker, routing, validation. No sockets."""

from __future__ import annotations

from typing import Any

import pytest

from agent_reach.chat import paths
from agent_reach.chat.request import ChatRequest
from agent_reach.chat.validation import Level, validate
from agent_reach.config import CircuitConfig
from agent_reach.core.breaker import CLOSED, CircuitState, admit, counted, fleet_count, record
from agent_reach.core.caps import stated_cap
from agent_reach.core.errors import RequestError
from agent_reach.core.outcomes import (
    ErrorInfo,
    Outcome,
    Transport,
    classify,
)
from agent_reach.core.routing import (
    Expired,
    Health,
    Policy,
    RouteTable,
    Walk,
    attempt_order,
    health_verdict,
    model_listed,
    precheck,
    retry_delay,
)
from agent_reach.core.trace import Reason
from agent_reach.core.waits import parse_retry_after
from agent_reach.engine.run import Run

BODY = {"choices": [{"message": {"content": "hi"}}], "output": {"choices": [{"x": 1}]}, "a/b": 2}


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("choices.0.message.content", "hi"),
        ("/choices/0/message/content", "hi"),
        ("output.choices.0.x", 1),
        ("choices.-1.message.content", "hi"),
        ("choices.5", None),
        ("nope.x", None),
        ("/a~1b", 2),
        ("", BODY),
        ("choices.0.message.content.x", None),
    ],
)
def test_paths(path: str, value: Any) -> None:
    assert paths.get(BODY, path) == value


def test_extract_reads_content_from_the_first_choice() -> None:
    assert paths.extract(BODY, "choices", "message.content") == (
        {"message": {"content": "hi"}},
        "hi",
    )
    assert paths.extract({"result": "text"}, "result", "") == ("text", "text")
    assert paths.extract({"choices": []}, "choices", "message.content") == (None, None)


NOW = 1_800_000_000.0


@pytest.mark.parametrize(
    ("kwargs", "reason", "retry_after"),
    [
        ({"transport": Transport.CONNECT}, Reason.CONNECT_FAILED, None),
        ({"transport": Transport.CONNECT_TIMEOUT}, Reason.CONNECT_FAILED, None),
        ({"transport": Transport.TLS}, Reason.CONNECT_FAILED, None),
        ({"transport": Transport.READ_TIMEOUT}, Reason.TIMEOUT, None),
        ({"transport": Transport.POOL_TIMEOUT}, Reason.TIMEOUT, None),
        ({"transport": Transport.DEADLINE}, Reason.TIMEOUT, None),
        ({"transport": Transport.DISCONNECTED}, Reason.SERVER_ERROR, None),
        ({"status": 401}, Reason.AUTH_FAILED, None),
        ({"status": 403}, Reason.AUTH_FAILED, None),
        ({"status": 429, "headers": {"Retry-After": "12"}}, Reason.RATE_LIMITED, 12.0),
        ({"status": 429}, Reason.RATE_LIMITED, None),
        ({"status": 402}, Reason.QUOTA_EXHAUSTED_UPSTREAM, None),
        ({"status": 500}, Reason.SERVER_ERROR, None),
        ({"status": 503, "headers": {"Retry-After": "3"}}, Reason.SERVER_ERROR, 3.0),
        ({"status": 529}, Reason.SERVER_ERROR, None),
        ({"status": 408}, Reason.TIMEOUT, None),
        ({"status": 400}, Reason.BAD_REQUEST, None),
        (
            {
                "status": 400,
                "error": ErrorInfo("messages.1.content.0: Invalid `signature` in `thinking` block"),
            },
            Reason.ARTIFACT_REJECTED,
            None,
        ),
        (
            {
                "status": 400,
                "error": ErrorInfo(
                    "The encrypted content for item rs_1 could not be verified.",
                    "invalid_encrypted_content",
                ),
            },
            Reason.ARTIFACT_REJECTED,
            None,
        ),
        ({"status": 422}, Reason.BAD_REQUEST, None),
        ({"status": 301}, Reason.BAD_REQUEST, None),
        (
            {"status": 400, "error": ErrorInfo("API key not valid", "API_KEY_INVALID")},
            Reason.AUTH_FAILED,
            None,
        ),
        (
            {"status": 404, "error": ErrorInfo('model "x" not found')},
            Reason.MODEL_UNAVAILABLE,
            None,
        ),
        ({"status": 404, "error": ErrorInfo("no such route")}, Reason.BAD_REQUEST, None),
        ({"status": 200}, Reason.OK, None),
        ({"status": 200, "error": ErrorInfo("bad", None, 401)}, Reason.AUTH_FAILED, None),
        ({"status": 200, "error": ErrorInfo("Invalid API key")}, Reason.SCHEMA_MISMATCH, None),
        (
            {"status": 200, "error": ErrorInfo("Invalid API key", "invalid_api_key")},
            Reason.AUTH_FAILED,
            None,
        ),
        ({"status": 200, "error": ErrorInfo("quota exceeded")}, Reason.RATE_LIMITED, None),
        (
            {"status": 200, "error": ErrorInfo("x", "rate_limit_exceeded")},
            Reason.RATE_LIMITED,
            None,
        ),
        (
            {"status": 200, "error": ErrorInfo("Overloaded", "overloaded_error")},
            Reason.SERVER_ERROR,
            None,
        ),
        ({"status": 200, "error": ErrorInfo("something odd")}, Reason.SCHEMA_MISMATCH, None),
    ],
)
def test_classify(kwargs: dict[str, Any], reason: Reason, retry_after: float | None) -> None:
    outcome = classify(**{"now": NOW, **kwargs})
    assert outcome.reason is reason
    if retry_after is not None:
        assert outcome.retry_after == retry_after


CONTEXT, BLOCKED = Reason.CONTEXT_EXCEEDED, Reason.CONTENT_BLOCKED


@pytest.mark.parametrize(
    ("status", "message", "code", "reason"),
    [
        (
            400,
            "This model's maximum context length is 131072 tokens",
            "context_length_exceeded",
            CONTEXT,
        ),
        (
            400,
            "prompt is too long: 210000 tokens > 200000 maximum",
            "invalid_request_error",
            CONTEXT,
        ),
        (
            400,
            "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).",
            "INVALID_ARGUMENT",
            CONTEXT,
        ),
        (400, "Invalid request: Your request exceeded model token limit: 8192", None, CONTEXT),
        (400, "Range of input length should be [1, 30720]", "InvalidParameter", CONTEXT),
        (400, "Prompt 超长", "1261", CONTEXT),
        (200, "This model's maximum context length is 8192 tokens", None, CONTEXT),
        (
            400,
            "The response was filtered due to the prompt triggering Azure OpenAI's content management policy.",
            "content_filter",
            BLOCKED,
        ),
        (
            400,
            "Your request was rejected as a result of our safety system.",
            "content_policy_violation",
            BLOCKED,
        ),
        (400, "Input data may contain inappropriate content.", "DataInspectionFailed", BLOCKED),
        (400, "系统检测到输入或生成内容可能包含不安全或敏感内容", "1301", BLOCKED),
        (400, "The request was rejected because it was considered high risk", None, BLOCKED),
        (200, "Input data may contain inappropriate content.", "DataInspectionFailed", BLOCKED),
        # No false alarms: other 400s stay bad requests, and the status wins over words.
        (400, "Invalid value for 'safety_identifier'", "invalid_value", Reason.BAD_REQUEST),
        (400, "Unknown parameter: 'context'", None, Reason.BAD_REQUEST),
        (401, "content policy", None, Reason.AUTH_FAILED),
        (429, "maximum context length", None, Reason.RATE_LIMITED),
    ],
)
def test_refused_requests(status: int, message: str, code: str | None, reason: Reason) -> None:
    assert classify(status=status, error=ErrorInfo(message, code)).reason is reason


def test_a_dialect_verdict_wins() -> None:
    error = ErrorInfo("sensitive input", "1026", 400, Reason.CONTENT_BLOCKED)
    assert classify(status=200, error=error).reason is BLOCKED
    assert classify(status=400, error=error).reason is BLOCKED


def test_retry_after_http_date() -> None:
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", 1445412470.0) == 10.0
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", 1445412490.0) == 0.0
    assert parse_retry_after("soon", NOW) is None
    assert parse_retry_after(None, NOW) is None


# The usage-limit answers of docs/providers.md ("Usage limits"), as the dialects see them.
ZHIPU_1308 = ErrorInfo("已达到 5 小时的使用上限。您的限额将在 2027-01-16 06:00:00 重置。", "1308")
MINIMAX_2056 = ErrorInfo(
    "usage limit exceeded, 5-hour usage limit reached for Token Plan Starter (0/0 used), "
    "resets at 2027-01-15T22:00:00Z (2056)",
    "rate_limit_error",
    429,
)
RESET = 1_800_050_400.0  # 2027-01-15T22:00:00Z, 14 h after NOW


@pytest.mark.parametrize(
    ("kwargs", "reason", "wait"),
    [
        ({"status": 402, "error": ErrorInfo("Insufficient Balance")}, "quota", None),
        (
            {
                "status": 429,
                "error": ErrorInfo("You exceeded your current quota", "insufficient_quota"),
            },
            "quota",
            None,
        ),
        ({"status": 429, "error": ZHIPU_1308}, "quota", RESET - NOW),  # Beijing time
        ({"status": 429, "error": ErrorInfo("您的账户已欠费,请充值后重试", "1113")}, "quota", None),
        ({"status": 429, "error": ErrorInfo("每周/每月使用上限", "1310")}, "quota", None),
        ({"status": 200, "error": MINIMAX_2056}, "quota", RESET - NOW),
        (
            {"status": 429, "error": ErrorInfo("x", "exceeded_current_quota_error")},
            "quota",
            None,
        ),
        ({"status": 403, "error": ErrorInfo("insufficient balance")}, "quota", None),
        # a 429 that says to wait longer than `rate_limit_window_s` is a used-up window
        ({"status": 429, "headers": {"Retry-After": "61"}}, "quota", 61.0),
        ({"status": 429, "headers": {"Retry-After": "60"}}, "rate", 60.0),
        ({"status": 429, "headers": {"retry-after-ms": "1500"}}, "rate", 1.5),
        (
            {
                "status": 429,
                "headers": {
                    "anthropic-ratelimit-tokens-remaining": "0",
                    "anthropic-ratelimit-tokens-reset": "2027-01-15T22:00:00Z",
                    "anthropic-ratelimit-requests-remaining": "40",
                    "anthropic-ratelimit-requests-reset": "2027-01-16T22:00:00Z",
                },
            },
            "quota",
            RESET - NOW,
        ),
        (
            {
                "status": 429,
                "headers": {
                    "anthropic-ratelimit-unified-status": "rejected",
                    "anthropic-ratelimit-unified-reset": str(int(RESET)),
                    "anthropic-ratelimit-unified-7d-status": "allowed",
                    "anthropic-ratelimit-unified-7d-reset": str(int(RESET) + 86400),
                },
            },
            "quota",
            RESET - NOW,
        ),
        (
            {
                "status": 429,
                "headers": {"anthropic-ratelimit-requests-reset": "2027-01-15T08:00:05Z"},
            },
            "rate",
            None,
        ),
        (
            {"status": 429, "error": ErrorInfo("Rate limit reached", "rate_limit_exceeded")},
            "rate",
            None,
        ),
        ({"status": 401, "error": ErrorInfo("Incorrect API key provided")}, "auth", None),
    ],
)
def test_usage_limits_are_told_from_rate_limits(
    kwargs: dict[str, Any], reason: str, wait: float | None
) -> None:
    reasons = {
        "quota": Reason.QUOTA_EXHAUSTED_UPSTREAM,
        "rate": Reason.RATE_LIMITED,
        "auth": Reason.AUTH_FAILED,
    }
    outcome = classify(**{"now": NOW, **kwargs})
    assert outcome.reason is reasons[reason]
    if wait is not None:
        assert outcome.retry_after == pytest.approx(wait)


POLICY = CircuitConfig(failures=3, cooldown_s=30, auth_cooldown_s=300, quota_cooldown_s=3600)


def run_breaker(events: list[tuple[float, Reason | str]]) -> CircuitState:
    state = CLOSED
    for t, what in events:
        if what == "admit":
            _, state = admit(state, NOW + t, lease_s=5)
        else:
            state = record(state, Reason(what), NOW + t, POLICY)
    return state


@pytest.mark.parametrize(
    ("events", "open_at", "closed"),
    [
        ([(0, "server_error"), (1, "server_error")], None, True),
        ([(0, "server_error"), (1, "timeout"), (2, "connect_failed")], 2 + 30, False),
        ([(0, "server_error"), (1, "ok"), (2, "server_error"), (3, "server_error")], None, True),
        ([(0, "auth_failed")], 300, False),
        ([(0, "rate_limited")], 30, False),
        ([(0, "quota_exhausted_upstream")], 3600, False),
        # its trial after the window: ok closes it, another usage-limit answer opens it again
        ([(0, "quota_exhausted_upstream"), (3601, "admit"), (3602, "ok")], None, True),
        (
            [(0, "quota_exhausted_upstream"), (3601, "admit"), (3602, "quota_exhausted_upstream")],
            3602 + 3600,
            False,
        ),
        ([(0, "bad_request")], None, True),
        # open, cooldown passes, a trial is admitted and fails: open again for the cooldown
        ([(0, "auth_failed"), (301, "admit"), (302, "server_error")], 302 + 30, False),
        ([(0, "auth_failed"), (301, "admit"), (302, "ok")], None, True),
        ([(0, "auth_failed"), (301, "admit"), (302, "bad_request")], None, True),
        # a trial lease blocks others until it expires
        ([(0, "auth_failed"), (301, "admit")], 301 + 5, False),
    ],
)
def test_breaker(events: list[tuple[float, str]], open_at: float | None, closed: bool) -> None:
    state = run_breaker(events)
    assert state.closed is closed
    if open_at is not None:
        assert state.open_until == NOW + open_at


def test_a_last_resort_401_never_restarts_a_cooldown() -> None:
    opened = record(CLOSED, Reason.AUTH_FAILED, NOW, POLICY)
    again = record(opened, Reason.AUTH_FAILED, NOW + 100, POLICY, last_resort=True)
    assert again == opened  # still reopens at NOW + 300, not NOW + 400
    cooled = record(opened, Reason.AUTH_FAILED, NOW + 100, POLICY)
    assert cooled.open_until == NOW + 400  # a 401 in the first pass (a trial) does restart it
    # a circuit closed until now (deferred as unhealthy) opens on a last resort's 401
    assert record(CLOSED, Reason.AUTH_FAILED, NOW, POLICY, last_resort=True).is_open(NOW + 1)


def test_a_used_up_usage_limit_keeps_out_until_its_reset() -> None:
    state = record(CLOSED, Reason.QUOTA_EXHAUSTED_UPSTREAM, NOW, POLICY, retry_after=3)
    assert state.out
    assert state.open_until == NOW + 3
    skip = precheck(serves_model=True, model="m", circuit=state, missing_key=None, now=NOW + 1)
    assert skip is not None
    assert skip.reason is Reason.QUOTA_EXHAUSTED_UPSTREAM
    assert not skip.deferrable  # not a last resort
    assert skip.detail == "usage limit used up, out for 2 s"
    view = state.view(NOW + 1)
    assert view["out_until"] == NOW + 3
    assert view["note"] == "out until 08:00 (usage limit)"  # NOW + 3 s, in UTC
    # A reset on another day says its date (a plan's weekly window).
    week = record(CLOSED, Reason.QUOTA_EXHAUSTED_UPSTREAM, NOW, POLICY, retry_after=86400)
    assert week.view(NOW + 1)["note"] == "out until 2027-01-16 08:00 (usage limit)"
    allowed, leased = admit(state, NOW + 3, 5)
    assert allowed
    assert leased.out  # its trial in flight: still out for everyone else
    assert not record(state, Reason.RATE_LIMITED, NOW, POLICY).out


def test_breaker_rate_limit_uses_retry_after() -> None:
    state = record(CLOSED, Reason.RATE_LIMITED, NOW, POLICY, retry_after=7)
    assert state.open_until == NOW + 7
    assert admit(state, NOW + 6, 5)[0] is False
    allowed, leased = admit(state, NOW + 7, 5)
    assert allowed
    assert leased.trial
    assert admit(leased, NOW + 8, 5)[0] is False


TABLE = RouteTable.build(
    [("a", 1.0), ("b", 0.5), ("c", 1.0), ("d", 2.0)],
    None,
    {"r": ["c", "a"], "gpt-5-codex": ["b", "c"]},
)
KNOWN = ("a", "b", "c", "d")


@pytest.mark.parametrize(
    ("kwargs", "order"),
    [
        ({}, ("d", "a", "c", "b")),  # weight descending, ties in file order
        ({"provider_route": "r"}, ("c", "a")),
        ({"provider_route": "b"}, ("b", "d", "a", "c")),
        ({"fallback_order": ["b", "a", "b"]}, ("b", "a")),
        ({"fallback_order": ["c"], "provider_route": "r"}, ("c",)),
        ({"model": "gpt-5-codex"}, ("b", "c")),  # a route named after the model: an alias
        ({"model": "other"}, ("d", "a", "c", "b")),
        ({"model": "gpt-5-codex", "provider_route": "r"}, ("c", "a")),  # the route wins
        ({"model": "gpt-5-codex", "fallback_order": ["a"]}, ("a",)),
    ],
)
def test_attempt_order(kwargs: dict[str, Any], order: tuple[str, ...]) -> None:
    assert attempt_order(TABLE, KNOWN, **kwargs) == order


@pytest.mark.parametrize(
    ("route", "model", "label"),
    [
        ("default", "gpt-5-codex", "gpt-5-codex"),  # a model alias names its route
        ("default", "other", "default"),
        ("default", None, "default"),
        ("r", "gpt-5-codex", "r"),  # a route the request names wins, as in the order
        ("custom", "gpt-5-codex", "custom"),  # its own fallback_order
    ],
)
def test_route_label(route: str, model: str | None, label: str) -> None:
    assert TABLE.label(route, model) == label


CLAUDE_MAP = {"claude-*": "main", "claude-*haiku*": "fast", "*": "other"}

# Claude Code's background model goes to a fast route, its main one elsewhere (issue 19):
# the most literal pattern wins, whatever the order in the file.
WILD = RouteTable.build(
    [("a", 1.0), ("b", 1.0), ("c", 1.0)],
    None,
    {"claude-*": ["a"], "claude-*haiku*": ["b"], "gpt-*-codex": ["c"], "claude-opus-4-8": ["c"]},
)


@pytest.mark.parametrize(
    ("model", "order", "label"),
    [
        ("claude-haiku-4-5-20251001", ("b",), "claude-*haiku*"),
        ("claude-sonnet-4-5", ("a",), "claude-*"),
        ("claude-opus-4-8", ("c",), "claude-opus-4-8"),  # a name given exactly wins
        ("claude-", ("a",), "claude-*"),  # `*` may stand for nothing
        ("gpt-5.1-codex", ("c",), "gpt-*-codex"),
        ("gpt-5-codex-mini", ("a", "b", "c"), "default"),  # a pattern matches the whole name
        ("xclaude-haiku", ("a", "b", "c"), "default"),
        ("claude.haiku", ("a", "b", "c"), "default"),  # `.` is a dot, not any character
    ],
)
def test_route_patterns(model: str, order: tuple[str, ...], label: str) -> None:
    assert attempt_order(WILD, ("a", "b", "c"), model=model) == order
    assert WILD.label("default", model) == label


def test_attempt_order_explicit_default_and_unknown_names() -> None:
    table = RouteTable.build([("a", 1.0), ("b", 2.0)], ["a", "b"])
    assert attempt_order(table, ("a", "b")) == ("a", "b")
    with pytest.raises(RequestError):
        attempt_order(TABLE, KNOWN, fallback_order=["zz"])
    with pytest.raises(RequestError):
        attempt_order(TABLE, KNOWN, provider_route="zz")


def test_walk_defers_to_last_resort() -> None:
    walk = Walk(["a", "b", "c"])
    assert walk.next(1.0) == ("a", False)
    walk.defer("a")
    assert walk.next(1.0) == ("b", False)
    assert walk.next(1.0) == ("c", False)
    walk.defer("c")
    assert walk.next(1.0) == ("a", True)
    walk.defer("a")  # no second last resort
    assert walk.next(1.0) == ("c", True)
    assert walk.next(1.0) is None


def test_walk_of_one_provider_still_has_a_last_resort() -> None:
    walk = Walk(["a"])  # step mode, or a one-provider fallback_order (protocol §4.2)
    assert walk.next(1.0) == ("a", False)
    walk.defer("a")
    assert walk.next(1.0) == ("a", True)
    assert walk.next(1.0) is None


def test_walk_expires_when_the_deadline_is_spent() -> None:
    walk = Walk(["a", "b", "c"])
    walk.next(1.0)
    walk.defer("a")
    assert walk.next(0.0) == Expired(("b", "c", "a"))  # the rest, deferred ones included
    assert walk.next(1.0) is None


OPEN = CircuitState(3, NOW + 10, False, "server_error")


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({}, None),
        ({"serves_model": False}, Reason.MODEL_UNAVAILABLE),
        ({"circuit": OPEN}, Reason.CIRCUIT_OPEN),
        ({"circuit": CircuitState(3, NOW - 1, False, "x")}, None),  # cooled down: half-open
        ({"missing_key": "K"}, Reason.AUTH_FAILED),
        ({"serves_model": False, "circuit": OPEN}, Reason.MODEL_UNAVAILABLE),
    ],
)
def test_precheck(kwargs: dict[str, Any], reason: Reason | None) -> None:
    facts: dict[str, Any] = {
        "serves_model": True,
        "model": "m",
        "circuit": CLOSED,
        "missing_key": None,
        "now": NOW,
    }
    skip = precheck(**{**facts, **kwargs})
    assert (skip.reason if skip else None) == reason


FAILED_CONNECT = Health(False, NOW, classify(transport=Transport.CONNECT))
FAILED_HTML = Health(False, NOW, Outcome(Reason.SCHEMA_MISMATCH, 200, "HTML page"))
LISTING = Health(True, NOW, Outcome(Reason.OK), frozenset({"qwen2:72b", "llama3:latest"}))


@pytest.mark.parametrize(
    ("health", "model", "probed", "reason"),
    [
        (FAILED_CONNECT, "m", True, Reason.CONNECT_FAILED),
        (FAILED_CONNECT, "m", False, Reason.UNHEALTHY),
        (FAILED_HTML, "m", True, Reason.UNHEALTHY),
        (LISTING, "qwen2:72b", True, None),
        (LISTING, "llama3", True, None),
        (LISTING, "gpt-4o", False, Reason.MODEL_UNAVAILABLE),
        (LISTING, "", False, None),
        (Health(True, NOW, Outcome(Reason.OK)), "anything", True, None),
    ],
)
def test_health_verdict(health: Health, model: str, probed: bool, reason: Reason | None) -> None:
    verdict = health_verdict(health, model=model, checked_now=probed, now=NOW + 3)
    assert (verdict.reason if verdict else None) == reason


def test_model_listed() -> None:
    models = frozenset({"a:latest", "b:7b", "c"})
    assert model_listed("a", models)
    assert model_listed("a:latest", models)
    assert not model_listed("b", models)
    assert model_listed("c:latest", models)


@pytest.mark.parametrize(
    ("outcome", "tries", "retries", "remaining", "delay"),
    [
        (Outcome(Reason.SERVER_ERROR), 0, 0, 10, None),
        (Outcome(Reason.SERVER_ERROR), 0, 2, 10, 0.1),
        (Outcome(Reason.SERVER_ERROR), 1, 2, 10, 0.2),
        (Outcome(Reason.SERVER_ERROR), 2, 2, 10, None),
        (Outcome(Reason.SERVER_ERROR), 6, 9, 10, 2.0),
        (Outcome(Reason.RATE_LIMITED, 429, "", 3.0), 0, 1, 10, 3.0),
        (Outcome(Reason.RATE_LIMITED, 429, "", 30.0), 0, 1, 10, None),  # past the deadline
        (Outcome(Reason.AUTH_FAILED), 0, 3, 10, None),
        (Outcome(Reason.BAD_REQUEST), 0, 3, 10, None),
        # `retries` unset: once, for a 5xx or a 429 whose wait is 2 s at most
        (Outcome(Reason.SERVER_ERROR), 0, None, 10, 0.1),
        (Outcome(Reason.SERVER_ERROR), 1, None, 10, None),
        (Outcome(Reason.RATE_LIMITED, 429, "", 2.0), 0, None, 10, 2.0),
        (Outcome(Reason.RATE_LIMITED, 429, "", 2.5), 0, None, 10, None),
        (Outcome(Reason.RATE_LIMITED, 429), 0, None, 10, 0.1),
        (Outcome(Reason.CONNECT_FAILED), 0, None, 10, None),  # a dead provider is not waited for
        (Outcome(Reason.TIMEOUT), 0, None, 10, None),  # nor a slow one
        (Outcome(Reason.SCHEMA_MISMATCH), 0, None, 10, None),
        (Outcome(Reason.SERVER_ERROR), 0, None, 0.05, None),  # past the deadline
    ],
)
def test_retry_delay(
    outcome: Outcome, tries: int, retries: int | None, remaining: float, delay: float | None
) -> None:
    assert retry_delay(outcome, tries=tries, retries=retries, remaining_s=remaining) == delay


def completion(content: Any, usage: int | None = 8, model: str = "m") -> dict[str, Any]:
    body: dict[str, Any] = {
        "object": "chat.completion",
        "model": model,
        "choices": [{"message": {"role": "assistant", "content": content}}],
    }
    if usage is not None:
        body["usage"] = {"total_tokens": usage}
    return body


@pytest.mark.parametrize(
    ("level", "body", "raw", "ok"),
    [
        (Level.LENIENT, completion("hi"), {}, True),
        (Level.LENIENT, completion(""), {}, False),
        (Level.LENIENT, completion("  "), {}, False),
        (Level.LENIENT, completion(None), {}, False),
        (
            Level.LENIENT,
            {"choices": [{"message": {"content": None, "tool_calls": [{"id": "1"}]}}]},
            {},
            True,
        ),
        (Level.USAGE, completion("hi"), {}, True),
        (Level.USAGE, completion("hi", usage=0), {}, False),
        (Level.USAGE, completion("hi", usage=None), {}, False),
        (Level.STRICT, completion("hi"), completion("hi"), True),
        (Level.STRICT, completion("hi"), {"message": {}}, False),
        (Level.STRICT, completion("hi", model="other"), completion("hi"), False),
    ],
)
def test_validation(level: Level, body: dict[str, Any], raw: Any, ok: bool) -> None:
    assert (validate(level, body, raw, {"m"}) is None) is ok


@pytest.mark.parametrize(
    ("model_map", "models", "requested", "sent", "serves"),
    [
        ({}, None, "m", "m", True),
        ({"m": "x"}, None, "m", "x", True),
        ({"*": "y"}, None, "claude-sonnet-4-5", "y", True),  # "*" maps any other model
        ({"m": "x", "*": "y"}, None, "m", "x", True),
        ({"*": "y"}, ["y"], "gpt-5-codex", "y", True),  # served through the mapping
        ({}, ["y"], "gpt-5-codex", "gpt-5-codex", False),
        ({"*": "y"}, None, None, "y", True),  # no model asked: the "*" mapping
        ({"*": "y"}, ["z"], None, "z", True),  # ... after the first of `models`
        ({}, None, None, "", False),  # no model asked, none known: skipped (protocol §3)
        ({"*": ""}, None, None, "", True),  # ... unless "*" says "send none"
        ({"*": ""}, None, "m", "m", True),  # which never hides a model that was asked for
        # `*` wildcards in keys: the most literal pattern that matches, whatever the order
        (CLAUDE_MAP, None, "claude-haiku-4-5-20251001", "fast", True),
        (CLAUDE_MAP, None, "claude-opus-4-8", "main", True),
        (CLAUDE_MAP, None, "gpt-5", "other", True),
        (CLAUDE_MAP, ["fast"], "claude-haiku-4-5", "fast", True),
        (CLAUDE_MAP, ["fast"], "claude-opus-4-8", "main", False),
        ({"claude-*": "main", "claude-opus-4-8": "big"}, None, "claude-opus-4-8", "big", True),
        ({"claude-*": "main"}, None, "gpt-5", "gpt-5", True),  # unmatched: as requested
    ],
)
def test_model_map_star(
    model_map: dict[str, str],
    models: list[str] | None,
    requested: str | None,
    sent: str,
    serves: bool,
) -> None:
    from agent_reach.config import Provider
    from agent_reach.engine.prepared import PreparedProvider

    spec = Provider(
        name="p", endpoint="http://h/v1/chat/completions", model_map=model_map, models=models
    )
    prepared = PreparedProvider.prepare(spec, {})
    assert prepared.model_for(requested) == sent
    assert prepared.serves(requested) is serves


@pytest.mark.parametrize(
    ("state", "fleet", "expected"),
    [
        # the fleet's total reaches the threshold: open for the cooldown, cause kept
        (CircuitState(1, 0.0, False, "timeout"), 3, CircuitState(3, NOW + 30, False, "timeout")),
        # below it: the count only
        (CircuitState(1, 0.0, False, "timeout"), 2, CircuitState(2, 0.0, False, "timeout")),
        # this instance's own failures are in the total: reaching it opens all the same
        (CircuitState(3, 0.0, False, "timeout"), 3, CircuitState(3, NOW + 30, False, "timeout")),
        # a stale total changes nothing
        (CircuitState(2, 0.0, False, "timeout"), 1, CircuitState(2, 0.0, False, "timeout")),
        # already open, or leased for a trial: stays as it is
        (CircuitState(3, NOW + 5, False, "x"), 9, CircuitState(3, NOW + 5, False, "x")),
        (CircuitState(3, NOW + 5, True, "x"), 9, CircuitState(3, NOW + 5, True, "x")),
    ],
)
def test_fleet_count(state: CircuitState, fleet: int, expected: CircuitState) -> None:
    assert fleet_count(state, fleet, NOW, POLICY) == expected


def test_counted_failure() -> None:
    one = record(CLOSED, Reason.TIMEOUT, NOW, POLICY)
    assert counted(CLOSED, one)
    assert one.cause == "timeout"
    assert not counted(one, record(one, Reason.OK, NOW, POLICY))
    assert not counted(CLOSED, record(CLOSED, Reason.AUTH_FAILED, NOW, POLICY))  # opens


FIRST_TOKEN_TIMEOUT = Outcome(Reason.TIMEOUT, None, "first token: no content within 1 ms")
DEADLINE_TIMEOUT = Outcome(Reason.TIMEOUT, None, "deadline")


@pytest.mark.parametrize(
    ("asked", "route_ms", "provider_ms", "limit_s", "own"),
    [
        (None, None, 500, 0.5, False),  # the provider's
        (None, 300, 500, 0.3, False),  # the route's
        (100, 300, 500, 0.1, True),  # the client's, shorter
        (900, 300, 500, 0.3, False),  # the client's cannot lengthen it
        (900, None, None, 0.9, True),  # nothing configured: the client's is the only one
    ],
)
def test_a_clients_first_token_limit_only_shortens(
    asked: float | None,
    route_ms: float | None,
    provider_ms: float | None,
    limit_s: float,
    own: bool,
) -> None:
    body = {"messages": [{"role": "user", "content": "x"}], "stream": True}
    if asked is not None:
        body["agent_reach"] = {"first_token_ms": asked}
    run = Run(ChatRequest.parse(body), "r", "", Walk(("p",)), 0.0, Policy(first_token_ms=route_ms))
    assert run.first_token_s(provider_ms) == limit_s
    assert run.own_limit(FIRST_TOKEN_TIMEOUT, provider_ms) is own
    assert not run.own_limit(Outcome(Reason.SERVER_ERROR), provider_ms)


@pytest.mark.parametrize("own", [True, False])
def test_only_a_clients_own_deadline_is_its_doing(own: bool) -> None:
    req = ChatRequest.parse({"messages": [{"role": "user", "content": "x"}]})
    run = Run(req, "r", "", Walk(("p",)), 0.0, own_deadline=own)
    assert run.own_limit(DEADLINE_TIMEOUT, None) is own
    assert not run.own_limit(Outcome(Reason.TIMEOUT, None, "read timeout"), None)


CAP_FIELDS = frozenset({"max_tokens", "max_completion_tokens"})


@pytest.mark.parametrize(
    ("message", "sent", "allowed"),
    [
        ("Invalid max_tokens value, the valid range of max_tokens is [1, 8192]", 64000, 8192),
        (  # DashScope (Qwen)
            "<400> InternalError.Algo.InvalidParameter: Range of max_tokens should be [1, 65536]",
            100000,
            65536,
        ),
        (  # OpenAI
            "max_tokens is too large: 6000. This model supports at most 4096 completion tokens, "
            "whereas you provided 6000.",
            6000,
            4096,
        ),
        (  # Volcengine Ark
            "The parameter max_tokens specified in the request is not valid: integer above "
            "maximum value, expected a value <= 32768, but got 64000 instead.",
            64000,
            32768,
        ),
        (  # Groq
            "`max_tokens` must be less than or equal to `16384`, the maximum value for "
            "`max_tokens` is less than the `context_window` for this model",
            32000,
            16384,
        ),
        (  # Anthropic
            "max_tokens: 16000 > 8192, which is the maximum allowed number of output tokens for "
            "claude-3-5-sonnet-20241022",
            16000,
            8192,
        ),
        ("Invalid max_tokens value, the valid range of max_tokens is [1, 8192]", 8192, None),
        ("Invalid max_tokens value, the valid range of max_tokens is [1, 100]", 4096, None),
        ("max_tokens: 64000 > 8192, which exceeds the remaining prompt budget", 64000, None),
        ("max_tokens参数非法。请检查文档。", 64000, None),  # Zhipu 1214: no number
        ("temperature must be <= 2", 64000, None),  # not about the output cap
        ("Invalid request: Your request exceeded model token limit: 8192", 64000, None),  # Kimi
        ("Invalid top_k value, the valid range of top_k is [1, 8192]", 64000, None),  # not a cap
        (  # the value sent is not the one the wording repeats
            "max_tokens: 16000 > 8192, which is the maximum allowed number of output tokens for "
            "claude-3-5-sonnet-20241022",
            20000,
            None,
        ),
    ],
)
def test_the_cap_a_refusal_states(message: str, sent: int, allowed: int | None) -> None:
    outcome = classify(status=400, error=ErrorInfo(message))
    assert stated_cap(outcome, CAP_FIELDS, sent) == allowed


@pytest.mark.parametrize(
    "message",
    [  # issue 40, 1: a client's extra field, echoed by the provider's refusal of it
        "max_tokens: 2 > 1, which is the maximum allowed: Extra inputs are not permitted",
        "max_tokens: 5000 > 300, which is the maximum allowed number of output tokens for x: "
        "Extra inputs are not permitted",
        "Unrecognized request argument supplied: max_tokens at most 300",
        "Unrecognized request argument supplied: the valid range of max_tokens is [1, 300]",
        "Unknown parameter: 'max_tokens must be less than or equal to 300'.",
        'Invalid JSON payload received. Unknown name "max_tokens at most 300": Cannot find field.',
        "Invalid max_tokens value, the valid range of max_tokens is [1, 300]: Extra inputs are "
        "not permitted",
        "This model supports at most 300 completion tokens",
        "something about max_tokens <= 300",
    ],
)
def test_a_cap_is_never_read_from_an_echo_of_a_clients_field(message: str) -> None:
    outcome = classify(status=400, error=ErrorInfo(message))
    assert stated_cap(outcome, CAP_FIELDS, 5000) is None


def test_a_stated_cap_is_only_read_from_a_bad_request() -> None:
    error = ErrorInfo("Invalid max_tokens value, the valid range of max_tokens is [1, 8192]")
    assert stated_cap(classify(status=400, error=error), CAP_FIELDS, 64000) == 8192
    assert stated_cap(classify(status=500, error=error), CAP_FIELDS, 64000) is None
    assert stated_cap(classify(status=400, error=error), CAP_FIELDS, None) is None
    assert stated_cap(classify(status=400, error=error), frozenset({"num_predict"}), 64000) is None
