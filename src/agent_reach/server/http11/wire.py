"""The proxy's HTTP/1.1 messages (protocol §14): a `Request` as `connection` parses it, the
`Response` and `StreamResponse` a face answers with, and the `App` that routes a request to
its face through the guard.

A request's body arrives into its `Body` while the request waits or is handled: decoded
(gzip, deflate) in bounded steps and never held past `server.max_body_bytes`, so that what a
client sends costs at most that. `Body.read` waits for the rest; it sends `100 Continue`
first when the client asked for it, which is after the guard's checks.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from http.cookies import SimpleCookie
from typing import Any, Protocol
from urllib.parse import parse_qsl, unquote

from multidict import CIMultiDict, MultiDict

from ...net.exchange import media_type

Handler = Callable[["Request"], Awaitable["StreamResponse"]]
Guard = Callable[["Request", Handler], Awaitable["StreamResponse"]]
_INFLATE = {"gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}
_STEP = 2**16  # decoded at a time: a bomb is refused after the limit, not after its expansion
# What an answer ended at the shutdown timeout says (`Writer.ending`), in its API's shape.
ENDED = (
    "agent-reach is shutting down and this answer outlasted its shutdown timeout; "
    "send the request again"
)


class HTTPError(Exception):
    """No route for the request: 404, or 405 with the methods that are `allowed` (426 for a
    request that asked to upgrade its connection: no route of it takes one)."""

    def __init__(self, status: int, allowed: tuple[str, ...] = ()) -> None:
        super().__init__(HTTPStatus(status).phrase)
        self.status = status
        self.reason = HTTPStatus(status).phrase
        self.allowed = allowed


class PayloadError(Exception):
    """A body that cannot be read: a malformed chunk, or bytes its Content-Encoding does not
    decode."""


class BodyTooLarge(Exception):
    """A body (decoded) over `server.max_body_bytes`."""


class Body:
    """A request's body as it arrives."""

    __slots__ = ("_chunks", "_done", "_error", "_inflate", "_limit", "_size", "_waiter", "expect")

    def __init__(self, limit: int, encoding: str | None, expect: Callable[[], None] | None) -> None:
        self._chunks: list[bytes] = []
        self._size = 0
        self._limit = limit
        self._done = False
        self._error: Exception | None = None
        self._waiter: asyncio.Future[None] | None = None
        wbits = _INFLATE.get(encoding.strip().lower()) if encoding else None
        self._inflate = zlib.decompressobj(wbits) if wbits else None
        self.expect = expect  # sends `100 Continue`, once, before the first wait

    def is_eof(self) -> bool:
        return self._done or self._error is not None

    def feed(self, data: bytes) -> None:
        if self._error is not None:
            return
        inflate = self._inflate
        if inflate is None:
            self._keep(data)
            return
        try:
            while data and self._error is None:
                self._keep(inflate.decompress(data, _STEP))
                data = inflate.unconsumed_tail
        except zlib.error:
            self.fail(PayloadError("Can not decode content-encoding"))

    def _keep(self, data: bytes) -> None:
        self._size += len(data)
        if self._size > self._limit:
            self._chunks.clear()
            self.fail(BodyTooLarge())
        elif data:
            self._chunks.append(data)

    def finish(self) -> None:
        if self._inflate is not None and not self._inflate.eof and self._error is None:
            self.fail(PayloadError("Can not decode content-encoding: the body was cut short"))
        self._done = True
        self._wake()

    def fail(self, error: Exception) -> None:
        if self._error is None and not self._done:
            self._error = error
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def read(self) -> bytes:
        while not self.is_eof():
            if self.expect is not None:
                self.expect()
                self.expect = None
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
        if self._error is not None:
            raise self._error
        if len(self._chunks) != 1:
            self._chunks[:] = [b"".join(self._chunks)]
        return self._chunks[0]


class Writer(Protocol):
    """Where a streamed answer goes: the connection its request came on."""

    def start_stream(self, request: Request, response: StreamResponse) -> None:
        """Write the answer's head."""

    async def send_piece(self, data: bytes) -> None:
        """Write one piece of its body (waiting while the client reads nothing)."""

    @property
    def ending(self) -> bool:
        """The server is shutting down and its shutdown timeout is over: the handler is
        cancelled, and a stream that catches it ends as its API says (`ENDED`)."""


