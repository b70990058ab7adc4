"""Secrets kept out of what is shown (protocol §14): the ways a secret may be written, and a
text or body without them. Pure.

A secret (a provider's key, what a `${VAR}` put in its endpoint, a proxy's credentials) reaches
a text in other spellings than its own: URL-encoded (a query carries it so), JSON-escaped (a
body quotes it so), escaped as Python's `repr` writes it (a config error quotes a value so),
and a proxy's `user:password` base64-encoded (its `Proxy-Authorization`, which `Proxy.secrets`
gives as one more secret). `written` lists the spellings of one secret; a `Redactor` replaces
every spelling of each of its secrets, in a text or in a body (bytes).

A `Redactor` is built once (when the providers are prepared, when a config is read); checking
a body that holds none of its secrets costs one `in` test per spelling (one for a key of
letters, digits and `-_.~`, whose spellings are all alike).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import quote, quote_plus

MASK = "***"
SHORTEST = 3  # a shorter value is no secret, and replacing it would mask too much


def written(secret: str) -> frozenset[str]:
    """Every way `secret` may be written in a text: as it is; URL-encoded (`%2B`, `%2b`, `+`
    for a space, `/` left as it is); JSON-escaped (non-ASCII as it is or as `\\u…`); escaped
    as `repr` writes it between `'…'` and between `"…"`. None for a value shorter than
    `SHORTEST`."""
    if len(secret) < SHORTEST:
        return frozenset()
    raw = "surrogateescape"  # a value from the environment that was no UTF-8: its bytes
    encoded = quote(secret, safe="", errors=raw)
    lower = re.sub(r"%[0-9A-F]{2}", lambda m: m[0].lower(), encoded)
    forms = {
        secret,
        encoded,
        lower,
        quote(secret, errors=raw),
        quote_plus(secret, errors=raw),
        json.dumps(secret)[1:-1],
        json.dumps(secret, ensure_ascii=False)[1:-1],
        repr("'" + secret + '"')[3:-2],  # with both quotes, repr writes '…' and escapes '
    }
    if '"' not in secret:  # a text with a ' and no " is written "…", its ' as it is
        forms.add(repr("'" + secret)[2:-1])
    return frozenset(forms)


@dataclass(frozen=True, slots=True)
class Redactor:
    """Replaces each spelling of its secrets (`written`) by that secret's mask, longest
    spelling first, so that one never leaves a piece of another. Empty (false) when it has
    no secret."""

    pairs: tuple[tuple[str, str], ...] = ()  # (spelling, mask), longest first
    encoded: tuple[tuple[bytes, bytes], ...] = ()  # the same in UTF-8
    probes: tuple[bytes, ...] = ()  # the spellings alone, in UTF-8

    @classmethod
    def of(cls, masks: Mapping[str, str]) -> Redactor:
        """A redactor of each secret in `masks` (secret → what it is shown as instead)."""
        spelled = {form: mask for secret, mask in masks.items() for form in written(secret)}
        pairs = tuple(sorted(spelled.items(), key=lambda p: (-len(p[0]), p[0])))
        encoded = tuple((_utf8(form), _utf8(mask)) for form, mask in pairs)
        return cls(pairs, encoded, tuple(form for form, _ in encoded))

    @classmethod
    def masking(cls, secrets: Iterable[str | None]) -> Redactor:
        """A redactor that shows each of `secrets` (None and "" ignored) as `***`."""
        return cls.of(dict.fromkeys((s for s in secrets if s), MASK))

    def __bool__(self) -> bool:
        return bool(self.pairs)

    def text(self, text: str) -> str:
        """`text` without a secret."""
        for form, mask in self.pairs:
            if form in text:
                text = text.replace(form, mask)
        return text

    def body(self, raw: bytes) -> bytes:
        """`raw` without a secret; `raw` itself (one `in` test per spelling) when it holds
        none."""
        for probe in self.probes:
            if probe in raw:
                break
        else:
            return raw
        for form, mask in self.encoded:
            raw = raw.replace(form, mask)
        return raw


def _utf8(text: str) -> bytes:
    """`text` as bytes; a value from the environment that was no UTF-8 as the bytes it was."""
    return text.encode("utf-8", "surrogateescape")
