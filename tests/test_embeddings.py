"""Embeddings through the library (`Router.aembed`, protocol §10.3) against the fake providers of
tests/fakes/embeddings.py: failover only inside the request's space, widths pinned, batches
re-split to each provider's limit and put back in order, vectors checked; config errors name
the field."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_reach import AllProvidersFailed, Router
from agent_reach.config import config_from_data
from agent_reach.core.errors import ConfigError, RequestError
from agent_reach.engine.embed import VALUES_PER_BATCH

from .fakes.embeddings import EmbeddingServer, vector
from .fakes.upstream import refused_url

WIDTH = 32


def provider(name: str, url: str, models: dict[str, str], **more: Any) -> dict[str, Any]:
    fields = {k: v for k, v in more.items() if k in ("format", "fallback_weight", "timeout")}
    embeddings = {"models": models, **{k: v for k, v in more.items() if k not in fields}}
    return {"name": name, "endpoint": url, "api_key_env": "", **fields, "embeddings": embeddings}


def config(*providers: dict[str, Any], **spaces: dict[str, Any]) -> dict[str, Any]:
    return {
        "version": "0.3.2",
        "health": {"mode": "off"},
        "state": "memory://",
        "embeddings": {"spaces": spaces or {"bge-m3": {"dimensions": WIDTH}}},
        "providers": list(providers),
    }


def texts(n: int) -> list[str]:
    return [f"line {i}: def f{i}(): return {i}" for i in range(n)]


def vectors(answer: dict[str, Any]) -> list[list[float]]:
    assert [d["index"] for d in answer["data"]] == list(range(len(answer["data"])))
    return [d["embedding"] for d in answer["data"]]


async def embed(cfg: dict[str, Any], request: dict[str, Any]) -> Any:
    async with Router(cfg) as router:
        return await router.aembed(request)


@pytest.mark.parametrize("n", [1, 25, 2000])
async def test_failover_stays_in_the_space(embedding_fakes: EmbeddingServer, n: int) -> None:
    before = len(embedding_fakes.calls("ok", "other"))
    cfg = config(
        provider(
            "other",
            embedding_fakes.url("ok", "other"),
            {"qwen": "text-embedding-v4"},
            fallback_weight=9,
        ),
        provider("dead", refused_url(), {"bge-m3": "bge-m3"}, fallback_weight=8),
        provider(
            "badkey",
            embedding_fakes.url("auth", "bge-m3"),
            {"bge-m3": "BAAI/bge-m3"},
            fallback_weight=7,
        ),
        provider(
            "wide",
            embedding_fakes.url("wide", "bge-m3"),
            {"bge-m3": "BAAI/bge-m3"},
            fallback_weight=6,
        ),
        provider("dash", embedding_fakes.url("dash", "bge-m3"), {"bge-m3": "bge-m3"}, max_batch=10),
        **{"bge-m3": {"dimensions": WIDTH}, "qwen": {"dimensions": WIDTH}},
    )
    result = await embed(cfg, {"model": "bge-m3", "input": texts(n)})
    assert result.provider == "dash"
    assert vectors(result.response) == [vector("bge-m3", t, WIDTH) for t in texts(n)]
    assert result.response["model"] == "bge-m3"
    assert [(a.provider, str(a.reason)) for a in result.trace] == [
        ("dead", "connect_failed"),
        ("badkey", "auth_failed"),
        ("wide", "schema_mismatch"),
        ("dash", "ok"),
    ]
    assert "dimensions, not 32" in result.trace[2].detail
    assert (
        len(embedding_fakes.calls("ok", "other")) == before
    )  # another space's provider: never asked
    sizes = [
        len(s.body["input"]) for s in embedding_fakes.calls("dash", "bge-m3")[-((n + 9) // 10) :]
    ]
    assert max(sizes) <= 10
    assert sum(sizes) == n


async def test_every_provider_of_the_space_down_is_the_all_failed_error(
    embedding_fakes: EmbeddingServer,
) -> None:
    cfg = config(
        provider("other", embedding_fakes.url("ok", "other"), {"qwen": "q"}, fallback_weight=9),
        provider("dead", refused_url(), {"bge-m3": "bge-m3"}),
        provider("badkey", embedding_fakes.url("auth", "bge-m3"), {"bge-m3": "bge-m3"}),
        **{"bge-m3": {"dimensions": WIDTH}, "qwen": {"dimensions": WIDTH}},
    )
    with pytest.raises(AllProvidersFailed) as info:
        await embed(cfg, {"model": "bge-m3", "input": "hello"})
    assert [a.provider for a in info.value.attempts] == ["dead", "badkey"]


async def test_a_fallback_space_answers_only_when_listed_and_says_so(
    embedding_fakes: EmbeddingServer,
) -> None:
    spaces = {
        "bge-m3": {"dimensions": WIDTH, "fallback_spaces": ["qwen"]},
        "qwen": {"dimensions": 16, "aliases": ["text-embedding-v4"]},
    }
    cfg = config(
        provider("dead", refused_url(), {"bge-m3": "bge-m3"}),
        provider("qwen", embedding_fakes.url("ok", "qwen"), {"qwen": "text-embedding-v4"}),
        **spaces,
    )
    result = await embed(cfg, {"model": "bge-m3", "input": ["a", "b"]})
    assert result.response["model"] == "qwen"
    assert vectors(result.response) == [vector("qwen", t, 16) for t in "ab"]
    assert [a.provider for a in result.trace] == ["dead", "qwen"]
    alias = await embed(cfg, {"model": "text-embedding-v4", "input": "a"})
    assert alias.response["model"] == "qwen"


async def test_ollama_and_gemini_formats_and_normalized_vectors(
    embedding_fakes: EmbeddingServer,
) -> None:
    spaces = {"bge-m3": {"dimensions": WIDTH, "normalized": True}}
    for kind, fmt in (("ollama", "ollama"), ("gemini", "gemini")):
        cfg = config(
            provider(kind, embedding_fakes.url(kind, "bge-m3"), {"bge-m3": "bge-m3"}, format=fmt),
            **spaces,
        )
        result = await embed(cfg, {"model": "bge-m3", "input": texts(3)})
        for got, text in zip(vectors(result.response), texts(3), strict=True):
            raw = vector("bge-m3", text, WIDTH)
            norm = sum(v * v for v in raw) ** 0.5
            assert got == pytest.approx([v / norm for v in raw])
        sent = embedding_fakes.seen[-1].body
        if fmt == "gemini":
            assert sent["requests"][0]["outputDimensionality"] == WIDTH
            assert embedding_fakes.seen[-1].path.endswith("/models/bge-m3:batchEmbedContents")
        else:
            assert sent["dimensions"] == WIDTH


@pytest.mark.parametrize(
    ("request_body", "param"),
    [
        ({"model": "bge-m3", "input": [1, 2, 3]}, "input"),
        ({"model": "bge-m3", "input": []}, "input"),
        ({"model": "bge-m3", "input": "x", "dimensions": 64}, "dimensions"),
        ({"model": "nope", "input": "x"}, "model"),
        ({"model": "bge-m3", "input": "x", "encoding_format": "int8"}, "encoding_format"),
    ],
)
async def test_bad_requests_name_their_field(
    embedding_fakes: EmbeddingServer, request_body: dict[str, Any], param: str
) -> None:
    cfg = config(provider("ok", embedding_fakes.url("ok", "bge-m3"), {"bge-m3": "bge-m3"}))
    with pytest.raises(RequestError) as info:
        await embed(cfg, request_body)
    assert info.value.param == param


async def test_true_and_false_are_no_numbers(embedding_fakes: EmbeddingServer) -> None:
    """Issue 47: JSON's `true` and `false` are not 1 and 0 in a vector."""
    cfg = config(
        provider("bools", embedding_fakes.url("bools", "bge-m3"), {"bge-m3": "m"}),
        provider("ok", embedding_fakes.url("ok", "bge-m3"), {"bge-m3": "m"}),
    )
    result = await embed(cfg, {"model": "bge-m3", "input": texts(3)})
    assert result.provider == "ok"
    assert vectors(result.response) == [vector("bge-m3", t, WIDTH) for t in texts(3)]
    assert (result.trace[0].reason, result.trace[0].detail) == (
        "schema_mismatch",
        "vector 0 holds a value that is no number",
    )