class Request:
    """One request, as far as the faces and the guard read it."""

    __slots__ = (
        "_cookies",
        "_query",
        "_state",
        "app",
        "connection",
        "content",
        "headers",
        "match_info",
        "method",
        "path",
        "query_string",
        "remote",
        "responded",
        "started",
        "version",
    )
    secure = False  # TLS ends before us, if anywhere (`X-Forwarded-Proto` says so)

    def __init__(
        self,
        method: str,
        target: str,
        version: str,
        headers: CIMultiDict[str],
        *,
        app: App,
        connection: Writer,
        remote: str | None,
        started: float,
    ) -> None:
        self.method = method
        path, _, self.query_string = target.partition("?")
        path = path.partition("#")[0]
        if not path.startswith("/") and "://" in path:  # absolute-form: `http://host/path`
            path = "/" + path.partition("://")[2].partition("/")[2]
        self.path = unquote(path, errors="surrogateescape") if "%" in path else path
        self.version = version
        self.headers = headers
        self.app = app
        self.connection = connection
        self.remote = remote
        self.started = started  # loop time of the request's first byte
        self.content: Body | None = None  # given by the connection when a body comes
        self.match_info: dict[str, str] = {}
        self.responded = False  # its head is written: no other answer can follow
        self._state: dict[str, Any] = {}
        self._query: MultiDict[str] | None = None
        self._cookies: dict[str, str] | None = None

    def __getitem__(self, key: str) -> Any:
        return self._state[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self._state[key] = value

    def get(self, key: str, default: Any = None) -> Any:
        return self._state.get(key, default)

    @property
    def query(self) -> MultiDict[str]:
        if self._query is None:
            self._query = MultiDict(parse_qsl(self.query_string, keep_blank_values=True))
        return self._query

    @property
    def cookies(self) -> dict[str, str]:
        if self._cookies is None:
            jar: SimpleCookie = SimpleCookie()
            jar.load(self.headers.get("Cookie", ""))
            self._cookies = {name: morsel.value for name, morsel in jar.items()}
        return self._cookies

    @property
    def content_type(self) -> str:
        return media_type(self.headers.get("Content-Type"))

    @property
    def content_length(self) -> int | None:
        value = self.headers.get("Content-Length")
        return int(value) if value is not None else None  # llhttp checked it is a number

    @property
    def body_exists(self) -> bool:
        return self.content is not None

    async def read(self) -> bytes:
        return await self.content.read() if self.content is not None else b""

    async def post(self) -> dict[str, str]:
        """An urlencoded form's fields (in its charset, UTF-8 unless it names one): the first
        value of each; none when the body is no form. ValueError for a multipart form (the
        status page's is urlencoded) or bytes that are not its charset, LookupError for a
        charset unknown."""
        mime, _, params = self.headers.get("Content-Type", "").partition(";")
        mime = mime.strip().lower()
        if mime == "multipart/form-data":
            raise ValueError("multipart forms are not read")
        if mime != "application/x-www-form-urlencoded":
            return {}
        charset = "utf-8"
        for param in params.split(";"):
            name, _, value = param.partition("=")
            if name.strip().lower() == "charset":
                charset = value.strip().strip('"')
        text = (await self.read()).decode(charset)
        fields = parse_qsl(text, keep_blank_values=True, encoding=charset, errors="strict")
        return dict(reversed(fields))


class StreamResponse:
    """An answer written as it comes: `prepare` sends the head, `write` each piece (waiting
    while the client does not read)."""

    __slots__ = ("_conn", "_head_only", "closing", "headers", "status")

    def __init__(self, *, status: int = 200, headers: dict[str, str] | None = None) -> None:
        self.status = status
        self.headers: CIMultiDict[str] = CIMultiDict(headers or ())
        self.closing = False
        self._conn: Writer | None = None
        self._head_only = False

    def force_close(self) -> None:
        """Close the connection after this answer."""
        self.closing = True

    def set_cookie(
        self, name: str, value: str, *, path: str, httponly: bool, samesite: str, secure: bool
    ) -> None:
        jar: SimpleCookie = SimpleCookie()
        jar[name] = value
        morsel = jar[name]
        morsel["path"] = path
        morsel["httponly"] = httponly
        morsel["samesite"] = samesite
        if secure:
            morsel["secure"] = True
        self.headers.add("Set-Cookie", jar.output(header="")[1:])

    async def prepare(self, request: Request) -> None:
        self._head_only = request.method == "HEAD"
        self._conn = request.connection
        self._conn.start_stream(request, self)

    async def write(self, data: bytes) -> None:
        conn = self._conn
        if conn is None:
            raise RuntimeError("write before prepare")
        if data and not self._head_only:
            await conn.send_piece(data)

    @property
    def ending(self) -> bool:
        """Its connection's `Writer.ending`."""
        return self._conn is not None and self._conn.ending


class Response(StreamResponse):
    """A whole answer."""

    __slots__ = ("body",)

    def __init__(
        self,
        *,
        status: int = 200,
        body: bytes = b"",
        text: str | None = None,
        content_type: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(status=status, headers=headers)
        if text is not None:
            body = text.encode()
            content_type = f"{content_type or 'text/plain'}; charset=utf-8"
        self.body = body
        if content_type is not None:
            self.headers["Content-Type"] = content_type


class App(dict[str, Any]):
    """The routes (a path, or a path prefix ending in one `{name}` segment) and the state that
    requests see as `request.app`; `handle` passes every request through the guard."""

    def __init__(self, guard: Guard) -> None:
        super().__init__()
        self._guard = guard
        self._exact: dict[str, dict[str, Handler]] = {}
        self._under: dict[str, tuple[str, dict[str, Handler]]] = {}
        self.on_startup: list[Callable[[App], Awaitable[None]]] = []
        self.on_cleanup: list[Callable[[App], Awaitable[None]]] = []

    def add(self, method: str, path: str, handler: Handler) -> None:
        """A route; a GET one answers HEAD too."""
        prefix, brace, name = path.partition("{")
        if brace:
            methods = self._under.setdefault(prefix, (name.rstrip("}"), {}))[1]
        else:
            methods = self._exact.setdefault(path, {})
        methods[method] = handler
        if method == "GET":
            methods["HEAD"] = handler

    def handle(self, request: Request) -> Awaitable[StreamResponse]:
        return self._guard(request, self._route)

    def _route(self, request: Request) -> Awaitable[StreamResponse]:
        path = request.path
        methods = self._exact.get(path)
        if methods is None:
            prefix, _, last = path.rpartition("/")
            found = self._under.get(prefix + "/") if last else None
            if found is None:
                raise HTTPError(404)
            request.match_info[found[0]] = last
            methods = found[1]
        handler = methods.get(request.method)
        if handler is None:
            raise HTTPError(426 if upgrading(request) else 405, tuple(methods))
        return handler(request)


def upgrading(request: Request) -> str | None:
    """The protocol a request asks its connection to be upgraded to (`Upgrade`, with
    `Connection: upgrade`), if any."""
    headers = request.headers
    tokens = {t.strip().lower() for t in headers.get("Connection", "").split(",")}
    return headers.get("Upgrade") if "upgrade" in tokens else None
