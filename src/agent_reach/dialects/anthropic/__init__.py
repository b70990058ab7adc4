"""Anthropic's Messages API (`POST https://api.anthropic.com/v1/messages`), both ways: the wire
format of Claude Code.

One module per message kind, each translation beside its inverse: `request` (`encode_request`
for a `format: anthropic` provider, `decode_request` for a client that speaks Messages to the
proxy, protocol §10.1), `schema` (what a Messages request may hold, and the local token
estimate behind `count_tokens`), `answer` (`decode_answer`, `encode_answer`), `stream`
(`AnthropicDecoder`, `StreamEncoder`). This module is the provider format (`Anthropic`):
every request carries `anthropic-version: 2023-06-01`, the key goes in `x-api-key`; error
bodies are `{"type": "error", "error": {"type", "message"}}` (authentication_error → 401,
permission_error → 403, rate_limit_error → 429, api_error → 500, overloaded_error → 529, …).
A provider of this format gets a Messages request natively (`native_body`): as it came,
thinking blocks, `cache_control` and unknown fields kept, Claude Code's `system` turns folded
into `system`, and a `metadata.user_id` only where the endpoint takes it."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from ...core.outcomes import ErrorInfo
from ..artifacts import homed
from ..base import Context, Decoder, Dialect, openai_error
from ..convert import object_at
from .answer import decode_answer
from .request import encode_request, role_of, takes_user_id
from .schema import COUNTED
from .stream import AnthropicDecoder

VERSION = "2023-06-01"

_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}


def _is_unsigned(block: Any) -> bool:
    return (
        isinstance(block, dict) and block.get("type") == "thinking" and not block.get("signature")
    )


def _unsigned(message: Any) -> bool:
    content = message.get("content") if isinstance(message, dict) else None
    return isinstance(content, list) and any(_is_unsigned(b) for b in content)


def _without_unsigned(message: dict[str, Any]) -> dict[str, Any]:
    return {**message, "content": [b for b in message["content"] if not _is_unsigned(b)]}


def _homed(message: Any, origin: str | None) -> Any:
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list):
        return message
    kept = homed(content, origin)
    return message if kept is content else {**message, "content": kept}


def _fold_system(body: dict[str, Any]) -> dict[str, Any]:
    """`body` with the text of its `system` turns appended to its top-level `system`."""
    system = body.get("system")
    blocks: list[Any] = list(system) if isinstance(system, list) else []
    if isinstance(system, str) and system:
        blocks.append({"type": "text", "text": system})
    turns = []
    for m in body["messages"]:
        if role_of(m) != "system":
            turns.append(m)
            continue
        content = m.get("content")
        if isinstance(content, str):
            blocks.append({"type": "text", "text": content})
        elif isinstance(content, list):
            blocks += [b for b in content if isinstance(b, dict) and b.get("type") == "text"]
    return {**body, "system": blocks, "messages": turns}


class Anthropic(Dialect):
    """Anthropic's Messages format: Anthropic's own endpoint (`official`), or one of the
    compatible endpoints (DeepSeek, Kimi, Z.ai, …), which refuse a `metadata.user_id` such as
    Claude Code's (`for_endpoint`)."""

    name = "anthropic"
    auth_header = "x-api-key"
    choices_path = "content"
    content_path = "text"
    speaks = "messages"
    prefill = True

    def __init__(self, official: bool = True) -> None:
        self.official = official

    def for_endpoint(self, endpoint: str) -> Dialect:
        return DIALECT if urlsplit(endpoint).hostname == "api.anthropic.com" else COMPATIBLE

    def headers(self) -> dict[str, str]:
        return {"anthropic-version": VERSION}

    def count_url(self, endpoint: str) -> str | None:
        """`…/v1/messages/count_tokens` beside a `…/messages` endpoint."""
        base, sep, query = endpoint.partition("?")
        if not base.rstrip("/").endswith("/messages"):
            return None
        return base.rstrip("/") + "/count_tokens" + sep + query

    def count_body(self, request: dict[str, Any], model: str) -> dict[str, Any]:
        """The `count_tokens` body of a Messages request, as `native_body` would send it."""
        body = self.native_body(request, model, False)
        return {k: v for k, v in body.items() if k in COUNTED}

    def takes_user_id(self, user_id: Any) -> bool:
        return takes_user_id(user_id, self.official)

    def left_out(self, request: dict[str, Any]) -> tuple[str, ...]:
        """What `native_body` does not send of `request`: a `metadata.user_id` the endpoint
        refuses; `fallbacks` (Anthropic's server-side model fallback) to any endpoint but
        Anthropic's own."""
        user_id = object_at(request, "metadata").get("user_id")
        out = () if user_id is None or self.takes_user_id(user_id) else ("metadata.user_id",)
        return out if self.official or "fallbacks" not in request else (*out, "fallbacks")

    def body(
        self, request: dict[str, Any], model: str, stream: bool, max_tokens_field: str
    ) -> dict[str, Any]:
        return encode_request(request, model, stream, max_tokens_field, self.official)

    def native_body(self, request: dict[str, Any], model: str, stream: bool) -> dict[str, Any]:
        """The Messages request as it came, except: thinking blocks without a signature (a
        chat provider's reasoning that `encode_answer` rendered, which Anthropic would refuse as
        forged) are left out; `system` turns inside `messages` (Claude Code's) go to the end of
        the top-level `system`, as Anthropic and vLLM take only user and assistant turns; a
        `metadata.user_id` the endpoint refuses, and `fallbacks` but for Anthropic's own API,
        are left out (`left_out`)."""
        body = super().native_body(request, model, stream)
        messages = body.get("messages")
        if isinstance(messages, list) and any(_unsigned(m) for m in messages):
            body["messages"] = [_without_unsigned(m) if _unsigned(m) else m for m in messages]
        if isinstance(messages, list) and any(role_of(m) == "system" for m in messages):
            body = _fold_system(body)
        left = self.left_out(body)
        if "metadata.user_id" in left:
            metadata = {k: v for k, v in body["metadata"].items() if k != "user_id"}
            body["metadata"] = metadata
            if not metadata:
                del body["metadata"]
        if "fallbacks" in left:
            del body["fallbacks"]
        return body

    def home(self, body: dict[str, Any], origin: str | None) -> dict[str, Any]:
        """The `thinking` and `redacted_thinking` blocks of every turn, sorted."""
        messages = body.get("messages")
        if not isinstance(messages, list):
            return body
        return {**body, "messages": [_homed(m, origin) for m in messages]}

    def error_of(self, body: Any) -> ErrorInfo | None:
        err = body.get("error") if isinstance(body, dict) else None
        if isinstance(err, dict) and (body.get("type") == "error" or err.get("type") in _STATUS):
            kind = err.get("type")
            code = kind if isinstance(kind, str) else None
            status = _STATUS.get(code) if code else None
            return ErrorInfo(str(err.get("message") or code or err), code, status)
        return openai_error(body)

    def normalize(self, raw: Any, ctx: Context) -> dict[str, Any]:
        return decode_answer(raw, ctx, (self.choices_path, self.content_path))

    def decoder(self, ctx: Context) -> Decoder:
        return AnthropicDecoder(ctx, self)


DIALECT = Anthropic()
COMPATIBLE = Anthropic(official=False)
