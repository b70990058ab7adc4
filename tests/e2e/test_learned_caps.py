"""Learned output caps through the proxy (issue 40, 1 and 5; protocol §4): a cap is learned only
from a provider's own refusal of the cap it was sent, kept once the clamped resend answered, for
a model the config names, logged once, shown by `status` and `caps`, and forgotten by `caps
--forget` in every process sharing the store. A client's extra field, echoed in a strict
provider's refusal, sets nothing."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ..fakes.upstream import DEEPSEEK_MAX_TOKENS, Upstream, proxy_config
from .test_proxy import BIN, PROVIDER_KEY, Proxy, start, stop

HI = [{"role": "user", "content": "hi"}]


def only(provider: str) -> dict[str, str]:
    return {"X-Agent-Reach-Fallback-Order": provider}


@pytest.fixture
def served(upstream: Upstream, tmp_path: Path) -> Iterator[tuple[Proxy, Path]]:
    providers = [
        upstream.provider("strict", name="chat", models=["deepseek-chat"]),
        upstream.provider("strict", "anthropic", name="claude", models=["claude-x"]),
        upstream.provider("strict", name="open"),  # no models: any name passes as it came
    ]
    config = proxy_config(providers, state=f"sqlite:///{tmp_path}/state.db")
    upstream.clear()
    proxy = start(config, tmp_path, upstream)
    yield proxy, tmp_path
    assert stop(proxy) == 0


def cli(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_REACH")}
    env.update(PROVIDER_KEY=PROVIDER_KEY, HOME=str(tmp))
    return subprocess.run(
        [BIN, "--config", str(tmp / "proxy.yaml"), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def caps(tmp: Path) -> list[dict[str, Any]]:
    done = cli(tmp, "caps", "--json")
    assert done.returncode == 0, done.stderr
    rows: list[dict[str, Any]] = json.loads(done.stdout)
    return rows


def sent_caps(upstream: Upstream) -> list[Any]:
    return [b.get("max_tokens") for b in upstream.bodies("strict")]


def learned_lines(tmp: Path) -> list[str]:
    return [line for line in (tmp / "proxy.log").read_text().splitlines() if "learned" in line]


@pytest.mark.parametrize(
    ("path", "provider", "model", "field"),
    [
        (  # Anthropic: "X: Extra inputs are not permitted"
            "/v1/messages",
            "claude",
            "claude-x",
            "max_tokens: 5000 > 300, which is the maximum allowed number of output tokens for x",
        ),
        ("/v1/chat/completions", "chat", "deepseek-chat", "max_tokens at most 300"),  # OpenAI's
        (
            "/v1/chat/completions",
            "chat",
            "deepseek-chat",
            "the valid range of max_tokens is [1, 300]",
        ),
    ],
)
def test_a_clients_extra_field_sets_no_cap(
    served: tuple[Proxy, Path], upstream: Upstream, path: str, provider: str, model: str, field: str
) -> None:
    proxy, tmp = served
    attack = {"model": model, "max_tokens": 5000, field: 1, "messages": HI}
    status, _ = proxy.post(path, attack, only(provider))
    assert status == 400  # the provider's refusal of the field, passed on
    legit = {"model": model, "max_tokens": 4000, "messages": HI}
    assert proxy.post(path, legit, only(provider))[0] == 200
    assert sent_caps(upstream) == [5000, 4000]  # no resend at 300, and the next one untouched
    assert caps(tmp) == []
    assert learned_lines(tmp) == []


def test_a_cap_is_learned_from_a_real_refusal_shown_and_forgotten(
    served: tuple[Proxy, Path], upstream: Upstream
) -> None:
    proxy, tmp = served
    big = {"model": "deepseek-chat", "max_tokens": 64000, "messages": HI}
    assert proxy.post("/v1/chat/completions", big, only("chat"))[0] == 200
    assert proxy.post("/v1/chat/completions", big, only("chat"))[0] == 200
    assert sent_caps(upstream) == [64000, DEEPSEEK_MAX_TOKENS, DEEPSEEK_MAX_TOKENS]
    [line] = learned_lines(tmp)  # once, with what changed
    assert "learned output cap: chat model deepseek-chat: none → 8192 tokens" in line
    [row] = caps(tmp)
    assert (row["provider"], row["model"], row["tokens"]) == ("chat", "deepseek-chat", 8192)
    assert 86000 < row["expires_in_s"] <= 86400
    shown = json.loads(cli(tmp, "status", "--json").stdout)
    learned = {r["provider"]: r["learned_caps"] for r in shown}
    [kept] = learned["chat"]
    assert (kept["model"], kept["tokens"]) == ("deepseek-chat", 8192)
    assert 86000 < kept["expires_in_s"] <= 86400
    assert learned["claude"] == []

    done = cli(tmp, "caps", "--forget")
    assert (done.returncode, done.stderr.strip()) == (0, "forgot 1 learned output cap")
    assert caps(tmp) == []
    time.sleep(1.2)  # the proxy re-reads the store (in the background) a second after it last
    assert proxy.post("/v1/chat/completions", big, only("chat"))[0] == 200  # did, on this read
    time.sleep(0.3)
    upstream.clear()
    assert proxy.post("/v1/chat/completions", big, only("chat"))[0] == 200
    assert sent_caps(upstream) == [64000, DEEPSEEK_MAX_TOKENS]  # learned anew


def test_a_learned_cap_is_never_kept_for_a_clients_own_model_name(
    served: tuple[Proxy, Path], upstream: Upstream
) -> None:
    """Issue 40, 5: a provider with no `models` and no `"*"` map passes any model name on; a
    refusal of the cap is answered by one resend, and nothing is kept for those names."""
    proxy, tmp = served
    for i in range(100):
        name = f"m{i}-" + "x" * 20_000
        body = {"model": name, "max_tokens": 64000, "messages": HI}
        status, _ = proxy.post("/v1/chat/completions", body, only("open"))
        assert status == 200
    assert sent_caps(upstream)[:4] == [64000, DEEPSEEK_MAX_TOKENS] * 2
    assert caps(tmp) == []
    assert learned_lines(tmp) == []
    assert (tmp / "state.db").stat().st_size < 1_000_000


def test_the_config_named_model_map_target_is_the_providers_own(
    upstream: Upstream, tmp_path: Path
) -> None:
    """A `"*"` map: whatever the client names, the provider is asked for its own model, and the
    cap is kept for that model."""
    provider = upstream.provider("strict", name="mapped", model_map={"*": "deepseek-chat"})
    config = proxy_config([provider], state=f"sqlite:///{tmp_path}/state.db")
    upstream.clear()
    proxy = start(config, tmp_path, upstream)
    try:
        for name in ("a", "b"):
            body = {"model": name, "max_tokens": 64000, "messages": HI}
            assert proxy.post("/v1/chat/completions", body)[0] == 200
    finally:
        assert stop(proxy) == 0
    assert sent_caps(upstream) == [64000, DEEPSEEK_MAX_TOKENS, DEEPSEEK_MAX_TOKENS]
    assert [(r["model"], r["tokens"]) for r in caps(tmp_path)] == [("deepseek-chat", 8192)]
