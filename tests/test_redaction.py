"""`redaction` (protocol §14), by tables: every spelling of a secret a text or a body may hold
is masked, longest first, and a body without one comes back as it was."""

from __future__ import annotations

import base64
import json
from urllib.parse import quote, quote_plus

import pytest

from agent_reach.core.proxies import Proxy
from agent_reach.core.redaction import Redactor, written

SECRETS = [
    "sk-plain-0a1b2c",
    "sk/with+odd=chars&",
    "sk\\back'single\"double",
    "sk\tctl\x01",
    "sk-ünï-ключ",
]


def spellings(secret: str) -> list[str]:
    """How the texts agent-reach shows may carry `secret`."""
    return [
        secret,
        quote(secret, safe=""),
        quote(secret, safe="").lower(),
        quote(secret),
        quote_plus(secret),
        json.dumps(secret)[1:-1],
        json.dumps(secret, ensure_ascii=False)[1:-1],
        repr(f"key={secret}"),
        repr(f"'{secret}"),
        repr(f"\"'{secret}"),
    ]


@pytest.mark.parametrize("secret", SECRETS)
def test_every_spelling_is_masked_in_texts_and_bodies(secret: str) -> None:
    redactor = Redactor.masking([secret])
    for text in spellings(secret):
        core = "ctl" if "ctl" in secret else secret[3:8]
        assert core not in redactor.text(f"[{text}]"), text
        assert core.encode() not in redactor.body(f"[{text}]".encode()), text


def test_a_body_without_a_secret_is_the_same_object() -> None:
    redactor = Redactor.masking(["sk-plain-0a1b2c"])
    body = b'{"choices": []}'
    assert redactor.body(body) is body
    assert redactor.body(b"data: sk-plain-0a1b2c\n\n") == b"data: ***\n\n"


def test_short_values_and_none_are_no_secrets() -> None:
    assert written("ab") == frozenset()
    redactor = Redactor.masking([None, "", "ab"])
    assert not redactor
    assert redactor.text("ab cd") == "ab cd"


def test_longest_spelling_first_and_each_its_own_mask() -> None:
    redactor = Redactor.of({"abc": "${A}", "abcdef": "${B}"})
    assert redactor.text("abcdef abc") == "${B} ${A}"


def test_a_proxy_s_credentials_include_their_base64() -> None:
    proxy = Proxy("127.0.0.1", 8080, "user", "pa:ss")
    token = base64.b64encode(b"user:pa:ss").decode()
    assert proxy.secrets == ("pa:ss", "user:pa:ss", token)
    assert Redactor.masking(proxy.secrets).text(f"Proxy-Authorization: Basic {token}") == (
        "Proxy-Authorization: Basic ***"
    )
    assert Proxy("127.0.0.1", 8080).secrets == ()
