"""Whose remembered state is whose (protocol §12 "Identity"). Pure.

Circuits and health results belong to a provider's identity: its name plus a fingerprint of
its endpoint and key. Quota counters belong to its name plus a fingerprint of its key alone
(the budget is the account's, wherever it is reached). A fingerprint is a short hash, never
the value: editing an endpoint or fixing a key starts the provider fresh, and two config
files that reuse a name for different endpoints never share a circuit.

Every store call goes through these keys, written `NAME@FINGERPRINT` (a name never holds an
`@`). Keys without an `@` were written by versions before identities; they are ignored.

A state fingerprint starts with 6 digits of the endpoint alone (`at_endpoint`), so a process
without the key (a `status` in a shell where the key variable is not set) still finds what a
process with it recorded for that name at that endpoint.
"""

from __future__ import annotations

import hashlib

SEP = "@"


def fingerprint(*parts: str) -> str:
    """12 hex digits of a SHA-256 over `parts`: enough to tell values apart, useless to
    recover a key from."""
    digest = hashlib.sha256("\0".join(parts).encode())
    return digest.hexdigest()[:12]


def state_key(name: str, endpoint: str, key: str | None) -> str:
    """The key of a provider's circuit and health: name, endpoint and key."""
    return at_endpoint(name, endpoint) + fingerprint("state", endpoint, key or "")[:6]


def at_endpoint(name: str, endpoint: str) -> str:
    """The start shared by the state keys of `name` at `endpoint`, whatever the key."""
    return f"{name}{SEP}{fingerprint('endpoint', endpoint)[:6]}"


def quota_key(name: str, key: str | None) -> str:
    """The key of a provider's budget counters: name and key."""
    return f"{name}{SEP}{fingerprint('quota', key or '')}"


def split(stored: str) -> tuple[str, str | None]:
    """(provider name, fingerprint) of a stored key; fingerprint None for a legacy key."""
    name, sep, fp = stored.partition(SEP)
    return name, fp if sep else None


def endpoint_of(stored: str) -> str | None:
    """The `at_endpoint` start of a stored state key; None for a legacy key."""
    name, fp = split(stored)
    return None if fp is None else f"{name}{SEP}{fp[:6]}"
