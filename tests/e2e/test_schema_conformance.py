"""The proxy refuses only what the published API schemas refuse (types, enums, declared
ranges) and leaves value judgments the schema does not make to the provider: openai-python's
own "all params" tests send `max_completion_tokens: 0`, which the OpenAPI mock accepts."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from ..conftest import COMPLETION, RESPONSE, assert_valid
from ..fakes.upstream import Upstream
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


SDK_REQUESTS = json.loads((Path(__file__).parent.parent / "data" / "sdk_requests.json").read_text())
CASES = [
    (path, name, body)
    for path, tests in SDK_REQUESTS.items()
    if path.startswith("/")
    for name, body in tests.items()
]


@pytest.mark.parametrize(("path", "name", "body"), CASES, ids=[f"{p}:{n}" for p, n, _ in CASES])
def test_the_official_sdks_own_create_requests_are_served(
    proxy: Proxy, path: str, name: str, body: dict[str, Any]
) -> None:
    """openai-python's and anthropic-sdk-python's own `create` tests (every parameter they
    send, streamed and not), through the proxy to a chat provider: answered, not refused."""
    headers = {"X-Agent-Reach-Fallback-Order": "ok", "anthropic-version": "2023-06-01"}
    if "previous_response_id" in body:  # one this proxy has stored, for the placeholder
        _, first = proxy.post(path, {"model": "m", "input": "first"}, headers)
        body = {**body, "previous_response_id": first["id"]}
    if body.get("stream"):
        req = urllib.request.Request(
            proxy.base + path,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json", **headers},
        )
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert resp.status == 200
            text = resp.read().decode()
        assert "event: error" not in text
        assert "response.failed" not in text
        assert text.rstrip().endswith(
            {"/v1/chat/completions": "data: [DONE]", "/v1/responses": "}"}.get(path, "}")
        )
        assert ("response.completed" in text) or path != "/v1/responses"
        assert ("message_stop" in text) or path != "/v1/messages"
        return
    status, answer = proxy.post(path, body, headers)
    assert status == 200, answer
    if path == "/v1/chat/completions":
        assert_valid(COMPLETION, answer)
    elif path == "/v1/responses":
        assert_valid(RESPONSE, answer)
    else:
        anthropic.types.Message.model_validate(answer)


def test_a_huge_model_name_comes_back_capped(proxy: Proxy) -> None:
    proxy.upstream.clear()
    body = {"model": "m" * 15_000, "messages": MSG}  # within max_body_bytes (20000)
    status, answer = proxy.post(
        "/v1/chat/completions", body, {"X-Agent-Reach-Fallback-Order": "ollama"}
    )
    assert status in (404, 502), answer
    assert len(json.dumps(answer)) < 5000  # the name quoted at ~200 characters, not in full
