"""Messages requests to measure `count_tokens` by (tests/e2e/test_count_tokens.py and
bench/count_tokens.py): what Claude Code sends, in its kinds of text. Built from files of this
repository (English docs, Python, YAML, JSON schemas, the Chinese README), so the corpus is
real text and nothing large is stored twice."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MODEL = "claude-sonnet-4-5"


def _read(path: str, start: int = 0, size: int = 12000) -> str:
    return (ROOT / path).read_text(encoding="utf-8")[start : start + size]


def _tools() -> list[dict[str, Any]]:
    """Claude Code-like tools: long descriptions and JSON schemas."""
    guide = _read("docs/architecture.md", 0, 40000).split("\n\n")
    names = ["Bash", "Read", "Edit", "Write", "Grep", "Glob", "WebFetch", "TodoWrite", "Task"]
    return [
        {
            "name": name,
            "description": "\n\n".join(guide[i * 3 : i * 3 + 3]),
            "input_schema": {
                "type": "object",
                "properties": {
                    "command": {"type": "string", "description": f"What {name} should do."},
                    "path": {"type": "string", "description": "An absolute path."},
                    "timeout": {"type": "number", "description": "At most 600000 ms."},
                    "run_in_background": {"type": "boolean"},
                },
                "required": ["command"],
                "additionalProperties": False,
                "$schema": "http://json-schema.org/draft-07/schema#",
            },
        }
        for i, name in enumerate(names)
    ]


def _log(lines: int) -> str:
    return "\n".join(
        f"2026-12-01T17:{i % 60:02d}:{(i * 7) % 60:02d}.{i * 37 % 1000:03d}Z INFO req={i * 7919}"
        f" provider=deepseek status={200 if i % 5 else 429} ms={i * 13 % 997}.{i % 10}"
        for i in range(lines)
    )


def _session() -> list[dict[str, Any]]:
    """An agent's turns: a task, tool calls with their inputs, results with code and logs."""
    code = _read("src/agent_reach/core/routing.py", 0, 6000)
    return [
        {"role": "user", "content": [{"type": "text", "text": "Why does test_walk fail? Fix it."}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Let me look at the routing module first."},
                {
                    "type": "tool_use",
                    "id": "toolu_01",
                    "name": "Read",
                    "input": {"command": "read", "path": "/work/src/agent_reach/routing.py"},
                },
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_01", "content": code}],
        },
        {
            "role": "assistant",
            "content": [
                {
                    "type": "tool_use",
                    "id": "toolu_02",
                    "name": "Bash",
                    "input": {"command": "pytest tests/test_core.py -q -x", "timeout": 120000},
                }
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_02", "content": _log(60)},
                {
                    "type": "text",
                    "text": "<system-reminder>Keep the answer short.</system-reminder>",
                },
            ],
        },
    ]


def corpus() -> dict[str, dict[str, Any]]:
    """Name → a Messages request."""
    system = [{"type": "text", "text": _read("docs/protocol.md", 0, 9000)}]
    schemas = json.dumps(json.loads(_read("tests/data/openai-chat-schemas.json", 0, 10**6)))
    requests: dict[str, dict[str, Any]] = {
        "hello": {"messages": [{"role": "user", "content": "hi"}]},
        "english prose": {"messages": [{"role": "user", "content": _read("README.md", 2000)}]},
        "python": {
            "messages": [
                {"role": "user", "content": _read("src/agent_reach/engine/loop.py", 0, 9000)}
            ]
        },
        "chinese prose": {
            "messages": [{"role": "user", "content": _read("README.zh-CN.md", 1200, 4000)}]
        },
        "yaml and logs": {
            "messages": [
                {"role": "user", "content": _read("examples/config.yaml") + "\n" + _log(120)}
            ]
        },
        "json schemas": {"messages": [{"role": "user", "content": schemas[:12000]}]},
        "tools only": {"tools": _tools(), "messages": [{"role": "user", "content": "hi"}]},
        "agent session": {"system": system, "tools": _tools(), "messages": _session()},
        "chinese and code": {
            "system": "你是一个编程助手。",
            "messages": [
                {"role": "user", "content": _read("README.zh-CN.md", 9000, 3000)},
                {"role": "assistant", "content": "好的，我先看一下代码。"},
                {"role": "user", "content": _read("src/agent_reach/core/breaker.py", 0, 5000)},
            ],
        },
    }
    return {name: {"model": MODEL, "max_tokens": 1024, **r} for name, r in requests.items()}
