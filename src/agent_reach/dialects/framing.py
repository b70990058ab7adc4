"""Stream framing: a provider's stream body, line by line, into (event, data) frames. Pure.

Server-sent events for most formats, newline-delimited JSON for Ollama (a dialect's
`framing`); the engine feeds the lines, a dialect's `Decoder` reads the frames.
"""

from __future__ import annotations


class SSEFrames:
    """Server-sent events, fed the lines of each read: `data:` with or without a space,
    `event:` names, comment lines (`: keep-alive`, `:HTTP_STATUS/200`) skipped, multi-line data
    joined."""

    __slots__ = ("_data", "_event")

    def __init__(self) -> None:
        self._event: str | None = None
        self._data: list[bytes] = []

    def _line(self, raw: bytes) -> tuple[str | None, bytes] | None:
        """One line that is not the common `data: ` one; a finished frame at its blank line."""
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

    def feed(self, lines: list[bytes]) -> list[tuple[str | None, bytes]]:
        """Feed lines (without their b"\\n"); the frames they finish, in order. The common
        lines (`data: ` and blank) are read here, the others by `_line`."""
        out = []
        data = self._data
        for raw in lines:
            if not raw:  # the frame's end (`flush`, inline: one per frame)
                if data:
                    out.append((self._event, data[0] if len(data) == 1 else b"\n".join(data)))
                    data.clear()
                self._event = None
            elif raw[-1] != 0x0D and raw[:6] == b"data: ":
                data.append(raw[6:])
            elif (frame := self._line(raw)) is not None:
                out.append(frame)
        return out

    def flush(self) -> tuple[str | None, bytes] | None:
        """The pending frame, if any (also called at the end of the stream)."""
        if not self._data:
            self._event = None
            return None
        data = self._data
        frame = (self._event, data[0] if len(data) == 1 else b"\n".join(data))
        self._event = None
        self._data.clear()
        return frame


class NDJSONFrames:
    """Newline-delimited JSON: every non-blank line is a frame."""

    __slots__ = ()

    def feed(self, lines: list[bytes]) -> list[tuple[str | None, bytes]]:
        return [(None, line) for raw in lines if (line := raw.strip())]

    def flush(self) -> tuple[str | None, bytes] | None:
        return None


def framer(framing: str) -> SSEFrames | NDJSONFrames:
    """A line framer for a dialect's `framing`."""
    return SSEFrames() if framing == "sse" else NDJSONFrames()
