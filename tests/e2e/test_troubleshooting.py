"""The troubleshooting page as a newcomer meets it: each message it shows is what the CLI prints
for the mistake it names (times, paths and ports aside), from a fresh HOME."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import yaml

from ..fakes.upstream import Upstream, refused_url
from ..readme import ROOT, code_blocks
from .test_cli import BIN

PAGE = ROOT / "docs" / "troubleshooting.md"


def _shown() -> list[str]:
    blocks = [body for lang, body in code_blocks(PAGE.read_text(encoding="utf-8")) if not lang]
    assert len(blocks) == 5
    return blocks


def _same(shown: str, got: str) -> None:
    def plain(text: str) -> list[str]:
        text = re.sub(r"\(\d+ ms\)", "(N ms)", text)
        text = re.sub(r"\((\d+), \d+ ms\)", r"(\1, N ms)", text)
        return [line.rstrip() for line in text.strip().splitlines()]

    assert plain(got) == plain(shown)


def _run(home: Path, *args: str, cwd: Path, **env: str) -> str:
    full = {k: v for k, v in os.environ.items() if not k.startswith(("AGENT_REACH", "DEEPSEEK"))}
    full.update(HOME=str(home), **env)
    done = subprocess.run(
        [BIN, *args], cwd=cwd, env=full, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode in (1, 2), done.stderr
    assert "Traceback" not in done.stderr
    return done.stderr


def _config(path: Path, *providers: dict[str, object]) -> Path:
    path.write_text(yaml.safe_dump({"version": "0.3.2", "providers": list(providers)}))
    return path


def test_each_message_on_the_page_is_the_clis(up: Upstream, tmp_path: Path) -> None:
    no_config, base_url, no_model, slow, keys = _shown()
    home = tmp_path / "home"
    home.mkdir()

    got = _run(home, "chat", "-p", "hi", cwd=tmp_path)
    _same(no_config, got.replace(str(home), "/home/me"))

    ds = {
        "name": "ds",
        "endpoint": "https://api.deepseek.com/v1",
        "api_key_env": "DEEPSEEK_API_KEY",
    }
    _config(tmp_path / "base.yaml", ds)
    _same(base_url, _run(home, "--config", "base.yaml", "chat", "-p", "hi", cwd=tmp_path))

    ds = {**ds, "endpoint": refused_url(), "models": ["deepseek-chat"]}
    config = _config(tmp_path / "m.yaml", ds)
    got = _run(
        home, "--config", str(config), "chat", "-m", "claude-sonnet-4-5", "-p", "hi", cwd=tmp_path
    )
    _same(no_model, got)

    hanging = {"name": "slow", "endpoint": up.url("hang"), "health_check": "", "models": ["m"]}
    config = _config(tmp_path / "s.yaml", hanging)
    _same(slow, _run(home, "--config", str(config), "chat", "-p", "hi", cwd=tmp_path))

    providers = [
        {"name": "deepseek-official", "endpoint": refused_url(), "api_key_env": "DEEPSEEK_API_KEY"},
        {"name": "zhipu-api", "endpoint": up.url("auth"), "api_key_env": "ZHIPU_API_KEY"},
    ]
    for provider in providers:
        provider.update(health_check="", models=["m"], retries=0)
    config = _config(tmp_path / "k.yaml", *providers)
    got = _run(
        home, "--config", str(config), "chat", "-p", "hi", cwd=tmp_path, ZHIPU_API_KEY="sk-wrong"
    )
    assert got.startswith("agent-reach: all providers failed\n")
    _same(keys, got.split("\n", 1)[1])
