"""Cache-stable translation (issue 19, item 5): providers cache a conversation by its prefix, so a
translated body must start with the same bytes turn after turn. Hypothesis generates agent
conversations (a system prompt, tools, turns of text, tool calls and tool results), renders them
in each client API, and checks for every direction that the upstream body of a conversation is a
byte prefix of the body of the same conversation with one more turn, up to its last message."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_reach.chat.request import ChatRequest
from agent_reach.config import Provider
from agent_reach.dialects import Context, Shape, get
from agent_reach.dialects.anthropic.answer import message_usage
from agent_reach.dialects.anthropic.request import decode_request as anthropic_decode_request
from agent_reach.dialects.responses.answer import response_usage
from agent_reach.dialects.responses.request import decode_request
from agent_reach.engine.prepared import PreparedProvider

MODEL = "claude-sonnet-4-5"
MARK = {"type": "ephemeral"}


@dataclass(frozen=True)
class Call:
    id: str
    name: str
    arguments: dict[str, str]
    result: str


@dataclass(frozen=True)
class Turn:
    """The assistant's reply (text, tool calls), then what the user side sends next: the calls'
    results and, maybe, a text."""

    text: str
    calls: tuple[Call, ...]
    user: str


@dataclass(frozen=True)
class Conversation:
    system: str
    tools: tuple[str, ...]
    first: str
    turns: tuple[Turn, ...]

    def upto(self, n: int) -> Conversation:
        return Conversation(self.system, self.tools, self.first, self.turns[:n])


# -- the conversation in each client API -----------------------------------------------------


def _schema(name: str) -> dict[str, Any]:
    return {"type": "object", "properties": {name: {"type": "string"}}, "required": [name]}


def as_messages(c: Conversation) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": c.first}]
    for t in c.turns:
        blocks: list[dict[str, Any]] = [{"type": "text", "text": t.text}] if t.text else []
        blocks += [
            {"type": "tool_use", "id": k.id, "name": k.name, "input": k.arguments} for k in t.calls
        ]
        messages.append({"role": "assistant", "content": blocks or "…"})
        user: list[dict[str, Any]] = [
            {"type": "tool_result", "tool_use_id": k.id, "content": k.result} for k in t.calls
        ]
        if t.user or not user:
            user.append({"type": "text", "text": t.user or "go on"})
        messages.append({"role": "user", "content": user})
    # Claude Code marks the newest block for caching: the mark moves every turn.
    last = messages[-1]["content"]
    if isinstance(last, str):
        last = [{"type": "text", "text": last}]
    messages[-1] = {**messages[-1], "content": [*last[:-1], {**last[-1], "cache_control": MARK}]}
    return {
        "model": MODEL,
        "max_tokens": 32000,
        "system": [{"type": "text", "text": c.system, "cache_control": MARK}],
        "messages": messages,
        "tools": [
            {"name": n, "description": f"The {n} tool", "input_schema": _schema(n)} for n in c.tools
        ],
        "metadata": {"user_id": "user_1"},
        "stream": True,
    }


def as_responses(c: Conversation) -> dict[str, Any]:
    items: list[dict[str, Any]] = [{"type": "message", "role": "user", "content": c.first}]
    for t in c.turns:
        if t.text or not t.calls:
            text = t.text or "…"
            part = {"type": "output_text", "text": text}
            items.append({"type": "message", "role": "assistant", "content": [part]})
        for k in t.calls:
            args = orjson.dumps(k.arguments).decode()
            items.append(
                {"type": "function_call", "call_id": k.id, "name": k.name, "arguments": args}
            )
        for k in t.calls:
            items.append({"type": "function_call_output", "call_id": k.id, "output": k.result})
        if t.user or not t.calls:
            part = {"type": "input_text", "text": t.user or "go on"}
            items.append({"type": "message", "role": "user", "content": [part]})
    return {
        "model": MODEL,
        "instructions": c.system,
        "input": items,
        "tools": [
            {
                "type": "function",
                "name": n,
                "description": f"The {n} tool",
                "parameters": _schema(n),
            }
            for n in c.tools
        ],
        "store": False,
        "stream": True,
    }


def as_chat(c: Conversation) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": c.system},
        {"role": "user", "content": c.first},
    ]
    for t in c.turns:
        message: dict[str, Any] = {"role": "assistant", "content": t.text or None}
        if t.calls:
            message["tool_calls"] = [
                {
                    "id": k.id,
                    "type": "function",
                    "function": {"name": k.name, "arguments": orjson.dumps(k.arguments).decode()},
                }
                for k in t.calls
            ]
        else:
            message["content"] = t.text or "…"
        messages.append(message)
        messages += [{"role": "tool", "tool_call_id": k.id, "content": k.result} for k in t.calls]
        if t.user or not t.calls:
            messages.append({"role": "user", "content": t.user or "go on"})
    return {
        "model": MODEL,
        "messages": messages,
        "tools": [
            {
                "type": "function",
                "function": {"name": n, "description": f"The {n} tool", "parameters": _schema(n)},
            }
            for n in c.tools
        ],
        "max_tokens": 32000,
        "stream": True,
    }


# -- the directions: client API → the engine's chat request → a provider's body ----------------


def _provider(fmt: str) -> PreparedProvider:
    return PreparedProvider.prepare(
        Provider(name=fmt, endpoint="http://127.0.0.1:9/v1/x", format=fmt), {}
    )


_PROVIDERS = {fmt: _provider(fmt) for fmt in ("openai", "anthropic", "responses")}


def _from_messages(c: Conversation) -> ChatRequest:
    return ChatRequest.checked(anthropic_decode_request(as_messages(c)).body)


def _from_responses(c: Conversation) -> ChatRequest:
    return ChatRequest.checked(decode_request(as_responses(c)).body)


def _from_chat(c: Conversation) -> ChatRequest:
    return ChatRequest.parse(as_chat(c))


# (name, how the client's request is read, the provider format it goes to)
DIRECTIONS: list[tuple[str, Callable[[Conversation], ChatRequest], str]] = [
    ("Messages → chat", _from_messages, "openai"),
    ("Responses → chat", _from_responses, "openai"),
    ("chat → Messages", _from_chat, "anthropic"),
    ("Responses → Messages", _from_responses, "anthropic"),
    ("Messages → Responses", _from_messages, "responses"),
    ("chat → Responses", _from_chat, "responses"),
    ("chat → chat", _from_chat, "openai"),
]
_CONVERSATION_KEY = {"openai": "messages", "anthropic": "messages", "responses": "input"}


def upstream(direction: int, c: Conversation) -> bytes:
    """The body the provider of `direction` is sent for conversation `c`."""
    _, read, fmt = DIRECTIONS[direction]
    return _PROVIDERS[fmt].body(read(c), MODEL, True)


def through_last_message(direction: int, body: bytes) -> bytes:
    """`body` up to the end of its last message (the conversation array left open)."""
    fmt = DIRECTIONS[direction][2]
    turns = orjson.dumps(orjson.loads(body)[_CONVERSATION_KEY[fmt]])
    end = body.index(turns) + len(turns) - 1
    return body[:end]


# -- generated conversations ---------------------------------------------------------------

_words = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
_text = _words.filter(lambda s: s.strip() != "")
_names = st.sampled_from(["Bash", "Read", "Edit", "Grep", "clock__now"])
_ids = st.text("abcdefghijklmnopqrstuvwxyz0123456789_", min_size=4, max_size=10)


@st.composite
def conversations(draw: st.DrawFn) -> Conversation:
    turns = []
    for n in range(draw(st.integers(1, 4))):
        calls = tuple(
            Call(f"call_{n}_{i}_{draw(_ids)}", draw(_names), {"arg": draw(_words)}, draw(_words))
            for i in range(draw(st.integers(0, 2)))
        )
        turns.append(Turn(draw(st.just("") | _text), calls, draw(st.just("") | _text)))
    return Conversation(draw(_text), tuple(draw(st.sets(_names, max_size=3))), draw(_text), turns)


@settings(max_examples=60, deadline=None)
@given(conversations(), st.sampled_from(range(len(DIRECTIONS))))
def test_one_more_turn_keeps_the_bytes_before_it(c: Conversation, direction: int) -> None:
    """The body of a conversation up to its last message is a byte prefix of the body with
    one more turn appended, and translating it twice gives the same bytes."""
    shorter = upstream(direction, c.upto(len(c.turns) - 1))
    longer = upstream(direction, c)
    assert upstream(direction, c) == longer, DIRECTIONS[direction][0]
    prefix = through_last_message(direction, shorter)
    assert longer.startswith(prefix), DIRECTIONS[direction][0]
    # What does not change from turn to turn (system prompt, tools) comes before the turns,
    # so a cached prefix covers it; after them only the same few settings.
    assert longer.endswith(shorter[len(prefix) :]), DIRECTIONS[direction][0]
    if c.tools:
        assert longer.index(b'"tools":') < len(prefix), DIRECTIONS[direction][0]


# -- cached tokens in each client API's own usage field ---------------------------------------


def _chat_usage(fmt: str, answer: dict[str, Any]) -> Any:
    dialect = get(fmt)
    ctx = Context("m", 0, Shape(dialect.choices_path, dialect.content_path))
    return dialect.normalize(answer, ctx)["usage"]


def _openai_answer(usage: dict[str, Any]) -> dict[str, Any]:
    message = {"role": "assistant", "content": "hi"}
    return {"choices": [{"index": 0, "message": message, "finish_reason": "stop"}], "usage": usage}


_ANTHROPIC_USAGE = {
    "input_tokens": 10,
    "cache_read_input_tokens": 900,
    "cache_creation_input_tokens": 90,
    "output_tokens": 5,
}
_DEEPSEEK_USAGE = {
    "prompt_tokens": 1000,
    "completion_tokens": 5,
    "total_tokens": 1005,
    "prompt_cache_hit_tokens": 900,
    "prompt_cache_miss_tokens": 100,
}


@pytest.mark.parametrize(
    ("fmt", "answer", "read", "written"),
    [
        ("openai", _openai_answer(_DEEPSEEK_USAGE), 900, 0),  # DeepSeek
        ("openai", _openai_answer({**_DEEPSEEK_USAGE, "cached_tokens": 900}), 900, 0),  # Kimi
        (
            "openai",
            _openai_answer(
                {"prompt_tokens": 1000, "prompt_tokens_details": {"cached_tokens": 900}}
            ),
            900,
            0,
        ),
        (
            "anthropic",
            {"content": [{"type": "text", "text": "hi"}], "usage": _ANTHROPIC_USAGE},
            900,
            90,
        ),
    ],
    ids=["deepseek", "moonshot", "openai", "anthropic"],
)
def test_cached_tokens_reach_every_client_api(
    fmt: str, answer: dict[str, Any], read: int, written: int
) -> None:
    usage = _chat_usage(fmt, answer)
    assert usage["prompt_tokens"] == 1000
    assert usage["prompt_tokens_details"]["cached_tokens"] == read
    messages = message_usage(usage)
    assert messages["cache_read_input_tokens"] == read
    assert messages.get("cache_creation_input_tokens", 0) == written
    assert messages["input_tokens"] == 1000 - read - written
    details = response_usage(usage)["input_tokens_details"]  # type: ignore[index]
    assert details == {"cached_tokens": read, "cache_write_tokens": written}
