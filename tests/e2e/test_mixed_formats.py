"""One config mixing all seven formats: a request fails over across them, via the CLI."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from ..fakes.dialects import KEY, DialectServer, answer, running
from ..fakes.upstream import refused_url
from .test_cli import run

FORMATS = ["openai", "ollama", "dashscope", "minimax", "ernie", "anthropic", "gemini"]


@pytest.fixture(scope="module")
def srv() -> Iterator[DialectServer]:
    with running() as server:
        yield server


def working(srv: DialectServer, fmt: str) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "openai": {"endpoint": srv.url("/openai/v1/chat/completions"), "models": ["gpt-4o-mini"]},
        "ollama": {"endpoint": srv.url("/ollama/api/chat"), "models": ["llama3.2:latest"]},
        "dashscope": {
            "endpoint": srv.url("/dashscope/api/v1/services/aigc/text-generation/generation"),
            "models": ["qwen-plus"],
        },
        "minimax": {
            "endpoint": srv.url("/minimax/v1/text/chatcompletion_v2"),
            "models": ["MiniMax-Text-01"],
        },
        "ernie": {
            "endpoint": srv.url("/ernie/rpc/2.0/ai_custom/v1/wenxinworkshop/chat/completions_pro"),
            "auth_query": "access_token",
        },
        "anthropic": {"endpoint": srv.url("/anthropic/v1/messages"), "models": ["claude-x"]},
        "gemini": {"endpoint": srv.url("/gemini/v1beta/models"), "models": ["gemini-2.0-flash"]},
    }[fmt]
    return {"name": f"{fmt}-good", "format": fmt, "api_key_env": "GOOD_KEY", **entry}


def broken(srv: DialectServer, fmt: str) -> tuple[dict[str, Any], str]:
    """A provider of `fmt` that fails, and the reason it fails with."""
    good = working(srv, fmt)
    if fmt in ("ernie", "anthropic", "gemini"):  # a wrong key, refused in the format's own way
        return {**good, "name": f"{fmt}-bad", "api_key_env": "BAD_KEY"}, "auth_failed"
    if fmt == "openai":
        return {**good, "name": "openai-bad", "endpoint": refused_url()}, "connect_failed"
    return {**good, "name": f"{fmt}-bad", "endpoint": good["endpoint"] + "-gone"}, "bad_request"


@pytest.mark.parametrize("target", FORMATS)
def test_failover_across_every_format_to_each_one(
    srv: DialectServer, tmp_path: Path, target: str
) -> None:
    failing = [broken(srv, fmt) for fmt in FORMATS if fmt != target]
    providers = [p for p, _ in failing] + [working(srv, target)]
    cfg = tmp_path / "mixed.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "version": "0.3.2",
                "health": {"mode": "off"},
                "state": "memory://",
                "fallback_order": [p["name"] for p in providers],
                "providers": providers,
            }
        )
    )
    env = {"GOOD_KEY": KEY, "BAD_KEY": "sk-wrong"}
    result = run("chat", "--json", "-p", "hi", config=cfg, env=env)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["provider"] == f"{target}-good"
    assert out["response"]["choices"][0]["message"]["content"] == answer(target)
    got = [(a["provider"], a["reason"]) for a in out["trace"]]
    expected = [(p["name"], reason) for p, reason in failing] + [(f"{target}-good", "ok")]
    assert got == expected
    streamed = run("chat", "--stream", "-v", "-p", "hi", config=cfg, env=env)
    assert streamed.returncode == 0, streamed.stderr
    assert streamed.stdout == f"{answer(target)}\n"
    assert streamed.stderr.splitlines()[-1].startswith(f"Fallback to {target}-good, success!")
    assert KEY not in result.stdout + streamed.stdout + streamed.stderr
