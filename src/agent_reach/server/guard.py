"""What every request passes before an API face sees it (protocol §10, §14). Clients are not
trusted: whatever they send becomes a 4xx in the error shape of the path's API, never a 5xx
or a traceback, and an error message quotes at most ~200 characters of it.

In order, for every route (those added later too):
  - the method: CONNECT is 405;
  - the proxy key, when client keys are set (every path but `OPEN_PATHS`): one key, in
    `Authorization: Bearer KEY`, `x-api-key: KEY` or `x-goog-api-key: KEY` headers (or, on the
    Gemini API's paths, a `key=KEY` query parameter; one key sent in several counts as one),
    the token parsed exactly and
    compared in constant time against every key (or, for the status page's reads, its
    cookie); else 401. When none are set, what keeps web pages out (`browsers`): 403 / 415;
  - how many requests the client has under way (`InFlight`, every path but `OPEN_PATHS`): at
    most `server.max_requests_per_key` per client key, or with client auth off per address,
    else 429 with `Retry-After`, so that one key cannot take the upstream connections every
    other key needs (a WebSocket session counts as one request until it closes);
  - the body's encoding: gzip and deflate are decoded as it arrives (in bounded steps), any other
    is 415;
  - its size: a Content-Length over `server.max_body_bytes` is 413 at once (before
    `100 Continue`: see `expect`), a longer body (decoded) is 413 when reading reaches the limit;
  - reading it, within what is left of `server.request_timeout_s` since its first byte (408);
then the face runs, and what it raises becomes an error body in its face's shape.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import hmac
import os
import re
from collections.abc import Awaitable, Callable
from typing import Any

from multidict import MultiMapping

from ..config import ServerConfig
from ..core.errors import ConfigError, RequestError, quoted
from . import log, status_page
from .browsers import Browsers
from .faces import face_of
from .faces.face import OWNER, SEAL
from .faces.relay import BadBody
from .http11.websocket import Switch
from .http11.wire import (
    BodyTooLarge,
    HTTPError,
    PayloadError,
    Request,
    Response,
    StreamResponse,
    upgrading,
)

Handler = Callable[[Request], Awaitable[StreamResponse]]
# Answered without a proxy key: the health check, "/" (Claude Code probes it), and the status
# page and its login form, which ask for a key themselves.
OPEN_PATHS = frozenset(
    {"/healthz", "/readyz", "/", status_page.PATH, status_page.PATH.rstrip("/"), status_page.LOGIN}
)
ENCODINGS = frozenset({"gzip", "deflate", "identity"})
# RFC 6750's `Bearer 1*SP b64token`, with exactly one space and any visible ASCII in the token.
_BEARER = re.compile(r"[Bb][Ee][Aa][Rr][Ee][Rr] ([\x21-\x7e]+)")
_TOKEN = re.compile(r"[\x21-\x7e]+")


def owner_of(key: str) -> str:
    """Who a client key is, as stored with what it owns (stored responses): a keyed hash, so
    that the store holds no key, the same on every instance of a fleet."""
    return hashlib.blake2b(key.encode(), key=b"agent-reach owner", digest_size=16).hexdigest()


def seal_of(key: str) -> bytes:
    """The key a client key's compaction items are sealed with (`dialects.responses.compaction`):
    derived from the client key, so that no secret is kept and no other key can make or take
    one; the same on every instance of a fleet."""
    return hashlib.blake2b(key.encode(), key=b"agent-reach compaction", digest_size=32).digest()


_KEY_HEADERS = ("x-api-key", "x-goog-api-key")  # a key as it is (Anthropic's, Google's)


class Keys:
    """The proxy's client keys; `check` judges a request's headers."""

    def __init__(self, keys: frozenset[str]) -> None:
        self.keys = tuple(k.encode() for k in keys)
        self.cookies = tuple(status_page.cookie_of(k).encode() for k in keys)
        self.owners = {k: owner_of(k) for k in keys}  # hashed once, not per request
        self.seals = {k: seal_of(k) for k in keys}

    def __bool__(self) -> bool:
        return bool(self.keys)

    def check(self, headers: MultiMapping[str], query: tuple[str, ...] = ()) -> str | None:
        """None when the headers (or `query`, the `key` parameters of a Gemini API request)
        carry one valid key, else what is wrong with them."""
        return self.read(headers, query)[1]

    def read(
        self, headers: MultiMapping[str], query: tuple[str, ...] = ()
    ) -> tuple[str, None] | tuple[None, str]:
        """(the valid key the headers or `query` carry, None), or (None, what is wrong). One
        key may come in several of them (Claude Code's `apiKeyHelper` sends it as `x-api-key`
        and as a Bearer token): two different ones are refused."""
        bearer = headers.getall("Authorization", [])
        plain = [*query, *(v for name in _KEY_HEADERS for v in headers.getall(name, []))]
        if not bearer and not plain:
            return None, (
                "a proxy key is required (Authorization: Bearer KEY, x-api-key: KEY"
                " or x-goog-api-key: KEY)"
            )
        tokens = set()
        for value in bearer:
            match = _BEARER.fullmatch(value)
            if match is None:
                return None, "the Authorization header must be 'Bearer KEY'"
            tokens.add(match[1])
        for value in plain:
            if not _TOKEN.fullmatch(value):
                return None, "the key must be one token of visible ASCII characters"
            tokens.add(value)
        if len(tokens) > 1:
            return None, "send one proxy key (two different ones came)"
        token = tokens.pop()
        return (token, None) if self.valid(token) else (None, "the proxy key is not valid")

    def valid(self, token: str, cookie: bool = False) -> bool:
        """Whether `token` is one of the keys (or, with `cookie`, of their status-page cookies);
        bytes that are no UTF-8 are none."""
        presented = token.encode(errors="surrogateescape")
        valid = False
        for key in self.cookies if cookie else self.keys:  # all: the time says nothing
            valid |= hmac.compare_digest(presented, key)
        return valid


class InFlight:
    """Requests under way per client, at most `cap` each. A client is known only while it has
    some (so the table is as large as the requests in flight); its first refusal is one log
    line, and the count refused another once it has none under way."""

    __slots__ = ("_refused", "_under_way", "cap", "total")

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.total = 0  # requests under way, all clients (`agent_reach_requests_in_flight`)
        self._under_way: dict[str, int] = {}
        self._refused: dict[str, tuple[int, str]] = {}  # refused meanwhile, and as named

    def enter(self, who: str, remote: str | None) -> bool:
        """Whether `who` (a key's owner, or the address `remote`) may start one more request."""
        under_way = self._under_way.get(who, 0)
        if under_way < self.cap:
            self._under_way[who] = under_way + 1
            self.total += 1
            return True
        count, named = self._refused.get(who) or (0, _named(who, remote))
        if not count:
            log.server_log.warning(
                "429 to %s: %d requests under way (server.max_requests_per_key); refusing more",
                named,
                self.cap,
            )
        self._refused[who] = (count + 1, named)
        return False

    def leave(self, who: str) -> None:
        """One request of `who`'s is over."""
        self.total -= 1
        under_way = self._under_way[who] - 1
        if under_way:
            self._under_way[who] = under_way
            return
        del self._under_way[who]
        if self._refused:
            refused = self._refused.pop(who, None)
            if refused is not None:
                log.server_log.warning(
                    "%s: %d requests refused over server.max_requests_per_key",
                    refused[1],
                    refused[0],
                )


def _named(who: str, remote: str | None) -> str:
    """A client as the log names it: by its address, and its key by its owner's first
    characters (a keyed hash: never the key)."""
    where = remote or "-"
    if who == (remote or ""):
        return f"client {where}"
    return f"client key {who[:8]}… from {where}"


class Guard:
    """The checks above, as the function every request passes before its handler
    (`middleware`) and as the screen that runs before anything else (`expect`)."""

    def __init__(self, keys: frozenset[str], server: ServerConfig, host: str | None) -> None:
        self.keys = Keys(keys)
        self.browsers = Browsers((server.host, host))  # while there are no keys
        self.max_body = server.max_body_bytes
        self.request_timeout_s = server.request_timeout_s
        self.too_large = f"request body over {self.max_body} bytes (server.max_body_bytes)"
        self.in_flight = InFlight(server.max_requests_per_key)
        self.too_many = (
            f"more than {self.in_flight.cap} requests at once from this client"
            " (server.max_requests_per_key): retry when one has ended"
        )

    def authorized(self, request: Request) -> bool:
        """Whether the request carries a valid key: a header, or the status page's cookie."""
        return self.keys.check(request.headers) is None or self._page_cookie(request)

    def _page_cookie(self, request: Request) -> bool:
        """The status page's cookie, which opens the page's own reads and nothing else."""
        token = status_page.by_cookie(request)
        return token is not None and self.keys.valid(token, cookie=True)

    def expect(self, request: Request) -> StreamResponse | None:
        """An answer for an `Expect` that must not get `100 Continue`: a body announced over
        the limit (413) or an expectation other than 100-continue (417). None otherwise."""
        expect = request.headers.get("Expect")
        if expect is None:
            return None
        if expect.lower() != "100-continue":
            return _closing(_error(request.path, 417, f"Expect {quoted(expect)}"))
        if (request.content_length or 0) > self.max_body:
            return _closing(_error(request.path, 413, self.too_large))
        return None

    async def middleware(self, request: Request, handler: Handler) -> StreamResponse:
        log.track(request)
        path = request.path
        if request.method == "CONNECT":
            return _error(path, 405, "CONNECT is not supported")
        owner = None
        if self.keys and path not in OPEN_PATHS:
            query = tuple(request.query.getall("key", ())) if face_of(path).query_key else ()
            key, problem = self.keys.read(request.headers, query)
            if problem is not None and not self._page_cookie(request):
                return _error(path, 401, problem, code="invalid_api_key")
            if key is not None:
                owner = request[OWNER] = self.keys.owners[key]
                request[SEAL] = self.keys.seals[key]
        elif not self.keys and (away := self.browsers.refused(request)) is not None:
            return _error(path, away[0], away[1])
        # Counted per key (its owner, a hash: never the key), else per address: with client
        # auth off (or the status page's cookie) the address is all there is to tell clients.
        who = None if path in OPEN_PATHS else owner or request.remote or ""
        if who is not None and not self.in_flight.enter(who, request.remote):
            headers = {"Retry-After": "1"}
            return _error(path, 429, self.too_many, code="rate_limit_exceeded", headers=headers)
        try:
            if request.body_exists:
                refused = await self._read_body(request)
                if refused is not None:
                    return refused
            answer = await handler(request)
            if who is not None and isinstance(answer, Switch):  # a WebSocket session: a request
                answer.ended.append(functools.partial(self.in_flight.leave, who))  # till it ends
                who = None
            return answer
        except HTTPError as exc:
            return _http_error(request, exc)
        except BadBody as exc:
            return _error(path, 400, str(exc))
        except RequestError as exc:
            return _error(path, exc.status, str(exc), param=exc.param)
        except PayloadError as exc:
            return _closing(_error(path, 400, _payload_problem(exc)))
        except Exception as exc:  # a bug of ours: still our shape, and one line in the log
            if request.responded:  # too late for an answer: the connection drops
                raise
            log.server_log.error("%s %s failed", request.method, quoted(path), exc_info=exc)
            return _error(path, 500, "internal error")
        finally:
            if who is not None:
                self.in_flight.leave(who)

    async def _read_body(self, request: Request) -> StreamResponse | None:
        """Read the whole body into the request (where `request.read()` finds it); an error
        response when it cannot be."""
        path = request.path
        encodings = request.headers.getall("Content-Encoding", [])
        if len(encodings) > 1 or (encodings and encodings[0].strip().lower() not in ENCODINGS):
            encoding = quoted(", ".join(encodings), 50)
            message = f"Content-Encoding {encoding} is not supported (gzip, deflate or identity)"
            return _closing(_error(path, 415, message))
        if (request.content_length or 0) > self.max_body:
            return _closing(_error(path, 413, self.too_large))
        try:
            await self._whole_body(request)
        except TimeoutError:
            message = f"the request was not received within {self.request_timeout_s:g} s"
            return _closing(_error(path, 408, f"{message} (server.request_timeout_s)"))
        except BodyTooLarge:
            return _closing(_error(path, 413, self.too_large))
        except PayloadError as exc:
            return _closing(_error(path, 400, _payload_problem(exc)))
        return None

    async def _whole_body(self, request: Request) -> None:
        """The body read within `request_timeout_s` from the request's first byte; no timer
        for one that came whole with the head (most: nothing to wait for)."""
        if request.content is None or request.content.is_eof():
            await request.read()
            return
        left = self.request_timeout_s - (asyncio.get_running_loop().time() - request.started)
        async with asyncio.timeout(max(left, 0.0)):
            await request.read()


def _error(path: str, status: int, message: str, **fields: Any) -> Response:
    """An error response in the shape of `path`'s API (its face's)."""
    return face_of(path).error_response(status, message, **fields)


def _closing(response: Response) -> Response:
    """`response`, closing the connection after it (the rest of the body is not wanted)."""
    response.force_close()
    return response


def _http_error(request: Request, exc: HTTPError) -> Response:
    path = request.path
    if exc.status == 404:
        return _error(path, 404, f"no endpoint at {quoted(path)}")
    if exc.status == 426:  # as a client that can do without it reads it: at once, over HTTP
        asked = quoted(upgrading(request) or "", 40)
        message = f"no upgrade to {asked} here: send the request over HTTP/1.1"
        return _error(path, 426, message, headers={"Upgrade": "HTTP/1.1"})
    if exc.allowed:
        allowed = ", ".join(sorted(exc.allowed))
        message = f"{quoted(request.method, 20)} is not allowed here (allowed: {allowed})"
        return _error(path, 405, message, headers={"Allow": allowed})
    return _error(path, exc.status, exc.reason)


def _payload_problem(exc: PayloadError) -> str:
    """What was wrong with a body that could not be read (the cause, without bytes)."""
    cause = exc.__cause__ or exc
    text = str(getattr(cause, "message", cause)).split(":", 1)[0].strip()
    if "content-encoding" in text.lower():
        return "the body could not be decoded as its Content-Encoding says"
    return f"the body could not be read: {text or type(cause).__name__}"


def api_keys(server: ServerConfig, source: str) -> frozenset[str]:
    """The client keys from the variable `server.api_keys_env` names (comma-separated).
    ConfigError when client auth was meant but would be off: the config names the variable
    itself, or the variable is set, and it holds no key (`api_keys_env: null` serves without)."""
    var = server.api_keys_env
    value = os.environ.get(var) if var else None
    keys = frozenset(k.strip() for k in (value or "").split(",") if k.strip())
    if var and not keys and (value is not None or "api_keys_env" in server.model_fields_set):
        state = "is empty" if value is not None else "is not set"
        raise ConfigError(
            f"server.api_keys_env: the variable {var} {state}, so client auth would be off; "
            "set it to the client keys, or set api_keys_env: null to serve without them",
            file=source,
        )
    return keys
