"""A face is a row (protocol §10): the paths of one client API, the handler of each, the shape of
its errors, and what else the gateway must know of it. `faces.FACES` lists them; the route
table and every error body come from those rows, nothing reads a path to guess an API.

A face's handler takes the gateway as a `Serving` (the router that answers now, the config, the
model names) and the request. A stream is written by one relay (`relay.streamed`) through the
face's `Encoder`, which turns chat chunks, or a provider's own frames, into the bytes of its API.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from ...chat import completion
from ..http11.wire import Request, Response, StreamResponse

if TYPE_CHECKING:
    from ...config import Config
    from ...core.errors import AllProvidersFailed, StreamInterrupted
    from ...router import Router

JSON = "application/json"
OWNER = "agent_reach.owner"  # the request's key for who sent it (the guard sets it)
SEAL = "agent_reach.seal"  # its client key's compaction seal (`guard.seal_of`; the guard sets it)
# The seal with client auth off: there is no tenant to keep apart, and anyone can make an item.
OPEN_SEAL = b"agent-reach compaction, no client keys"


class Serving(Protocol):
    """What a face needs of the gateway serving it: the router that answers now (a reload
    swaps it; a face reads it once per request), its config, and the model names it lists."""

    @property
    def router(self) -> Router: ...

    @property
    def config(self) -> Config: ...

    def model_names(self) -> list[dict[str, Any]]: ...


Handler = Callable[[Serving, Request], Awaitable[StreamResponse]]


class ErrorShape(Protocol):
    """An API's error body for `status` and `message`. Of the `fields`, `type` overrides the
    type the status implies (where the API has it), `code` and `param` exist in OpenAI's shape
    only, and any other (e.g. `attempts`) goes inside `error`."""

    def __call__(self, status: int, message: str, **fields: Any) -> dict[str, Any]: ...


class Encoder(Protocol):
    """One stream in a client API, as the bytes to write: its start, a batch of chat chunks
    (or, when `forwarding`, the frames of a provider that speaks the API, as they came), its
    end, and what a cut after the start ends it with."""

    forwarding: bool

    def start(self) -> bytes: ...

    def chunks(self, batch: list[dict[str, Any]]) -> bytes: ...

    def frames(self, frames: list[tuple[str | None, bytes]]) -> bytes: ...

    def end(self) -> bytes: ...

    def cut(self, exc: StreamInterrupted) -> bytes: ...


_OPENAI_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "request_too_large",
    429: "rate_limit_error",
}
_FAULT_TYPES = {400: "invalid_request_error", 404: "invalid_request_error", 429: "rate_limit_error"}


def by_class(status: int) -> str:
    """The type of an error whose status has none of its own: the client's or ours."""
    return "invalid_request_error" if status < 500 else "api_error"


def openai_error(status: int, message: str, **fields: Any) -> dict[str, Any]:
    """OpenAI's error body, `{"error": {"message", "type", "param", "code"}}`: the Chat
    Completions, Responses and step-mode faces', and that of every path no face owns."""
    kind = fields.pop("type", None) or _OPENAI_TYPES.get(status, by_class(status))
    return completion.error(message, kind, fields.pop("code", None), **fields)


@dataclass(frozen=True)
class Face:
    """One client API: `routes` (method, path, handler), the paths whose errors take its shape
    (`prefixes`, and `also` for a rule of its own), its `error_body`, whether a key may come in
    a `key=` query parameter (`query_key`, the Gemini API's), and the words that open its
    message for a request too long for every provider (`too_long`, what Claude Code
    compacts its conversation on), and whether every provider out of quota is told as OpenAI's
    `usage_limit_reached` with `resets_at` (`usage_limit`: what Codex stops on, printing when
    to come back, rather than retrying)."""

    name: str
    routes: tuple[tuple[str, str, Handler], ...]
    error_body: ErrorShape = openai_error
    prefixes: tuple[str, ...] = ()
    also: Callable[[str], bool] | None = None
    query_key: bool = False
    too_long: str = ""
    failed_type: bool = True  # an all-failed error names OpenAI's type for its status
    usage_limit: bool = False

    def owns(self, path: str) -> bool:
        """Whether `path`'s errors take this face's shape."""
        if any(path == p or path.startswith(p.rstrip("/") + "/") for p in self.prefixes):
            return True
        return self.also is not None and self.also(path)

    def error_response(
        self,
        status: int,
        message: str,
        type: str | None = None,
        code: str | None = None,
        *,
        headers: dict[str, str] | None = None,
        **extra: Any,
    ) -> Response:
        """An error response in this face's shape."""
        body = self.error_body(status, message, type=type, code=code, **extra)
        return Response(status=status, body=orjson.dumps(body), content_type=JSON, headers=headers)

    def all_failed(self, exc: AllProvidersFailed) -> Response:
        """No provider answered: `failure`'s error as a response."""
        status, body, headers = self.failure(exc)
        return Response(status=status, body=orjson.dumps(body), content_type=JSON, headers=headers)

    def failure(self, exc: AllProvidersFailed) -> tuple[int, dict[str, Any], dict[str, str] | None]:
        """No provider answered: the status of protocol §5.1 (whose fault it is: `exc.fault`),
        with every attempt inside `error` and, for a 429, `Retry-After` (for a 5xx,
        `x-should-retry: false`: every provider was tried just now, the SDKs' retries would
        not help)."""
        fault = exc.fault
        message = str(exc)
        if self.too_long and fault.code == "context_length_exceeded":
            message = f"{self.too_long}: {message}"
        headers = None
        if fault.retry_after is not None:
            headers = {"Retry-After": str(max(1, math.ceil(fault.retry_after)))}
        elif fault.status >= 500:
            headers = {"x-should-retry": "false"}
        kind = _FAULT_TYPES.get(fault.status, "all_providers_failed") if self.failed_type else None
        extra: dict[str, Any] = {}
        if self.usage_limit and fault.used_up:
            kind = "usage_limit_reached"
            if fault.retry_after is not None:  # when, as Codex reads it (newer, and older)
                wait = math.ceil(fault.retry_after)
                extra["resets_at"] = int(time.time()) + wait
                extra["resets_in_seconds"] = wait
        body = self.error_body(
            fault.status,
            message,
            type=kind,
            code=fault.code,
            param=fault.param,
            attempts=[a.to_dict() for a in exc.attempts],
            **extra,
        )
        return fault.status, body, headers


def owner(request: Request) -> str:
    """Who sent `request`: its client key's owner (`guard.owner_of`), or "" when client auth is
    off."""
    found: str = request.get(OWNER, "")
    return found


def seal(request: Request) -> bytes:
    """The key `request`'s compaction items are sealed with: its client key's, or `OPEN_SEAL`
    when client auth is off."""
    found: bytes = request.get(SEAL, OPEN_SEAL)
    return found
