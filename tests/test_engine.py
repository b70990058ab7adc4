"""The engine through the library API, against real HTTP servers on 127.0.0.1."""

from __future__ import annotations

import asyncio
import time
import tracemalloc
from typing import Any

import pytest

from agent_reach import AllProvidersFailed, Reason, RequestError, Router, StreamInterrupted
from agent_reach.dialects.tokens import input_tokens

from .conftest import CHUNK, COMPLETION, ERROR, assert_valid
from .fakes.upstream import ECHOED_KEY_PREFIX, Upstream, refused_url

HELLO = {"model": "gpt-test", "messages": [{"role": "user", "content": "hi"}]}
KEY = "sk-test-0123456789abcdef-SECRET"


def prov(name: str, url: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "endpoint": url, **fields}


def router(
    *providers: dict[str, Any],
    environ: dict[str, str] | None = None,
    monotonic: Any = None,
    **top: Any,
) -> Router:
    config = {
        "version": "0.3.2",
        "health": {"mode": "off"},
        "state": "memory://",
        "defaults": {"retries": 0},  # each provider once: the default's retry is tested apart
        "providers": list(providers),
        **top,
    }
    return Router(config, environ=environ or {"TEST_KEY": KEY}, monotonic=monotonic)


class Clock:
    """A wall clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def reasons(trace: list[Any]) -> list[str]:
    return [f"{a.provider}:{a.reason}" for a in trace]


async def test_ok_response_is_normalized_and_valid(up: Upstream) -> None:
    async with router(prov("a", up.url("ok"))) as r:
        result = await r.achat({**HELLO, "model": "gpt-test"})
    assert result.provider == "a"
    assert result.response["choices"][0]["message"]["content"] == "hello from ok"
    assert reasons(result.trace) == ["a:ok"]
    assert_valid(COMPLETION, result.response)


@pytest.mark.parametrize(
    ("scenario", "reason", "status"),
    [
        ("auth", Reason.AUTH_FAILED, 401),
        ("ratelimit", Reason.RATE_LIMITED, 429),
        ("server", Reason.SERVER_ERROR, 500),
        ("badreq", Reason.BAD_REQUEST, 400),
        ("html", Reason.SCHEMA_MISMATCH, 200),
        ("brokenjson", Reason.SCHEMA_MISMATCH, 200),
        ("error200", Reason.SCHEMA_MISMATCH, 200),
        ("empty", Reason.SCHEMA_MISMATCH, 200),
        ("model404", Reason.MODEL_UNAVAILABLE, 404),
    ],
)
async def test_each_failure_fails_over(
    up: Upstream, scenario: str, reason: Reason, status: int
) -> None:
    async with router(
        prov("bad", up.url(scenario), api_key_env="TEST_KEY"), prov("good", up.url("backup"))
    ) as r:
        result = await r.achat(HELLO)
    first, last = result.trace
    assert (first.provider, first.reason, first.status) == ("bad", reason, status)
    assert (last.provider, last.reason) == ("good", Reason.OK)
    assert result.response["choices"][0]["message"]["content"] == "hello from backup"
    assert KEY not in repr(result.trace)


async def test_connect_refused_moves_on_without_waiting_for_read_timeout(up: Upstream) -> None:
    slow_read = {"connect": 1000, "read": 20000}
    async with router(
        prov("dead", refused_url(), timeout=slow_read), prov("good", up.url("backup"))
    ) as r:
        start = time.perf_counter()
        result = await r.achat(HELLO)
        elapsed = time.perf_counter() - start
    assert reasons(result.trace) == ["dead:connect_failed", "good:ok"]
    assert result.trace[0].detail == "connection refused"
    assert elapsed < 10, elapsed  # half the 20 s read timeout: it never waited for it


async def test_read_timeout_is_a_timeout(up: Upstream) -> None:
    async with router(
        prov("hang", up.url("hang"), timeout={"connect": 500, "read": 200}),
        prov("good", up.url("backup")),
    ) as r:
        result = await r.achat(HELLO)
    assert reasons(result.trace) == ["hang:timeout", "good:ok"]
    assert 150 < result.trace[0].ms < 2000


async def test_chain_of_hanging_providers_ends_within_the_deadline(up: Upstream) -> None:
    hang = {"timeout": {"connect": 500, "read": 10000}}
    async with router(
        *(prov(f"h{i}", up.url("hang"), **hang) for i in range(3)), deadline_ms=600
    ) as r:
        start = time.perf_counter()
        with pytest.raises(AllProvidersFailed) as info:
            await r.achat(HELLO)
        elapsed = time.perf_counter() - start
    assert elapsed < 5, elapsed  # half of one hang's 10 s read timeout: the 600 ms deadline
    trace = info.value.attempts
    assert [a.provider for a in trace] == ["h0", "h1", "h2"]
    assert all(a.reason is Reason.TIMEOUT for a in trace)
    assert trace[0].detail == "deadline"
    assert trace[-1].detail == "deadline"


async def test_per_request_deadline_overrides_config(up: Upstream) -> None:
    async with router(prov("hang", up.url("hang"), timeout={"read": 10000})) as r:
        start = time.perf_counter()
        with pytest.raises(AllProvidersFailed):
            await r.achat({**HELLO, "agent_reach": {"deadline_ms": 300}})
        took = time.perf_counter() - start
        assert took < 5, took  # the request's 300 ms, not the 10 s read timeout


async def test_rate_limited_is_skipped_until_retry_after(up: Upstream) -> None:
    clock = Clock()
    config = {
        "health": {"mode": "off"},
        "state": "memory://",
        "providers": [prov("rl", up.url("ratelimit")), prov("good", up.url("backup"))],
    }
    async with Router(config, clock=clock, environ={}) as r:
        first = await r.achat(HELLO)
        assert reasons(first.trace) == ["rl:rate_limited", "good:ok"]
        clock.now += 6  # Retry-After: 7
        second = await r.achat(HELLO)
        assert reasons(second.trace) == ["rl:circuit_open", "good:ok"]
        assert second.trace[0].ms == 0
        clock.now += 2
        third = await r.achat(HELLO)
        assert reasons(third.trace) == ["rl:rate_limited", "good:ok"]


async def test_auth_failure_opens_the_circuit_for_the_auth_cooldown(up: Upstream) -> None:
    clock = Clock()
    config = {
        "health": {"mode": "off"},
        "state": "memory://",
        "circuit": {"auth_cooldown_s": 100},
        "providers": [prov("bad", up.url("auth")), prov("good", up.url("backup"))],
    }
    async with Router(config, clock=clock, environ={}) as r:
        await r.achat(HELLO)
        clock.now += 99
        assert reasons((await r.achat(HELLO)).trace)[0] == "bad:circuit_open"
        clock.now += 2
        assert reasons((await r.achat(HELLO)).trace)[0] == "bad:auth_failed"


@pytest.mark.parametrize("other", ["server", "backup", "ratelimit", "dead"])
async def test_a_bad_key_gets_no_request_while_its_circuit_is_open(
    up: Upstream, other: str
) -> None:
    """Whatever the other providers do, a provider that answered 401 is not asked again (not
    even as last resort) until its auth cooldown has passed; then one trial."""
    clock = Clock()
    config = {
        "health": {"mode": "off"},
        "state": "memory://",
        "circuit": {"failures": 1, "auth_cooldown_s": 100, "cooldown_s": 1000},
        "providers": [
            prov("bad", up.url("auth")),
            prov("other", refused_url() if other == "dead" else up.url(other)),
        ],
    }
    async with Router(config, clock=clock, environ={}) as r:
        for _ in range(5):
            trace = await trace_of(r)
            assert not any(a.last_resort and a.provider == "bad" for a in trace)
            clock.now += 19
        assert len(up.bodies("auth")) == 1
        clock.now += 10  # 105 s after the 401: one trial
        assert reasons(await trace_of(r))[0] == "bad:auth_failed"
        assert len(up.bodies("auth")) == 2


async def trace_of(r: Router) -> list[Any]:
    """The attempts of one request, answered or not."""
    try:
        return (await r.achat(HELLO)).trace
    except AllProvidersFailed as exc:
        return exc.attempts


async def test_last_resort_includes_auth_retries_a_bad_key_without_restarting_it(
    up: Upstream,
) -> None:
    clock = Clock()
    config = {
        "health": {"mode": "off"},
        "state": "memory://",
        "last_resort_includes_auth": True,
        "circuit": {"auth_cooldown_s": 100, "cooldown_s": 1000},
        "providers": [prov("bad", up.url("auth")), prov("other", up.url("server"))],
    }
    async with Router(config, clock=clock, environ={}) as r:
        for _ in range(3):
            with pytest.raises(AllProvidersFailed):
                await r.achat(HELLO)
            clock.now += 30
        assert len(up.bodies("auth")) == 3  # first pass, then two last resorts
        clock.now += 11  # 101 s after the first 401: the cooldown was not restarted
        with pytest.raises(AllProvidersFailed) as failed:
            await r.achat(HELLO)
        assert not failed.value.attempts[0].last_resort  # a trial in the first pass


def sent_caps(up: Upstream, scenario: str) -> list[Any]:
    return [b.get("max_tokens") for b in up.bodies(scenario)]


async def test_a_configured_output_cap_lowers_the_request_and_never_raises_it(
    up: Upstream,
) -> None:
    async with router(prov("ds", up.url("deepseek"), max_output_tokens=8192)) as r:
        big = await r.achat({**HELLO, "max_tokens": 64000})
        small = await r.achat({**HELLO, "max_completion_tokens": 5})
        none = await r.achat(HELLO)
    assert reasons(big.trace) == reasons(small.trace) == reasons(none.trace) == ["ds:ok"]
    assert sent_caps(up, "deepseek") == [8192, 5, None]  # min(requested, cap), nothing added


async def test_a_model_limit_wins_over_the_providers(up: Upstream) -> None:
    limits = {"deepseek-chat": {"max_output_tokens": 4000}}
    ds = prov("ds", up.url("deepseek"), max_output_tokens=8192, model_limits=limits)
    async with router(ds) as r:
        await r.achat({**HELLO, "model": "deepseek-chat", "max_tokens": 64000})
        await r.achat({**HELLO, "model": "deepseek-reasoner", "max_tokens": 64000})
    assert sent_caps(up, "deepseek") == [4000, 8192]


async def test_an_output_cap_is_learned_from_the_refusal_and_remembered(
    up: Upstream, tmp_path: Any
) -> None:
    """DeepSeek's 400 states the range: one retry with its maximum, and the next request
    (here from another router sharing the SQLite state, as the next CLI run) is clamped up
    front."""
    config = {
        "health": {"mode": "off"},
        "state": f"sqlite:///{tmp_path}/state.db",
        "providers": [prov("ds", up.url("deepseek"), models=["gpt-test"])],
    }
    async with Router(config, environ={}) as r:
        first = await r.achat({**HELLO, "max_tokens": 64000})
    assert reasons(first.trace) == ["ds:bad_request", "ds:ok"]
    assert "[1, 8192]" in first.trace[0].detail
    async with Router(config, environ={}) as r:
        second = await r.achat({**HELLO, "max_tokens": 64000})
        async for _ in r.astream({**HELLO, "max_tokens": 20000, "stream": True}):
            pass
    assert reasons(second.trace) == ["ds:ok"]
    assert sent_caps(up, "deepseek") == [64000, 8192, 8192, 8192]


async def test_a_learned_cap_is_per_model_and_clamps_streams_too(up: Upstream) -> None:
    ds = prov("ds", up.url("deepseek"), model_map={"big": "deepseek-chat"})
    async with router(ds) as r:
        first = await r.achat({**HELLO, "model": "big", "max_tokens": 9000})
        assert reasons(first.trace) == ["ds:bad_request", "ds:ok"]
        async for _ in r.astream({**HELLO, "model": "big", "max_tokens": 9000, "stream": True}):
            pass
        other = await r.achat({**HELLO, "model": "other", "max_tokens": 9000})
        assert reasons(other.trace) == ["ds:bad_request", "ds:ok"]  # another model: learned anew
        again = await r.achat({**HELLO, "model": "other", "max_tokens": 9000})
        assert reasons(again.trace) == ["ds:bad_request", "ds:ok"]  # a client's name: not kept
    assert sent_caps(up, "deepseek") == [9000, 8192, 8192, 9000, 8192, 9000, 8192]


async def test_a_configured_cap_is_not_lowered_by_a_refusal(up: Upstream) -> None:
    """The operator's `max_output_tokens` wins: a refusal below it lowers that one request's
    cap, and nothing is kept."""
    ds = prov("ds", up.url("deepseek"), models=["gpt-test"], max_output_tokens=16384)
    async with router(ds) as r:
        for _ in range(2):
            result = await r.achat({**HELLO, "max_tokens": 64000})
            assert reasons(result.trace) == ["ds:bad_request", "ds:ok"]
    assert sent_caps(up, "deepseek") == [16384, 8192, 16384, 8192]


async def test_an_input_larger_than_the_context_window_is_never_sent(up: Upstream) -> None:
    long = {**HELLO, "messages": [{"role": "user", "content": "word " * 400}]}  # ~400 tokens
    async with router(
        prov("small", up.url("ok"), context_window=100),
        prov("big", up.url("backup"), model_limits={"gpt-test": {"context_window": 1000}}),
    ) as r:
        result = await r.achat(long)
        assert reasons(result.trace) == ["small:context_exceeded", "big:ok"]
        estimate = input_tokens(long)
        assert 300 < estimate < 700
        assert (
            result.trace[0].detail
            == f"estimated input {estimate} tokens exceeds context_window 100"
        )
        assert reasons((await r.achat(HELLO)).trace) == ["small:ok"]
    assert len(up.bodies("ok")) == 1
    async with router(prov("small", up.url("ok"), context_window=100)) as r:
        with pytest.raises(AllProvidersFailed) as failed:
            await r.achat(long)
    assert failed.value.status == 400  # the client's to shorten, as a provider's refusal


async def test_circuit_opens_after_failures_and_last_resort_still_tries(up: Upstream) -> None:
    clock = Clock()
    config = {
        "health": {"mode": "off"},
        "state": "memory://",
        "circuit": {"failures": 3, "cooldown_s": 30},
        "providers": [prov("sw", up.url("switch")), prov("dead", refused_url())],
    }
    up.switch = "server"
    async with Router(config, clock=clock, environ={}) as r:
        for _ in range(3):
            with pytest.raises(AllProvidersFailed):
                await r.achat(HELLO)
        up.switch = "ok"
        result = await r.achat(HELLO)
        assert reasons(result.trace) == ["sw:circuit_open", "dead:circuit_open", "sw:ok"]
        assert result.trace[-1].last_resort
        # the last-resort success closed the circuit again
        assert reasons((await r.achat(HELLO)).trace) == ["sw:ok"]


async def test_half_open_trial_after_cooldown(up: Upstream) -> None:
    clock = Clock()
    config = {
        "health": {"mode": "off"},
        "state": "memory://",
        "circuit": {"failures": 1, "cooldown_s": 10},
        "providers": [prov("sw", up.url("switch")), prov("good", up.url("backup"))],
    }
    up.switch = "server"
    async with Router(config, clock=clock, environ={}) as r:
        await r.achat(HELLO)
        assert reasons((await r.achat(HELLO)).trace)[0] == "sw:circuit_open"
        clock.now += 11
        up.switch = "ok"
        assert reasons((await r.achat(HELLO)).trace) == ["sw:ok"]


async def test_missing_key_is_auth_failed_and_sends_nothing(up: Upstream) -> None:
    async with router(
        prov("nokey", up.url("ok"), api_key_env="NOT_SET_ANYWHERE"),
        prov("good", up.url("backup")),
    ) as r:
        result = await r.achat(HELLO)
    assert reasons(result.trace) == ["nokey:auth_failed", "good:ok"]
    assert result.trace[0].detail == "NOT_SET_ANYWHERE is not set"
    assert up.bodies("ok") == []


async def test_auth_header_scheme_and_query(up: Upstream) -> None:
    async with router(
        prov("bearer", up.url("ok"), api_key_env="TEST_KEY"),
    ) as r:
        await r.achat(HELLO)
    assert up.received[-1].headers["Authorization"] == f"Bearer {KEY}"
    async with router(
        prov("xkey", up.url("ok"), api_key_env="TEST_KEY", auth_header="x-api-key"),
    ) as r:
        await r.achat(HELLO)
    assert up.received[-1].headers["x-api-key"] == KEY
    assert "Authorization" not in up.received[-1].headers
    async with router(prov("q", up.url("ok"), api_key_env="TEST_KEY", auth_query="key")) as r:
        await r.achat(HELLO)
    assert "Authorization" not in up.received[-1].headers


async def test_request_building_model_map_max_tokens_extra_body(up: Upstream) -> None:
    async with router(
        prov(
            "a",
            up.url("ok"),
            model_map={"big": "gpt-test"},
            max_tokens_field="max_completion_tokens",
            extra_body={"user": "agent-reach", "metadata": {"team": "x"}},
        ),
        prov("o", up.url("ollama", "ollama"), format="ollama"),
        fallback_order=["a"],
    ) as r:
        await r.achat({**HELLO, "model": "big", "max_tokens": 64, "temperature": 0.2})
        body = up.bodies("ok")[-1]
        assert body["model"] == "gpt-test"
        assert body["max_completion_tokens"] == 64
        assert "max_tokens" not in body
        assert body["user"] == "agent-reach"
        assert body["metadata"] == {"team": "x"}
        assert body["stream"] is False
        assert "agent_reach" not in body
        await r.achat(
            {
                **HELLO,
                "model": "qwen2:72b",
                "max_tokens": 32,
                "stop": "END",
                "agent_reach": {"provider_route": "o"},
            }
        )
    sent = up.bodies("ollama")[-1]
    assert sent["options"] == {"num_predict": 32, "stop": ["END"]}
    assert sent["stream"] is False
    assert sent["messages"] == [{"role": "user", "content": "hi"}]


async def test_ollama_is_normalized_with_usage(up: Upstream) -> None:
    async with router(prov("o", up.url("ollama", "ollama"), format="ollama")) as r:
        result = await r.achat({**HELLO, "model": "qwen2:72b"})
    resp = result.response
    assert_valid(COMPLETION, resp)
    assert resp["object"] == "chat.completion"
    assert resp["id"].startswith("chatcmpl-")
    assert resp["model"] == "qwen2:72b"
    assert resp["choices"][0]["message"] == {
        "role": "assistant",
        "content": "hello from ollama",
        "refusal": None,
    }
    assert resp["usage"] == {"prompt_tokens": 26, "completion_tokens": 298, "total_tokens": 324}


async def test_raw_response_when_schema_compatibility_is_off(up: Upstream) -> None:
    async with router(prov("o", up.url("ollama", "ollama"), format="ollama")) as r:
        result = await r.achat({**HELLO, "agent_reach": {"response_schema_compatibility": False}})
    assert result.response["message"]["content"] == "hello from ollama"
    assert "choices" not in result.response


async def test_retries_try_the_same_provider_again(up: Upstream) -> None:
    async with router(prov("f", up.url("flaky"), retries=1)) as r:
        await r.achat(HELLO)  # the first flaky call succeeds
        result = await r.achat(HELLO)
    assert reasons(result.trace) == ["f:server_error", "f:ok"]


async def test_models_field_skips_other_models(up: Upstream) -> None:
    async with router(prov("a", up.url("ok"), models=["m1"]), prov("b", up.url("backup"))) as r:
        result = await r.achat({**HELLO, "model": "m9"})
        assert reasons(result.trace) == ["a:model_unavailable", "b:ok"]
        no_model = {"messages": HELLO["messages"]}
        await r.achat({**no_model, "agent_reach": {"fallback_order": ["a"]}})
        assert up.bodies("ok")[-1]["model"] == "m1"  # no model asked: the first of `models`
        result = await r.achat({**no_model, "agent_reach": {"fallback_order": ["b", "a"]}})
        assert reasons(result.trace) == ["b:model_unavailable", "a:ok"]
        assert result.trace[0].detail == "no model given"  # never sent a body without one
    assert up.bodies("backup") == [HELLO | {"model": "m9", "stream": False}]


@pytest.mark.parametrize("mode", ["cached", "per_request", "off"])
async def test_health_modes(up: Upstream, mode: str) -> None:
    async with router(prov("a", up.url("ok")), health={"mode": mode, "ttl_s": 60}) as r:
        for _ in range(3):
            await r.achat(HELLO)
    assert len(up.health_hits) == {"cached": 1, "per_request": 3, "off": 0}[mode]


@pytest.mark.parametrize("scenario", ["html-health", "down-health"])
async def test_failed_health_check_is_unhealthy(up: Upstream, scenario: str) -> None:
    async with router(
        prov("a", up.url(scenario)), prov("b", up.url("backup")), health={"mode": "cached"}
    ) as r:
        result = await r.achat(HELLO)
    assert reasons(result.trace) == ["a:unhealthy", "b:ok"]
    assert up.bodies(scenario) == []


async def test_health_check_model_list(up: Upstream) -> None:
    async with router(
        prov("a", up.url("ok")), prov("b", up.url("backup")), health={"mode": "cached"}
    ) as r:
        listed = await r.achat({**HELLO, "model": "m2"})
        with pytest.raises(AllProvidersFailed) as info:
            await r.achat({**HELLO, "model": "not-there"})
    assert reasons(listed.trace) == ["a:ok"]
    assert reasons(info.value.attempts) == ["a:model_unavailable", "b:model_unavailable"]
    # the ollama list implies :latest
    async with router(
        prov("o", up.url("ollama", "ollama"), format="ollama"), health={"mode": "cached"}
    ) as r:
        assert (await r.achat({**HELLO, "model": "llama3.2"})).provider == "o"


async def test_health_check_refused_is_connect_failed(up: Upstream) -> None:
    async with router(
        prov("dead", refused_url()), prov("b", up.url("backup")), health={"mode": "cached"}
    ) as r:
        first = await r.achat(HELLO)
        second = await r.achat(HELLO)
    assert reasons(first.trace) == ["dead:connect_failed", "b:ok"]
    assert reasons(second.trace) == ["dead:unhealthy", "b:ok"]


@pytest.mark.parametrize(
    ("level", "scenario", "ok"),
    [
        ("lenient", "nousage", True),
        ("usage", "nousage", False),
        ("usage", "ok", True),
        ("strict", "ok", True),
    ],
)
async def test_validation_levels(up: Upstream, level: str, scenario: str, ok: bool) -> None:
    async with router(prov("a", up.url(scenario), validation=level)) as r:
        if ok:
            await r.achat({**HELLO, "model": "gpt-test"})
        else:
            with pytest.raises(AllProvidersFailed) as info:
                await r.achat({**HELLO, "model": "gpt-test"})
            assert info.value.attempts[0].reason is Reason.SCHEMA_MISMATCH


async def test_strict_validation_accepts_the_model_map_target(up: Upstream) -> None:
    async with router(
        prov(
            "o",
            up.url("ollama", "ollama"),
            format="ollama",
            validation="strict",
            model_map={"qwen2.5-72b": "qwen2:72b"},
        ),
    ) as r:
        # Ollama's body has no object: chat.completion, so strict rejects it
        with pytest.raises(AllProvidersFailed) as info:
            await r.achat({**HELLO, "model": "qwen2.5-72b"})
    assert "object: chat.completion" in info.value.attempts[0].detail
    async with router(
        prov("a", up.url("ok"), validation="strict", model_map={"alias": "gpt-test"})
    ) as r:
        assert (await r.achat({**HELLO, "model": "alias"})).provider == "a"


async def test_all_failed_carries_every_attempt_without_secrets(up: Upstream) -> None:
    async with router(
        prov("a", up.url("auth"), api_key_env="TEST_KEY"), prov("b", up.url("server"))
    ) as r:
        with pytest.raises(AllProvidersFailed) as info:
            await r.achat(HELLO)
    assert reasons(info.value.attempts) == ["a:auth_failed", "b:server_error"]
    assert up.received[0].headers["Authorization"] == f"Bearer {KEY}"  # it was sent...
    detail = info.value.attempts[0].detail
    assert detail == ECHOED_KEY_PREFIX + "***"  # ...and the echo is redacted
    assert KEY not in str(info.value)


async def test_a_key_echoed_url_encoded_is_redacted_too(up: Upstream) -> None:
    key = "k+y/z=1 2&3"  # every character that URL-encoding changes
    provider = prov("q", up.url("echourl"), api_key_env="TEST_KEY", auth_query="key")
    async with router(provider, environ={"TEST_KEY": key}) as r:
        with pytest.raises(AllProvidersFailed) as info:
            await r.achat(HELLO)
    detail = info.value.attempts[0].detail
    assert "key=***" in detail, detail
    for form in ("k+y", "k%2By", "z%3D1", "1%202", "1+2"):
        assert form not in str(info.value)


async def test_request_errors(up: Upstream) -> None:
    async with router(prov("a", up.url("ok"))) as r:
        with pytest.raises(RequestError):
            await r.achat({"messages": []})
        with pytest.raises(RequestError):
            await r.achat({**HELLO, "agent_reach": {"fallback_order": ["nope"]}})
        with pytest.raises(RequestError) as info:
            await r.achat({**HELLO, "agent_reach": {"provider_route": "nope"}})
        assert info.value.status == 404


def test_sync_chat(up: Upstream) -> None:
    r = router(prov("a", up.url("ok")))
    assert r.chat(HELLO).provider == "a"
    assert r.chat(HELLO).provider == "a"  # a second event loop works too


# -- streaming ---------------------------------------------------------------------------------


async def collect(r: Router, request: dict[str, Any]) -> tuple[str, list[dict[str, Any]], Any]:
    stream = await r.open_stream(request)
    chunks = [c async for c in stream]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    return text, chunks, stream


async def test_stream_ok_chunks_are_valid(up: Upstream) -> None:
    async with router(prov("a", up.url("ok"))) as r:
        text, chunks, stream = await collect(r, HELLO)
    assert text == "hello from ok"
    assert stream.provider == "a"
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    for c in chunks:
        assert_valid(CHUNK, c)


async def test_stream_ollama_ndjson_becomes_openai_chunks(up: Upstream) -> None:
    async with router(prov("o", up.url("ollama", "ollama"), format="ollama")) as r:
        text, chunks, _ = await collect(r, {**HELLO, "model": "qwen2:72b"})
    assert text == "hello from ollama"
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["usage"]["total_tokens"] == 324
    for c in chunks:
        assert_valid(CHUNK, c)


@pytest.mark.parametrize(
    ("scenario", "reason"),
    [
        ("streamerr", Reason.SERVER_ERROR),
        ("streamempty", Reason.SCHEMA_MISMATCH),
        ("auth", Reason.AUTH_FAILED),
        ("html", Reason.SCHEMA_MISMATCH),
    ],
)
async def test_stream_fails_over_before_the_first_chunk(
    up: Upstream, scenario: str, reason: Reason
) -> None:
    async with router(prov("bad", up.url(scenario)), prov("good", up.url("backup"))) as r:
        text, _chunks, stream = await collect(r, HELLO)
    assert text == "hello from ok"  # nothing from the failed attempt reached the caller
    assert [(a.provider, a.reason) for a in stream.trace] == [("bad", reason), ("good", "ok")]


async def test_stream_cut_after_first_chunk_is_an_error_not_a_truncation(up: Upstream) -> None:
    """With continuation off (on by default: tests/e2e/test_defaults.py)."""
    cut, good = prov("cut", up.url("streamcut")), prov("good", up.url("backup"))
    async with router(cut, good, continue_on_cut=False) as r:
        stream = await r.open_stream(HELLO)
        got = []
        with pytest.raises(StreamInterrupted) as info:
            async for c in stream:
                got.append(c)
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in got) == "partial answer"
    trace = info.value.attempts
    assert [(a.provider, a.reason) for a in trace] == [("cut", "ok"), ("cut", "server_error")]
    assert "after the first chunk" in trace[-1].detail


async def test_stream_chunk_gap_over_read_timeout(up: Upstream) -> None:
    async with router(prov("gap", up.url("streamgap"), timeout={"read": 300})) as r:
        stream = await r.open_stream(HELLO)
        with pytest.raises(StreamInterrupted) as info:
            async for _ in stream:
                pass
    assert info.value.attempts[-1].reason is Reason.TIMEOUT


async def test_astream_yields_chunks(up: Upstream) -> None:
    async with router(prov("a", up.url("ok"))) as r:
        chunks = [c async for c in r.astream(HELLO)]
    assert len(chunks) >= 3


@pytest.mark.parametrize("continue_on_cut", [False, True])
async def test_a_long_stream_holds_what_it_passed_on_only_to_continue_it(
    up: Upstream, continue_on_cut: bool
) -> None:
    """An unread stream must not hold every token it wrote (protocol §14): the text sent is
    kept only when a cut may be continued, and then as about its own length."""
    async with router(prov("hose", up.url("firehose")), continue_on_cut=continue_on_cut) as r:
        stream = await r.open_stream(HELLO)
        tracemalloc.start()
        try:
            passed = 0
            async for _ in stream:
                passed += 1
                if passed == 500:
                    before = tracemalloc.get_traced_memory()[0]
                if passed == 3000:
                    held = tracemalloc.get_traced_memory()[0] - before
                    break
        finally:
            tracemalloc.stop()
            await stream.aclose()
    text = 2500 * 1000  # the 1 KB chunks passed on between the two readings
    if continue_on_cut:
        assert 0.9 * text < held < 1.5 * text  # about the text itself, not a str per chunk
    else:
        assert held < 0.1 * text


async def test_leaving_a_stream_early_closes_it(up: Upstream) -> None:
    async with router(prov("gap", up.url("streamgap"), timeout={"read": 5000})) as r:
        stream = await r.open_stream(HELLO)
        start = time.perf_counter()
        consumer = asyncio.ensure_future(stream.__aiter__().__anext__())
        await asyncio.sleep(0.05)
        consumer.cancel()
        await stream.aclose()
        assert time.perf_counter() - start < 1


def test_error_body_shape_is_valid() -> None:
    from agent_reach.chat import completion

    assert_valid(
        ERROR, completion.error("all providers failed", "all_providers_failed", attempts=[])
    )


# -- hedging (protocol §4.3) ----------------------------------------------------------------------


async def test_hedge_starts_the_next_provider_and_cancels_the_loser(up: Upstream) -> None:
    async with router(
        prov("slow", up.url("slow"), hedge_after_ms=100), prov("fast", up.url("backup"))
    ) as r:
        result = await r.achat(HELLO)
    assert result.provider == "fast"  # before the slow one's 0.6 s, which would have won
    assert reasons(result.trace) == ["fast:ok", "slow:timeout"]
    assert result.trace[1].detail == "hedged: cancelled, another provider answered first"
    for _ in range(100):
        if up.cancelled:
            break
        await asyncio.sleep(0.01)
    assert up.cancelled == ["slow"]  # the losing request was really cancelled upstream


async def test_no_hedge_when_the_first_answers_in_time(up: Upstream) -> None:
    async with router(
        prov("a", up.url("ok"), hedge_after_ms=500), prov("b", up.url("backup"))
    ) as r:
        result = await r.achat(HELLO)
    assert reasons(result.trace) == ["a:ok"]
    assert up.bodies("backup") == []


async def test_hedge_on_a_route_and_for_streams(up: Upstream) -> None:
    routes = {"hedged": {"providers": ["slow", "fast"], "hedge_after_ms": 100}}
    async with router(
        prov("slow", up.url("slow")), prov("fast", up.url("backup")), routes=routes
    ) as r:
        plain = await r.achat({**HELLO, "agent_reach": {"provider_route": "slow"}})
        assert plain.provider == "slow"  # no hedging outside the route
        text, _, stream = await collect(r, {**HELLO, "agent_reach": {"provider_route": "hedged"}})
    assert text == "hello from ok"
    assert stream.provider == "fast"  # the hedge, before the slow one's first chunk


async def test_a_fast_failure_fails_over_before_the_hedge(up: Upstream) -> None:
    async with router(
        prov("bad", up.url("server"), hedge_after_ms=300), prov("b", up.url("backup"))
    ) as r:
        result = await r.achat(HELLO)
    assert reasons(result.trace) == ["bad:server_error", "b:ok"]


async def test_the_deadline_is_kept_on_the_injected_monotonic_clock(up: Upstream) -> None:
    """The deadline is stepped by hand: no provider hangs and nothing sleeps."""
    clock = Clock()
    async with router(
        prov("a", up.url("server")),
        prov("b", up.url("ok")),
        prov("c", up.url("ok")),
        deadline_ms=5000,
        monotonic=clock,
    ) as r:

        def jump(event: object) -> None:  # the first attempt takes "10 s"
            clock.now += 10

        r.subscribe(jump)
        with pytest.raises(AllProvidersFailed) as info:
            await r.achat(HELLO)
    assert reasons(info.value.attempts) == ["a:server_error", "b:timeout", "c:timeout"]
    assert [a.detail for a in info.value.attempts[1:]] == ["deadline", "deadline"]
    assert up.bodies("ok") == []  # b and c were never sent anything


async def test_joining_a_health_check_in_flight_keeps_to_the_joiners_deadline(
    up: Upstream,
) -> None:
    """A request that joins a health check another request started (single flight) waits
    for it no longer than its own deadline allows (it used to wait for the whole check)."""
    slow = prov("slow", up.url("hang-health"), timeout={"connect": 500, "read": 10000})
    async with router(slow, prov("b", up.url("ok")), health={"mode": "cached"}) as r:
        first = asyncio.ensure_future(r.achat({**HELLO, "agent_reach": {"deadline_ms": 8000}}))
        await asyncio.sleep(0.2)  # the first request's check of `slow` is in flight
        start = time.perf_counter()
        with pytest.raises(AllProvidersFailed) as info:
            await r.achat(
                {**HELLO, "agent_reach": {"deadline_ms": 300, "fallback_order": ["slow"]}}
            )
        elapsed = time.perf_counter() - start
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
    assert elapsed < 5, elapsed  # bounded by its 0.3 s, not the check's 10 s read timeout
    attempts = [(a.reason, a.detail) for a in info.value.attempts]
    assert attempts[0] == (Reason.TIMEOUT, "deadline")


async def test_count_tokens_asks_the_first_native_provider_whose_circuit_is_closed(
    up: Upstream,
) -> None:
    from dataclasses import replace

    from agent_reach.chat.request import ChatRequest
    from agent_reach.core.breaker import CircuitState

    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    req = replace(ChatRequest.checked(body), api="messages", native=body)
    anthropic = {"format": "anthropic", "api_key_env": "TEST_KEY"}
    async with router(
        prov("chat", up.url("ok")),
        prov("first", up.url("claude", "anthropic"), **anthropic),
        prov("second", up.url("claude", "anthropic"), **anthropic),
    ) as r:
        assert await r.count_tokens(replace(req, native=None, api="chat")) is None  # no native
        first = await r.count_tokens(req)
        assert first is not None
        assert first[0] == "first"
        key = r.engine.prepared["first"].state_key
        await r.store.set_circuit(key, CircuitState(3, r.now() + 60, cause="server_error"))
        second = await r.count_tokens(req)
    assert second == ("second", first[1])