@pytest.mark.parametrize("width", [1024, 4096])
async def test_wide_vectors_come_in_batches_of_a_bounded_size(
    embedding_fakes: EmbeddingServer, width: int
) -> None:
    """Issue 47: one upstream answer holds at most `VALUES_PER_BATCH` numbers (its parse holds
    the event loop), whatever `max_batch` allows."""
    url = embedding_fakes.url("ok", "big")
    # The fake computes each answer's 262,144 numbers in Python: 3 s, the default read timeout,
    # was too short for it on a loaded machine (seen with both cores busy).
    cfg = config(
        provider("ok", url, {"big": "m"}, timeout={"read": 30000}), big={"dimensions": width}
    )
    before = len(embedding_fakes.calls("ok", "big"))
    result = await embed(cfg, {"model": "big", "input": texts(300)})
    assert vectors(result.response) == [vector("big", t, width) for t in texts(300)]
    sizes = [len(s.body["input"]) for s in embedding_fakes.calls("ok", "big")[before:]]
    assert max(sizes) == VALUES_PER_BATCH // width
    assert sum(sizes) == 300


async def test_each_batch_takes_a_request_from_the_budget(
    embedding_fakes: EmbeddingServer,
) -> None:
    """Issue 47: `2req/day` lets two upstream requests through, not two client requests of
    two batches each; a request whose batches do not fit is refused before any is sent."""
    url = embedding_fakes.url("ok", "budgeted")
    budgeted = provider("p", url, {"bge-m3": "m"}, max_batch=1500)
    cfg = config({**budgeted, "metadata": {"rate_limit": "2req/day"}})
    cfg["embeddings"]["max_inputs"] = 3000
    async with Router(cfg) as router:
        first = await router.aembed({"model": "bge-m3", "input": texts(3000)})
        assert len(first.response["data"]) == 3000
        with pytest.raises(AllProvidersFailed) as refused:
            await router.aembed({"model": "bge-m3", "input": texts(3000)})
    [attempt] = refused.value.attempts
    assert (attempt.reason, attempt.sent) == ("quota_exhausted", False)
    assert "2req/day used up" in attempt.detail
    assert [len(s.body["input"]) for s in embedding_fakes.calls("ok", "budgeted")] == [1500] * 2


