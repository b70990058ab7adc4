"""Reasoning artifacts: what a provider mints for itself alone and a client hands back on the
next turn (an Anthropic `thinking` block's `signature`, a `redacted_thinking` block's `data`,
a Responses `reasoning` item's `encrypted_content`). Another provider refuses them. Pure.

On the way out, every artifact in a provider's own answer (a body or a stream frame) is tagged
with its origin, the fingerprint of the provider's identity: `ar~ORIGIN~` in front of the
provider's bytes (`tagged`; `~` is in no base64 alphabet, so no provider's value begins so).
On the way back, a request's artifacts are sorted for the provider it goes to (`homed`): its
own lose the tag and pass as the exact bytes it minted; another's are left out; an untagged
one (not minted through agent-reach) passes as it came, unless the provider already refused
artifacts (`origin` None: all are left out). A chat answer's `reasoning_content` is text a
client shows, so it is not tagged: its origin is remembered by digest (`Origins`).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import Any

PREFIX = "ar~"
_SEP = "~"
# The artifact field of each kind of block or item that carries one.
FIELDS = {
    "thinking": "signature",
    "redacted_thinking": "data",
    "signature_delta": "signature",
    "reasoning": "encrypted_content",
}
# Bytes that a frame carrying an artifact has in it, to leave every other frame unparsed.
MARKERS = (b'"signature', b'"redacted_thinking"', b'"encrypted_content"')


def may_hold(data: bytes) -> bool:
    """Whether JSON `data` may carry an artifact (else `tagged` of it would change nothing)."""
    return any(marker in data for marker in MARKERS)


def mint(value: str, origin: str) -> str:
    """`value` tagged with its `origin`."""
    return f"{PREFIX}{origin}{_SEP}{value}"


def origin_of(value: str) -> tuple[str | None, str]:
    """(origin, the provider's own bytes) of a tagged value; (None, value) of an untagged one."""
    if not value.startswith(PREFIX):
        return None, value
    origin, sep, rest = value[len(PREFIX) :].partition(_SEP)
    return (origin, rest) if sep and origin else (None, value)


def _field(node: dict[str, Any]) -> str | None:
    """The artifact field of a block or item, when it carries a non-empty one."""
    name = FIELDS.get(node.get("type"))  # type: ignore[arg-type]
    return name if name and isinstance(node.get(name), str) and node[name] else None


def tagged(node: Any, origin: str) -> Any:
    """`node` (a provider's answer, or one of its stream events) with every artifact in it
    tagged with `origin`; `node` itself when it holds none."""
    if isinstance(node, list):
        items = [tagged(n, origin) for n in node]
        return node if all(a is b for a, b in zip(items, node, strict=True)) else items
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] | None = None
    name = _field(node)
    if name is not None and origin_of(node[name])[0] is None:
        out = {**node, name: mint(node[name], origin)}
    for key, value in node.items():
        if isinstance(value, dict | list):
            new = tagged(value, origin)
            if new is not value:
                out = {**(out or node), key: new}
    return node if out is None else out


def homed(items: list[Any], origin: str | None) -> list[Any]:
    """The blocks or items of one request list, for the provider whose origin is `origin`:
    its own artifacts untagged, another's left out, untagged ones kept; `origin` None: every
    artifact left out. `items` itself when nothing changes."""
    out: list[Any] = []
    changed = False
    for item in items:
        name = _field(item) if isinstance(item, dict) else None
        if name is None:
            out.append(item)
            continue
        minted_by, own = origin_of(item[name])
        if origin is None or (minted_by is not None and minted_by != origin):
            changed = True  # left out
        elif minted_by is not None:
            out.append({**item, name: own})
            changed = True
        else:
            out.append(item)
    return out if changed else items


class Origins:
    """Who wrote each chat `reasoning_content` a client was given, by a digest of its text:
    plain text cannot carry a tag, so this process remembers the newest `size` of them. A
    chat request's assistant turns then keep their reasoning only for the provider that wrote
    it (`home_reasoning`); reasoning this process did not hand out passes as it came."""

    __slots__ = ("_by_digest", "size")

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self._by_digest: OrderedDict[bytes, str] = OrderedDict()

    def __len__(self) -> int:
        return len(self._by_digest)

    def note(self, digest: bytes, origin: str) -> None:
        """`origin` wrote the reasoning whose `reasoning_digest` is `digest`."""
        self._by_digest[digest] = origin
        self._by_digest.move_to_end(digest)
        if len(self._by_digest) > self.size:
            self._by_digest.popitem(last=False)

    def answered(self, response: dict[str, Any], origin: str) -> None:
        """`origin` wrote the reasoning of each choice of a chat answer."""
        for choice in response.get("choices") or ():
            text = (choice.get("message") or {}).get("reasoning_content")
            if isinstance(text, str) and text:
                self.note(reasoning_digest(text).digest(), origin)

    def of(self, text: str) -> str | None:
        """The origin of a reasoning text, when this process handed it out."""
        return self._by_digest.get(reasoning_digest(text).digest())


def reasoning_digest(text: str = "") -> Any:
    """A running digest of reasoning text (`update` it with each streamed piece)."""
    return hashlib.blake2b(text.encode(), digest_size=16)


def home_reasoning(messages: list[Any], origin: str, origins: Origins) -> list[Any]:
    """A chat request's messages without the `reasoning_content` another provider wrote
    (`messages` itself when none is)."""
    if not origins:
        return messages
    out: list[Any] | None = None
    for i, m in enumerate(messages):
        text = m.get("reasoning_content") if isinstance(m, dict) else None
        if isinstance(text, str) and origins.of(text) not in (None, origin):
            out = out or list(messages)
            out[i] = {k: v for k, v in m.items() if k != "reasoning_content"}
    return messages if out is None else out
