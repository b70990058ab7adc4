"""SSE framing (`dialects.framing.SSEFrames`): the frames of any lines, fed in any pieces, are
what the event-stream rules make of them (the subset providers use: `data` and `event` fields,
comments, CR before the line end, a blank line ending the frame)."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from agent_reach.dialects.framing import SSEFrames

LINES = [
    b"data: x",
    b'data: {"a":1}',
    b"data:y",
    b"data:  two spaces",
    b"data: cr\r",
    b"data",
    b"",
    b"\r",
    b": keep-alive",
    b":HTTP_STATUS/200",
    b"event: delta",
    b"event:done\r",
    b"id: 7",
    b"retry: 10",
]


def reference(lines: list[bytes]) -> list[tuple[str | None, bytes]]:
    """The frames of `lines`, field by field, as the event-stream rules read them."""
    out: list[tuple[str | None, bytes]] = []
    event: str | None = None
    data: list[bytes] = []
    for raw in lines:
        line = raw.rstrip(b"\r\n")
        if not line:
            if data:
                out.append((event, b"\n".join(data)))
            event, data = None, []
            continue
        if line.startswith(b":"):
            continue
        name, _, value = line.partition(b":")
        value = value[1:] if value.startswith(b" ") else value
        if name == b"data":
            data.append(value)
        elif name == b"event":
            event = value.decode()
    return out


@settings(max_examples=400)
@given(st.lists(st.sampled_from(LINES), max_size=40), st.lists(st.integers(0, 40), max_size=8))
@example([b"event: delta", b"", b"data: x", b""], [])  # a blank line ends the event alone too
@example([b"data: a", b"data: b", b"", b"data: c\r", b"\r"], [1, 3])  # joined; CR line ends
def test_frames_of_any_lines_in_any_pieces(lines: list[bytes], cuts: list[int]) -> None:
    frames = SSEFrames()
    got: list[tuple[str | None, bytes]] = []
    at = 0
    for cut in sorted(cuts):
        got += frames.feed(lines[at:cut])
        at = max(at, cut)
    got += frames.feed(lines[at:])
    expected = reference([*lines, b""])  # the end of the stream ends its last frame
    last = frames.flush()
    assert got + ([last] if last is not None else []) == expected