async def test_answers_without_usage_count_an_estimate(embedding_fakes: EmbeddingServer) -> None:
    """Issue 47: Gemini's batchEmbedContents says no token count; a `tok` budget still moves."""
    url = embedding_fakes.url("gemini", "bge-m3")
    gemini = provider("g", url, {"bge-m3": "bge-m3"}, format="gemini")
    cfg = config({**gemini, "metadata": {"rate_limit": "30tok/day"}})
    async with Router(cfg) as router:
        first = await router.aembed({"model": "bge-m3", "input": texts(10)})
        assert first.response["usage"]["total_tokens"] > 30  # ~10 a line, estimated
        with pytest.raises(AllProvidersFailed) as refused:
            await router.aembed({"model": "bge-m3", "input": texts(1)})
    assert refused.value.attempts[0].reason == "quota_exhausted"


@pytest.mark.parametrize(
    ("limits", "count", "words"),
    [
        (
            {},
            2049,
            "'input' holds 2049 items: at most 2048 go in one request (embeddings.max_inputs)",
        ),
        ({"max_inputs": 3}, 4, "at most 3 go in one request (embeddings.max_inputs)"),
        (
            {"max_values": 64},  # 3 inputs x 32 dimensions
            3,
            "'input' holds 3 items of up to 32 dimensions: an answer holds at most 64 numbers"
            " (embeddings.max_values)",
        ),
    ],
)
async def test_requests_past_the_size_limits_are_refused_before_any_provider(
    embedding_fakes: EmbeddingServer, limits: dict[str, int], count: int, words: str
) -> None:
    """Issue 47: one small body may not ask for gigabytes of vectors."""
    cfg = config(provider("ok", embedding_fakes.url("ok", "bge-m3"), {"bge-m3": "bge-m3"}))
    cfg["embeddings"].update(limits)
    embedding_fakes.seen.clear()
    with pytest.raises(RequestError) as info:
        await embed(cfg, {"model": "bge-m3", "input": ["x"] * count})
    assert (info.value.param, info.value.status) == ("input", 400)
    assert words in str(info.value)
    assert embedding_fakes.seen == []
    answer = await embed(cfg, {"model": "bge-m3", "input": ["x"] * (count - 1)})
    assert len(answer.response["data"]) == count - 1  # one fewer passes


async def test_the_widest_fallback_space_counts_toward_max_values(
    embedding_fakes: EmbeddingServer,
) -> None:
    spaces = {"a": {"dimensions": 8, "fallback_spaces": ["b"]}, "b": {"dimensions": 64}}
    url = embedding_fakes.url("ok", "a")
    cfg = config(provider("p", url, {"a": "m", "b": "n"}), **spaces)
    cfg["embeddings"]["max_values"] = 100
    with pytest.raises(RequestError, match="2 items of up to 64 dimensions"):
        await embed(cfg, {"model": "a", "input": ["x", "y"]})


@pytest.mark.parametrize(
    ("spaces", "models", "words"),
    [
        (
            {"a": {"dimensions": 8, "aliases": ["b"]}, "b": {"dimensions": 8}},
            {"a": "m", "b": "m"},
            "'b' names space",
        ),
        (
            {"a": {"dimensions": 8}},
            {"z": "m"},
            "providers[0] (p): embeddings.models: no space named 'z'",
        ),
        (
            {"a": {"dimensions": 8}, "b": {"dimensions": 8}},
            {"a": "m"},
            "embeddings.spaces.b: no provider serves it",
        ),
        (
            {"a": {"dimensions": 8, "fallback_spaces": ["a"]}},
            {"a": "m"},
            "fallback_spaces: no other space",
        ),
    ],
)
def test_config_errors_name_the_field(spaces: Any, models: Any, words: str) -> None:
    cfg = config(provider("p", "http://127.0.0.1:1/v1/chat/completions", models), **spaces)
    with pytest.raises(
        ConfigError, match=words.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")
    ):
        config_from_data(cfg)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(n=st.integers(1, 60), batch=st.integers(1, 70))
def test_any_split_gives_back_the_unsplit_answer(
    embedding_fakes: EmbeddingServer, n: int, batch: int
) -> None:
    def answer(max_batch: int | None) -> Any:
        more = {} if max_batch is None else {"max_batch": max_batch}
        cfg = config(
            provider("ok", embedding_fakes.url("ok", "bge-m3"), {"bge-m3": "bge-m3"}, **more)
        )
        return asyncio.run(embed(cfg, {"model": "bge-m3", "input": texts(n)})).response

    assert answer(batch) == answer(None)
