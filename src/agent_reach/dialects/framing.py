"""Stream framing: a provider's stream body, line by line, into (event, data) frames. Pure.

Server-sent events for most formats, newline-delimited JSON for Ollama (a dialect's
`framing`); the engine feeds the lines, a dialect's `Decoder` reads the frames.
"""

from __future__ import annotations


class SSEFrames:
    """Server-sent events, one line at a time: `data:` with or without a space, `event:`
    names, comment lines (`: keep-alive`, `:HTTP_STATUS/200`) skipped, multi-line data joined.
    """

    __slots__ = ("_data", "_event")

    def __init__(self) -> None:
        self._event: str | None = None
        self._data: list[bytes] = []

    def line(self, raw: bytes) -> tuple[str | None, bytes] | None:
        """Feed one line; returns a finished (event, data) frame at its blank line."""
        line = raw.rstrip(b"\r\n")
        if not line:
            return self.flush()
        if line[0] == 0x3A:  # ':' comment
            return None
        name, _, value = line.partition(b":")
        if value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            self._data.append(value)
        elif name == b"event":
            self._event = value.decode("utf-8", "replace")
        return None

    def flush(self) -> tuple[str | None, bytes] | None:
        """The pending frame, if any (also called at the end of the stream)."""
        if not self._data:
            self._event = None
            return None
        frame = (self._event, b"\n".join(self._data))
        self._event, self._data = None, []
        return frame


class NDJSONFrames:
    """Newline-delimited JSON: every non-blank line is a frame."""

    __slots__ = ()

    def line(self, raw: bytes) -> tuple[str | None, bytes] | None:
        line = raw.strip()
        return (None, line) if line else None

    def flush(self) -> tuple[str | None, bytes] | None:
        return None


def framer(framing: str) -> SSEFrames | NDJSONFrames:
    """A line framer for a dialect's `framing`."""
    return SSEFrames() if framing == "sse" else NDJSONFrames()
