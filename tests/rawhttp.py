"""A raw HTTP/1.1 client for the tests that send what an HTTP library would refuse to send
(bad bytes in headers, broken framing, half a request) and read exactly what comes back."""

from __future__ import annotations

import json
import socket
import time
from dataclasses import dataclass
from typing import Any


@dataclass
class Reply:
    status: int
    headers: dict[str, str]  # names lowercased
    body: bytes
    head: bytes  # the status line and headers as received

    def json(self) -> Any:
        return json.loads(self.body)


def request(
    method: str,
    path: str,
    *headers: tuple[str, str] | bytes,
    body: bytes | None = None,
    key: str | None = "k1",
) -> bytes:
    """A request's bytes: `headers` as (name, value) pairs or as raw header lines; a
    Content-Length for `body` unless a header already frames it; `Authorization: Bearer key`
    unless `key` is None."""
    lines = [f"{method} {path} HTTP/1.1".encode(), b"Host: 127.0.0.1"]
    if key is not None:
        lines.append(f"Authorization: Bearer {key}".encode())
    for h in headers:
        lines.append(h if isinstance(h, bytes) else f"{h[0]}: {h[1]}".encode())
    framed = any(
        line.lower().startswith((b"content-length:", b"transfer-encoding:")) for line in lines
    )
    if body is not None and not framed:
        lines.append(b"Content-Length: %d" % len(body))
    return b"\r\n".join(lines) + b"\r\n\r\n" + (body or b"")


def connect(port: int, timeout: float = 10.0, source: str | None = None) -> socket.socket:
    """A connection to 127.0.0.1:`port`, from `source` (another loopback address, such as
    127.0.0.2: another client address) when given."""
    bind = None if source is None else (source, 0)
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout, source_address=bind)
    sock.settimeout(timeout)
    return sock


def read_reply(sock: socket.socket, buffer: bytearray | None = None) -> Reply:
    """One response from `sock` (framed by Content-Length, or by the connection closing);
    bytes read past it stay in `buffer`."""
    buf = bytearray() if buffer is None else buffer
    while b"\r\n\r\n" not in buf:
        data = sock.recv(65536)
        if not data:
            raise ConnectionError(f"closed before a response head: {bytes(buf)!r}")
        buf += data
    head, _, rest = bytes(buf).partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    body = bytearray(rest)
    if headers.get("transfer-encoding", "").lower() == "chunked":
        buf[:] = rest
        return Reply(status, headers, _dechunk(sock, buf), head)
    if "content-length" in headers:
        length = int(headers["content-length"])
        while len(body) < length:
            data = sock.recv(65536)
            if not data:
                break
            body += data
        buf[:] = body[length:]
        body = body[:length]
    else:
        while data := sock.recv(65536):
            body += data
        buf.clear()
    return Reply(status, headers, bytes(body), head)


def _dechunk(sock: socket.socket, buf: bytearray) -> bytes:
    """A chunked body read strictly from `buf` and then `sock` (as httpx reads it: anything but
    a hex size line where one belongs is an error); bytes past its end stay in `buf`."""
    body = bytearray()
    while True:
        while b"\r\n" not in buf:
            data = sock.recv(65536)
            if not data:
                raise ConnectionError(f"closed inside a chunked body: {bytes(body)!r}")
            buf += data
        line, _, rest = bytes(buf).partition(b"\r\n")
        size_text = line.split(b";", 1)[0].strip()
        if not size_text or any(c not in b"0123456789abcdefABCDEF" for c in size_text):
            raise ValueError(f"illegal chunk header {line[:60]!r} after {bytes(body[-200:])!r}")
        size = int(size_text, 16)
        while len(rest) < size + 2:
            data = sock.recv(65536)
            if not data:
                raise ConnectionError(f"closed inside a chunk: {bytes(body)!r}")
            rest += data
        if rest[size : size + 2] != b"\r\n":
            raise ValueError(f"a chunk of {size} bytes not followed by CRLF: {rest[: size + 20]!r}")
        body += rest[:size]
        buf[:] = rest[size + 2 :]
        if size == 0:
            return bytes(body)


def exchange(port: int, *pieces: bytes, pause: float = 0.0) -> Reply:
    """Send `pieces` on a new connection (`pause` s apart) and read one response."""
    with connect(port) as sock:
        for i, piece in enumerate(pieces):
            if i and pause:
                time.sleep(pause)
            sock.sendall(piece)
        return read_reply(sock)


def closed_within(sock: socket.socket, seconds: float) -> float | None:
    """Seconds until the server closes `sock` (reading and dropping what it sends), or None
    if it is still open after `seconds`."""
    start = time.monotonic()
    sock.settimeout(0.05)
    while (elapsed := time.monotonic() - start) < seconds:
        try:
            if not sock.recv(65536):
                return elapsed
        except TimeoutError:
            continue
        except ConnectionResetError:
            return elapsed
    return None
