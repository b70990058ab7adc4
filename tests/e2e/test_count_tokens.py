"""`count_tokens` through the proxy (issue 19, item 7): with no native Anthropic provider on the
route, the proxy estimates; the estimate is held to the input tokens a provider reports for the
same request, here one that counts with DeepSeek V4's tokenizer (tests/upstream.py
`deepseek_tokens`), over tests/token_corpus.py (bench/count_tokens.py prints the figures)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from ..token_corpus import corpus
from ..upstream import Upstream, proxy_config
from .test_proxy import Proxy, start, stop

CORPUS = corpus()


@pytest.fixture(scope="module")
def proxy(upstream: Upstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    p = start(proxy_config([upstream.provider("tokens")]), tmp_path_factory.mktemp("t"), upstream)
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
