"""Which session a request belongs to (protocol §3.1), from what each agent already sends, so
that its turns keep their provider's prompt cache (`engine.affinity`): an explicit
`X-Agent-Reach-Session`, else the body's `agent_reach.session`; Claude Code's
`X-Claude-Code-Session-Id` or its `metadata.user_id`'s session; Codex's `session-id`;
OpenCode's `x-opencode-session` or `x-session-affinity`; a `prompt_cache_key` (Codex, Qwen
Code); else, for a conversation past its first turn, a hash of its first messages. A subagent
(`x-claude-code-agent-id`, or `cc_is_subagent=true` in Claude Code's billing line) is a session
of its own. The key of its home is scoped by the client key (`chat.request.affinity_key`): a
session id is the client's to choose, and must never steer another key's traffic.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import orjson

from ...chat.request import ChatRequest
from ..http11.wire import Request

HEADERS = (
    "x-agent-reach-session",
    "x-claude-code-session-id",
    "session-id",
    "x-opencode-session",
    "x-session-affinity",
)
SUBAGENT = "x-claude-code-agent-id"
SUBAGENT_MARK = "cc_is_subagent=true"  # in Claude Code's billing line, a subagent's
_SESSION_IN_USER_ID = re.compile(r"_session_([0-9A-Za-z-]+)")


def session_of(request: Request, req: ChatRequest) -> str | None:
    """The request's session id, if it has one."""
    headers = request.headers
    found = (
        headers.get(HEADERS[0])
        or req.named
        or next((v for h in HEADERS[1:] if (v := headers.get(h))), None)
    )
    if found is None:
        found = _in_body(req.native if isinstance(req.native, dict) else req.body, req.body)
    if found is None:
        return None
    agent = headers.get(SUBAGENT) or _subagent(req.native)
    return f"{found}\0{agent}" if agent else found


def _in_body(native: dict[str, Any], chat: dict[str, Any]) -> str | None:
    key = native.get("prompt_cache_key")
    if isinstance(key, str) and key:
        return key
    metadata = native.get("metadata")
    user = metadata.get("user_id") if isinstance(metadata, dict) else None
    if isinstance(user, str) and user:
        return _claude_session(user)
    return _conversation(chat.get("messages"))


def _subagent(native: Any) -> str | None:
    """A Claude Code subagent's own key, from its Messages body when it sends no agent id: its
    billing line says `cc_is_subagent=true`, and the rest of its system prompt (its agent's
    instructions) tells one kind of subagent from another."""
    system = native.get("system") if isinstance(native, dict) else None
    if isinstance(system, str):
        texts = [system]
    elif isinstance(system, list):
        texts = [str(b.get("text", "")) for b in system if isinstance(b, dict)]
    else:
        return None
    if not any(SUBAGENT_MARK in t for t in texts):
        return None
    own = "\n".join(t for t in texts if SUBAGENT_MARK not in t)
    return "subagent:" + hashlib.blake2b(own.encode(), digest_size=8).hexdigest()


def _claude_session(user_id: str) -> str | None:
    """Claude Code's session in its `metadata.user_id`: a JSON object's `session_id` (2.1
    and later), or the id after `_session_` (earlier)."""
    if user_id.startswith("{"):
        try:
            found = orjson.loads(user_id).get("session_id")
        except (orjson.JSONDecodeError, AttributeError):
            return None
        return found if isinstance(found, str) and found else None
    match = _SESSION_IN_USER_ID.search(user_id)
    return match.group(1) if match else None


def _conversation(messages: Any) -> str | None:
    """A conversation past its first turn (it holds an answer): a hash of its system prompt
    and first user message, the same on every later turn. A first turn is none (a one-off
    request has no later turn to keep a cache for)."""
    if not isinstance(messages, list) or not any(
        isinstance(m, dict) and m.get("role") == "assistant" for m in messages
    ):
        return None
    head = []
    for message in messages:
        head.append(message)
        if isinstance(message, dict) and message.get("role") == "user":
            break
    return "conversation:" + hashlib.blake2b(orjson.dumps(head), digest_size=16).hexdigest()
