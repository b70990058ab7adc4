"""Identity keys (protocol §12): name plus fingerprints, never a key's value."""

from __future__ import annotations

from agent_reach.core.identity import at_endpoint, quota_key, split, state_key

KEY = "sk-very-secret-123456"


def test_state_key_changes_with_endpoint_and_key_but_never_shows_them() -> None:
    base = state_key("zhipu-api", "https://a.example/v1/chat/completions", KEY)
    assert base.startswith("zhipu-api@")
    assert KEY not in base
    assert "a.example" not in base
    assert state_key("zhipu-api", "https://a.example/v1/chat/completions", KEY) == base
    assert state_key("zhipu-api", "https://b.example/v1/chat/completions", KEY) != base
    assert state_key("zhipu-api", "https://a.example/v1/chat/completions", KEY + "x") != base
    assert state_key("zhipu-api", "https://a.example/v1/chat/completions", None) != base
    assert state_key("other", "https://a.example/v1/chat/completions", KEY) != base


def test_quota_key_follows_the_key_not_the_endpoint() -> None:
    assert quota_key("p", KEY) == quota_key("p", KEY)
    assert quota_key("p", KEY) != quota_key("p", "sk-other")
    assert quota_key("p", KEY) != state_key("p", "https://a.example", KEY)
    assert KEY not in quota_key("p", KEY)


def test_split_reads_new_and_legacy_keys() -> None:
    name, fp = split(state_key("p.1", "http://x", None))
    assert name == "p.1"
    assert fp is not None
    assert len(fp) == 12
    assert split("legacy-name") == ("legacy-name", None)


def test_the_state_key_starts_the_same_at_one_endpoint_whatever_the_key() -> None:
    url = "https://a.example/v1/chat/completions"
    for key in (KEY, None, "sk-other"):
        assert state_key("zhipu-api", url, key).startswith(at_endpoint("zhipu-api", url))
    assert not state_key("zhipu-api", "https://b.example", KEY).startswith(
        at_endpoint("zhipu-api", url)
    )
