"""Prompt caching through the proxy (issue 19, item 5): a Claude Code-shaped 5-turn agent session
(a long system prompt, many tools, a tool call every turn) against a chat provider that caches
by byte prefix and reports its hits in DeepSeek's words (`prompt_cache_hit_tokens`). From the
second turn on, most of each request is a prefix the provider has seen, and each client API
reports that in its own usage field, read here through its official SDK."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import pytest

from ..fakes.upstream import Upstream, proxy_config
from .test_proxy import Proxy, start, stop

MODEL = "claude-sonnet-4-5"
TURNS = 5
SYSTEM = (
    "You are an interactive agent that helps users with software engineering tasks. "
    "Use the instructions below and the tools available to you to assist the user. " * 40
)
TOOLS = [
    (
        name,
        f"{name}: " + f"Runs the {name} step of a coding session, with care and in order. " * 25,
        {
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": f"What {name} should do."},
                "timeout": {"type": "number", "description": "Milliseconds to wait at most."},
            },
            "required": ["command"],
        },
    )
    for name in ("Bash", "Read", "Edit", "Write", "Grep", "Glob", "WebFetch", "TodoWrite")
]
PROMPT = "Find the failing test in this repository and fix it."


def result_of(turn: int) -> str:
    return f"output of step {turn}: " + "test_x.py::test_y FAILED\n" * 6


@pytest.fixture
def proxy(up: Upstream, tmp_path: Any) -> Iterator[Proxy]:
    config = proxy_config([up.provider("caching", model_map={"*": "deepseek-chat"})])
    p = start(config, tmp_path, up)
    yield p
    stop(p)


def messages_session(proxy: Proxy) -> list[float]:
    """Claude Code's way: Messages, streamed, system blocks marked for caching."""
    client = anthropic.Anthropic(base_url=proxy.base, api_key="unused", max_retries=0)
    system: Any = [
        {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.197; cch=1;"},
        {"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}},
    ]
    tools: Any = [{"name": n, "description": d, "input_schema": s} for n, d, s in TOOLS]
    messages: list[Any] = [{"role": "user", "content": [{"type": "text", "text": PROMPT}]}]
    shares = []
    try:
        for turn in range(TURNS):
            with client.messages.stream(
                model=MODEL, max_tokens=32000, system=system, tools=tools, messages=messages
            ) as stream:
                answer = stream.get_final_message()
            usage = answer.usage
            cached = usage.cache_read_input_tokens or 0
            total = usage.input_tokens + cached + (usage.cache_creation_input_tokens or 0)
            shares.append(cached / total)
            blocks: list[Any] = []
            for b in answer.content:
                if b.type == "text":
                    blocks.append({"type": "text", "text": b.text})
                elif b.type == "tool_use":
                    blocks.append(
                        {"type": "tool_use", "id": b.id, "name": b.name, "input": b.input}
                    )
            messages.append({"role": "assistant", "content": blocks})
            calls = [b["id"] for b in blocks if b["type"] == "tool_use"]
            results = [
                {"type": "tool_result", "tool_use_id": c, "content": result_of(turn)} for c in calls
            ]
            messages.append({"role": "user", "content": results or "go on"})
    finally:
        client.close()
    return shares


def chat_session(proxy: Proxy) -> list[float]:
    client = proxy.client()
    tools: Any = [
        {"type": "function", "function": {"name": n, "description": d, "parameters": s}}
        for n, d, s in TOOLS
    ]
    messages: list[Any] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": PROMPT},
    ]
    shares = []
    for turn in range(TURNS):
        answer = client.chat.completions.create(model=MODEL, messages=messages, tools=tools)
        usage = answer.usage
        assert usage is not None
        assert usage.prompt_tokens_details is not None
        shares.append((usage.prompt_tokens_details.cached_tokens or 0) / usage.prompt_tokens)
        message = answer.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls or ():
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result_of(turn)})
    return shares


def responses_session(proxy: Proxy) -> list[float]:
    client = proxy.client()
    tools: Any = [
        {"type": "function", "name": n, "description": d, "parameters": s, "strict": False}
        for n, d, s in TOOLS
    ]
    items: list[Any] = [{"role": "user", "content": PROMPT}]
    shares = []
    for turn in range(TURNS):
        answer = client.responses.create(
            model=MODEL, instructions=SYSTEM, input=items, tools=tools, store=False
        )
        usage = answer.usage
        assert usage is not None
        shares.append(usage.input_tokens_details.cached_tokens / usage.input_tokens)
        for item in answer.output:
            items.append(item.model_dump(exclude_none=True))
            if item.type == "function_call":
                items.append(
                    {
                        "type": "function_call_output",
                        "call_id": item.call_id,
                        "output": result_of(turn),
                    }
                )
    return shares


@pytest.mark.parametrize(
    "session",
    [messages_session, chat_session, responses_session],
    ids=["messages", "chat", "responses"],
)
def test_turns_after_the_first_are_mostly_cached(
    proxy: Proxy, up: Upstream, session: Callable[[Proxy], list[float]]
) -> None:
    shares = session(proxy)
    assert len(up.bodies("caching")) == TURNS
    assert shares[0] < 0.5  # nothing was cached before the first turn
    assert all(share >= 0.9 for share in shares[1:]), shares
