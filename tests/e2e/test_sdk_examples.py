"""The proxy page's examples of each API's official client, run as written against a proxy
whose one provider speaks chat completions (only the proxy's address is changed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from ..fakes.upstream import Upstream
from ..readme import ROOT, code_blocks, section
from .test_proxy import start, stop


def test_the_official_clients_as_the_proxy_page_shows_them(up: Upstream, tmp_path: Path) -> None:
    text = section((ROOT / "docs" / "proxy.md").read_text(encoding="utf-8"), "The official clients")
    examples = [body for lang, body in code_blocks(text) if lang == "python"]
    assert len(examples) == 3
    provider = {"name": "deepseek", "endpoint": up.url("ok"), "models": ["deepseek-chat"]}
    provider["health_check"] = ""  # the fake lists no models
    proxy = start({"version": "0.3.2", "providers": [provider]}, tmp_path, up)
    try:
        for example in examples:
            assert "http://127.0.0.1:8000" in example
            # a program of its own, as a user runs it (its clients' sockets die with it)
            done = subprocess.run(
                [sys.executable, "-c", example.replace("http://127.0.0.1:8000", proxy.base)],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            assert done.returncode == 0, done.stderr[-3000:]
            answers = done.stdout.splitlines()
            assert answers, example
            assert all(answer.strip() for answer in answers), (example, answers)
    finally:
        assert stop(proxy) == 0
    # every call reached the one provider, through the proxy, as a chat completion
    assert len([r for r in up.received if r.scenario == "ok"]) == 4
