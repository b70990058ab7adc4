"""A client's words never open a provider's circuit (issue 47, High 1; protocol §5): providers
quote the request's own field and model names in their 400s and 404s, so a field named
`api_key` or a model named `nomodel-author-7b` is the client's own `bad_request` or
`model_unavailable`, and the next client's request is answered by the same provider. A real 401
still opens the circuit."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ..fakes.upstream import NO_MODEL, Upstream, proxy_config
from .test_proxy import Proxy, start, stop

HI = [{"role": "user", "content": "hi"}]
CIRCUIT = {"failures": 3, "cooldown_s": 30, "auth_cooldown_s": 300}  # the defaults


def served(upstream: Upstream, tmp: Path, *first: dict[str, object]) -> Proxy:
    providers = [*first, upstream.provider("strict", name="echo"), upstream.provider("ok")]
    config = proxy_config(providers, circuit=CIRCUIT, state=f"sqlite:///{tmp}/state.db")
    upstream.clear()
    return start(config, tmp, upstream)


@pytest.fixture
def proxy(upstream: Upstream, tmp_path: Path) -> Iterator[Proxy]:
    proxy = served(upstream, tmp_path)
    yield proxy
    assert stop(proxy) == 0


def answered_by(proxy: Proxy, model: str = "m") -> tuple[str, str]:
    """Who answered a plain request, and its trace."""
    raw = proxy.client().chat.completions.with_raw_response.create(model=model, messages=HI)
    return raw.headers["x-agent-reach-provider"], raw.headers["x-agent-reach-trace"]


@pytest.mark.parametrize("field", ["api_key", "authorization", "credentials", "permission"])
def test_a_field_the_provider_echoes_keeps_its_circuit_closed(proxy: Proxy, field: str) -> None:
    attack = proxy.client().chat.completions.with_raw_response
    raw = attack.create(model="m", messages=HI, extra_body={field: "x"})
    assert raw.headers["x-agent-reach-trace"].startswith("echo:bad_request:")  # then the next
    assert proxy.upstream.bodies("strict")[0][field] == "x"
    for _ in range(3):  # the next clients' requests: the same provider, circuit closed
        who, trace = answered_by(proxy)
        assert (who, trace.split(":")[:2]) == ("echo", ["echo", "ok"])


def test_a_model_name_the_404_quotes_keeps_its_circuit_closed(proxy: Proxy) -> None:
    who, trace = answered_by(proxy, f"{NO_MODEL}-author-7b")
    assert who == "ok"  # the next provider serves it
    assert trace.startswith("echo:model_unavailable:")
    for _ in range(3):
        assert answered_by(proxy)[0] == "echo"


def test_a_real_401_still_opens_the_circuit(upstream: Upstream, tmp_path: Path) -> None:
    badkey = upstream.provider("keyed", name="badkey")  # the test's key is not the one it takes
    proxy = served(upstream, tmp_path, badkey)
    try:
        who, trace = answered_by(proxy)
        assert (who, trace.split(",")[0].split(":")[:2]) == ("echo", ["badkey", "auth_failed"])
        who, trace = answered_by(proxy)
        assert (who, trace.split(",")[0].split(":")[:2]) == ("echo", ["badkey", "circuit_open"])
    finally:
        assert stop(proxy) == 0
