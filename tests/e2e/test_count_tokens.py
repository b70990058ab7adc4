"""`count_tokens` through the proxy (issue 19, item 7): the route's first native Anthropic
provider counts; with none (or none that counts), the proxy estimates, and the estimate is held
to the input tokens a provider reports for the same request, here one that counts with DeepSeek
V4's tokenizer (tests/fakes/upstream.py `deepseek_tokens`), over tests/token_corpus.py
(bench/count_tokens.py prints the figures)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from ..fakes.upstream import Upstream, proxy_config
from ..token_corpus import corpus
from .test_proxy import Proxy, start, stop

CORPUS = corpus()


@pytest.fixture(scope="module")
def proxy(upstream: Upstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    providers = [
        upstream.provider("tokens"),
        upstream.provider("claude", "anthropic", model_map={"*": "claude-upstream"}),
        upstream.provider("claudecut", "anthropic"),  # a native provider without count_tokens
    ]
    routes = {"native-*": ["tokens", "claude"], "nocount-*": ["claudecut", "claude"]}
    config = proxy_config(providers, routes=routes, fallback_order=["tokens"])
    p = start(config, tmp_path_factory.mktemp("t"), upstream)
    yield p
    stop(p)


def counted(proxy: Proxy, request: dict[str, Any]) -> tuple[int, int]:
    """(the proxy's estimate, the input tokens the provider reported for the request)."""
    client = anthropic.Anthropic(base_url=proxy.base, api_key="unused", max_retries=0)
    try:
        fields = {k: v for k, v in request.items() if k != "max_tokens"}
        estimate = client.messages.count_tokens(**fields).input_tokens
        answer = client.messages.create(**request)
    finally:
        client.close()
    return estimate, answer.usage.input_tokens


@pytest.mark.parametrize("name", list(CORPUS))
def test_the_estimate_is_within_15_percent_of_the_reported_input(proxy: Proxy, name: str) -> None:
    estimate, reported = counted(proxy, CORPUS[name])
    assert abs(estimate - reported) <= 0.15 * reported, (estimate, reported)


def test_a_native_provider_on_the_route_counts(proxy: Proxy, up: Upstream) -> None:
    client = anthropic.Anthropic(base_url=proxy.base, api_key="unused", max_retries=0)
    request: Any = {
        "model": "native-opus",
        "system": "Be brief.",
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"name": "Bash", "input_schema": {"type": "object"}}],
    }
    try:
        counted = client.messages.with_raw_response.count_tokens(
            **request, extra_headers={"anthropic-beta": "token-counting-2024-11-01"}
        )
        ((sent, headers),) = [(r.body, r.headers) for r in up.received if r.scenario == "claude"]
        assert counted.headers["X-Agent-Reach-Provider"] == "claude"
        assert counted.parse().input_tokens > 1000  # its count, not the estimate
        assert sent == {**request, "model": "claude-upstream"}  # no stream, no max_tokens
        assert headers["anthropic-beta"] == "token-counting-2024-11-01"
        up.clear()
        # the first native provider of the route gives no count: the estimate, nothing else
        estimated = client.messages.with_raw_response.count_tokens(
            **{**request, "model": "nocount-opus"}
        )
        assert "X-Agent-Reach-Provider" not in estimated.headers
        assert estimated.parse().input_tokens < 1000
        assert [r.scenario for r in up.received] == ["claudecut"]
    finally:
        client.close()
