"""The proxy refuses only what the published API schemas refuse (types, enums, declared
ranges) and leaves value judgments the schema does not make to the provider: openai-python's
own "all params" tests send `max_completion_tokens: 0`, which the OpenAPI mock accepts."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from ..upstream import Upstream
from .test_proxy import MSG, Proxy, base_config, chain, start, stop


@pytest.fixture(scope="module")
def proxy(upstream: Upstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    p = start(base_config(upstream), tmp_path_factory.mktemp("conformance"), upstream)
    yield p
    assert stop(p) == 0


@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens"])
@pytest.mark.parametrize("value", [0, -1, 2**40])
def test_an_output_cap_the_schema_allows_reaches_the_provider(
    proxy: Proxy, field: str, value: int
) -> None:
    proxy.upstream.clear()
    answer = proxy.client().chat.completions.create(
        model="m", messages=MSG, **{field: value}, **chain("ok")
    )
    assert answer.choices[0].message.content == "hello from ok"
    assert proxy.upstream.bodies("ok")[-1]["max_tokens"] == value  # its own field


def test_what_the_schema_refuses_is_still_a_400(proxy: Proxy) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        proxy.client().chat.completions.create(
            model="m",
            messages=MSG,
            max_completion_tokens=1.5,
            **chain("ok"),  # type: ignore[arg-type]
        )
    assert refused.value.body["param"] == "max_completion_tokens"  # type: ignore[index]
