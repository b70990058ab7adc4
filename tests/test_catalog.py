"""The provider catalog: its data, the loader, and the pure functions `probe` recognises an
endpoint with (format from URL and answer, custom paths, level), by tables."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent_reach import catalog
from agent_reach.catalog import Entry
from agent_reach.chat import paths
from agent_reach.config import config_from_data
from agent_reach.config.write import to_yaml

DOCS = Path(__file__).parents[1] / "docs" / "providers.md"
REQUIRED = {
    "openai",
    "deepseek",
    "zhipu",
    "dashscope",
    "dashscope-compatible",
    "moonshot",
    "minimax-v1",
    "minimax-v2",
    "ernie",
    "qianfan",
    "anthropic",
    "gemini",
    "gemini-openai",
    "ollama",
    "ollama-openai",
    "vllm",
    "llamacpp",
    "lmstudio",
    "groq",
    "openrouter",
    "together",
}


@pytest.fixture
def group_id(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MINIMAX_GROUP_ID", "1234567")


# -- the data ----------------------------------------------------------------------------------


def test_catalog_has_every_required_endpoint() -> None:
    names = [e.name for e in catalog.load()]
    assert set(names) >= REQUIRED
    assert len(names) == len(set(names))
    assert catalog.get("deepseek").endpoint == "https://api.deepseek.com/chat/completions"
    with pytest.raises(KeyError):
        catalog.get("nope")


@pytest.mark.usefixtures("group_id")
@pytest.mark.parametrize("entry", catalog.load(), ids=lambda e: e.name)
def test_every_entry_is_a_valid_provider(entry: Entry) -> None:
    config = config_from_data({"version": "0.3.2", "providers": [entry.provider()]})
    provider = config.providers[0]
    assert provider.name == entry.name
    assert provider.format == entry.format
    assert provider.api_key_env == entry.key_env
    assert provider.health_check == entry.health_check
    assert (provider.models or []) == list(entry.models)
    # The level follows from the format (protocol §13): known endpoints never need custom paths.
    assert entry.level == catalog.level_of(entry.format)
    # Local servers take no key; every remote one names its variable.
    assert entry.local == (entry.key_env == "")


@pytest.mark.parametrize(
    ("name", "key_env", "auth", "fields"),
    [
        ("openai", "OPENAI_API_KEY", "Authorization: Bearer", {}),
        ("zhipu", "ZHIPU_API_KEY", "Authorization: Bearer", {}),
        ("moonshot", "MOONSHOT_API_KEY", "Authorization: Bearer", {}),
        ("qianfan", "QIANFAN_API_KEY", "Authorization: Bearer", {}),
        ("anthropic", "ANTHROPIC_API_KEY", "x-api-key", {"auth_header": "x-api-key"}),
        ("gemini", "GEMINI_API_KEY", "x-goog-api-key", {"auth_header": "x-goog-api-key"}),
        (
            "ernie",
            "ERNIE_ACCESS_TOKEN",
            "query access_token",
            {"auth_header": "", "auth_query": "access_token"},
        ),
        ("ollama", "", "none", {"auth_header": "", "health_check": "tags"}),
        ("groq", "GROQ_API_KEY", "Authorization: Bearer", {}),
        ("openrouter", "OPENROUTER_API_KEY", "Authorization: Bearer", {}),
        ("together", "TOGETHER_API_KEY", "Authorization: Bearer", {}),
    ],
)
def test_auth_of_entries(name: str, key_env: str, auth: str, fields: dict[str, str]) -> None:
    entry = catalog.get(name)
    assert entry.key_env == key_env
    assert entry.auth == auth
    provider = entry.provider()
    assert {k: provider[k] for k in fields} == fields


def test_formats_of_entries_match_their_dialects() -> None:
    formats = {e.name: e.format for e in catalog.load()}
    assert formats["dashscope"] == "dashscope"
    assert formats["dashscope-compatible"] == "openai"
    assert formats["minimax-v1"] == formats["minimax-v2"] == "minimax"
    assert formats["gemini"] == "gemini"
    assert formats["gemini-openai"] == "openai"
    assert formats["ollama"] == "ollama"
    assert formats["ollama-openai"] == "openai"
    # The URL of every entry suggests its own format first.
    for e in catalog.load():
        assert catalog.formats_for_url(e.endpoint)[0] == e.format, e.name


def test_entry_json_form() -> None:
    data = catalog.get("minimax-v1").to_dict()
    assert data["requires"] == ["MINIMAX_GROUP_ID"]
    assert data["auth"] == "Authorization: Bearer"
    assert data["provider"]["endpoint"].endswith("GroupId=${MINIMAX_GROUP_ID}")
    assert data["models"] == list(catalog.get("minimax-v1").models)


def test_a_documented_prefill_is_in_the_config_entry() -> None:
    # DeepSeek's prefix completion, on its beta base URL only (protocol §10, continuation)
    assert catalog.get("deepseek-beta").provider()["assistant_prefill"] is True
    assert "assistant_prefill" not in catalog.get("deepseek").provider()


def test_overrides_replace_fields() -> None:
    provider = catalog.get("ollama").provider(endpoint="http://127.0.0.1:1/api/chat", models=["m"])
    assert provider["endpoint"] == "http://127.0.0.1:1/api/chat"
    assert provider["models"] == ["m"]


def test_docs_table_matches_the_catalog() -> None:
    text = (DOCS.parent / "reference" / "providers.md").read_text(encoding="utf-8")
    header = "| name | provider | format | level | key variable | auth | endpoint |"
    block = text.split(header, 1)[1].split("\n\n", 1)[0]
    rows = [line for line in block.splitlines() if line.startswith("| `")]
    expected = []
    for e in catalog.load():
        key = f"`{e.key_env}`" if e.key_env else "none"
        if e.requires:
            key += " + " + ", ".join(f"`{v}`" for v in e.requires)
        expected.append(
            f"| `{e.name}` | {e.title} | {e.format} | {e.level} | {key} | {e.auth} | `{e.endpoint}` |"
        )
    assert rows == expected
    for e in catalog.load():
        assert f"- `{e.name}`: {e.notes}" in text


# -- the loader --------------------------------------------------------------------------------

GOOD: dict[str, Any] = {
    "name": "x",
    "title": "X",
    "endpoint": "https://x.example/v1/chat/completions",
    "format": "openai",
    "level": "full",
}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"providers": []}, "a list of entries"),
        (["x"], "expected a mapping"),
        ([{**GOOD, "colour": "red"}], "unknown field(s) colour"),
        ([{k: v for k, v in GOOD.items() if k != "title"}], "title"),
        ([{**GOOD, "format": "soap"}], "field 'format'"),
        ([{**GOOD, "level": "great"}], "field 'level'"),
        ([{**GOOD, "name": "a b"}], "field 'name'"),
        ([{**GOOD, "key_env": "NOT-A-VAR"}], "field 'key_env'"),
        ([{**GOOD, "endpoint": "ftp://x"}], "field 'endpoint'"),
        ([{**GOOD, "models": "gpt"}], "field 'models'"),
        ([{**GOOD, "local": "yes"}], "field 'local'"),
        ([{**GOOD, "assistant_prefill": "yes"}], "field 'assistant_prefill'"),
        ([GOOD, GOOD], "used twice"),
    ],
)
def test_parse_rejects_bad_data(data: Any, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        catalog.parse(data)


def test_parse_reads_lists_as_tuples() -> None:
    (entry,) = catalog.parse([{**GOOD, "models": ["a", "b"], "requires": ["V"]}])
    assert entry.models == ("a", "b")
    assert entry.requires == ("V",)
    assert entry.auth == "none"  # no key variable


# -- recognising an endpoint -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "formats"),
    [
        ("https://api.openai.com/v1/chat/completions", ("openai",)),
        ("http://localhost:11434/v1/chat/completions", ("openai",)),
        ("http://localhost:11434/api/chat", ("ollama", "openai")),
        ("http://localhost:11434/api/generate", ("ollama", "openai")),
        ("https://api.anthropic.com/v1/messages", ("anthropic", "openai")),
        ("https://generativelanguage.googleapis.com/v1beta/models", ("gemini", "openai")),
        ("http://h/v1beta/models/gemini-2.0-flash:generateContent", ("gemini", "openai")),
        ("http://h/v1beta/models/{model}:streamGenerateContent?alt=sse", ("gemini", "openai")),
        ("https://generativelanguage.googleapis.com/v1beta/openai/chat/completions", ("openai",)),
        (
            "https://dashscope.aliyuncs.com/api/v1/services/aigc/text-generation/generation",
            ("dashscope", "openai"),
        ),
        ("https://api.minimax.chat/v1/text/chatcompletion?GroupId=1", ("minimax", "openai")),
        ("https://api.minimax.chat/v1/text/chatcompletion_v2", ("minimax", "openai")),
        ("https://aip.baidubce.com/x/wenxinworkshop/chat/completions_pro", ("ernie", "openai")),
        ("http://localhost:9000/identify", ("openai",)),
    ],
)
def test_formats_for_url(url: str, formats: tuple[str, ...]) -> None:
    assert catalog.formats_for_url(url) == formats


@pytest.mark.parametrize(
    ("url", "found"),
    [
        (
            "https://api.deepseek.com/anthropic",
            ("anthropic", "https://api.deepseek.com/anthropic/v1/messages"),
        ),
        (
            "https://dashscope.aliyuncs.com/apps/anthropic/",
            ("anthropic", "https://dashscope.aliyuncs.com/apps/anthropic/v1/messages"),
        ),
        ("http://host:8000/v1", ("openai", "http://host:8000/v1/chat/completions")),
        (
            "https://open.bigmodel.cn/api/paas/v4",
            ("openai", "https://open.bigmodel.cn/api/paas/v4/chat/completions"),
        ),
        ("https://api.deepseek.com/anthropic/v1/messages", None),
        ("http://host:8000/v1/chat/completions", None),
        ("http://127.0.0.1:11434/api/chat", None),
    ],
)
def test_endpoint_of_base(url: str, found: tuple[str, str] | None) -> None:
    assert catalog.endpoint_of_base(url) == found
    if found is not None:  # known without a request: the base URL alone suggests the format
        assert catalog.formats_for_url(url)[0] == found[0]


def test_every_anthropic_compatible_entry_is_recognised_from_its_base_url() -> None:
    entries = [e for e in catalog.load() if e.endpoint.endswith("/anthropic/v1/messages")]
    assert {e.name for e in entries} == {
        "deepseek-anthropic",
        "zhipu-anthropic",
        "zai-anthropic",
        "moonshot-anthropic",
        "minimax-anthropic",
        "dashscope-anthropic",
    }
    for e in entries:
        base = e.endpoint.removesuffix("/v1/messages")
        assert catalog.formats_for_url(base)[0] == "anthropic", e.name
        assert catalog.endpoint_of_base(base) == ("anthropic", e.endpoint)


OPENAI_ANSWER = {
    "object": "chat.completion",
    "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "OK"}}],
}
ANSWERS: list[tuple[str, Any, tuple[str, ...]]] = [
    ("openai", OPENAI_ANSWER, ("openai", "minimax")),  # Minimax v2 reads OpenAI answers too
    (
        "ollama",
        {"model": "m", "message": {"role": "assistant", "content": "OK"}, "done": True},
        ("ollama",),
    ),
    (
        "anthropic",
        {"type": "message", "content": [{"type": "text", "text": "OK"}], "stop_reason": "end_turn"},
        ("anthropic",),
    ),
    (
        "gemini",
        {"candidates": [{"content": {"parts": [{"text": "OK"}], "role": "model"}}]},
        ("gemini",),
    ),
    (
        "dashscope",
        {"output": {"choices": [{"message": {"content": "OK"}, "finish_reason": "stop"}]}},
        ("dashscope",),
    ),
    ("dashscope legacy", {"output": {"text": "OK", "finish_reason": "stop"}}, ("dashscope",)),
    ("ernie", {"result": "OK", "is_truncated": False}, ("ernie",)),
    (
        "minimax v1",
        {"reply": "OK", "choices": [{"messages": [{"sender_type": "BOT", "text": "OK"}]}]},
        ("minimax",),
    ),
    ("antique", {"item": "青花瓷瓶", "era": "明永乐", "confidence": 0.92}, ()),
    ("data", {"data": {"text": "OK"}}, ()),
    ("error", {"error": {"message": "bad key", "code": "401"}}, ()),
    ("minimax error", {"base_resp": {"status_code": 1004, "status_msg": "no"}, "reply": "x"}, ()),
    ("empty content", {**OPENAI_ANSWER, "choices": [{"message": {"content": ""}}]}, ()),
    ("not an object", ["OK"], ()),
]


@pytest.mark.parametrize(("what", "raw", "formats"), ANSWERS, ids=[a[0] for a in ANSWERS])
def test_formats_for_answer(what: str, raw: Any, formats: tuple[str, ...]) -> None:
    assert catalog.formats_for_answer(raw, "http://h/x") == formats


def test_formats_for_answer_uses_the_endpoint_version() -> None:
    v1 = {"reply": "OK", "choices": [{"messages": [{"sender_type": "BOT", "text": "OK"}]}]}
    assert catalog.formats_for_answer(v1, "http://h/v1/text/chatcompletion_v2") == ("minimax",)


@pytest.mark.parametrize(
    ("raw", "expected", "text"),
    [
        ({"item": "青花瓷瓶", "era": "明永乐", "confidence": 0.92}, ("", "item"), "青花瓷瓶"),
        ({"id": "gen-1", "data": {"text": "hello"}}, ("data", "text"), "hello"),
        ({"results": [{"score": 1, "output": "hi"}]}, ("results", "output"), "hi"),
        ({"texts": ["first", "second"]}, ("texts", ""), "first"),
        ({"a": {"b": {"c": "deep"}}}, ("a.b", "c"), "deep"),
        ({"out": [[{"t": "nested"}]]}, ("out", "0.t"), "nested"),
        ({"model": "m", "role": "x", "reply": " ", "answer": "yes"}, ("", "answer"), "yes"),
        ({"a.b": {"c/d": "odd keys"}}, ("/a.b", "/c~1d"), "odd keys"),
        ({"n": 1, "flag": True}, None, None),
        (["not", "an", "object"], None, None),
        ("text", None, None),
    ],
)
def test_content_paths(raw: Any, expected: tuple[str, str] | None, text: str | None) -> None:
    found = catalog.content_paths(raw)
    assert found == expected
    if found is not None:
        assert catalog.extracts(raw, *found) == text
        # The same paths, read the way the engine reads them.
        assert paths.extract(raw, *found)[1] == text


def test_level_of() -> None:
    assert catalog.level_of("openai") == "full"
    assert catalog.level_of("ollama") == "partial"
    assert catalog.level_of("gemini") == "partial"
    assert catalog.level_of("openai", custom_paths=True) == "manual"
    assert set(catalog.LEVEL_MEANING) == set(catalog.LEVELS) == {"full", "partial", "manual"}


# -- writing -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "base"),
    [
        (None, "http://127.0.0.1:11434"),
        ("", "http://127.0.0.1:11434"),
        ("127.0.0.1:5555", "http://127.0.0.1:5555"),
        ("ollama.lan", "http://ollama.lan:11434"),
        ("http://ollama.lan", "http://ollama.lan"),
        ("https://ollama.lan", "https://ollama.lan"),
        ("http://127.0.0.1:4444/", "http://127.0.0.1:4444"),
        ("[::1]:9000", "http://[::1]:9000"),
        (" 0.0.0.0:11434 ", "http://0.0.0.0:11434"),
    ],
)
def test_ollama_base(value: str | None, base: str) -> None:
    assert catalog.ollama_base(value) == base


@pytest.mark.usefixtures("group_id")
def test_to_yaml_round_trips_every_entry() -> None:
    entries = [e.provider() for e in catalog.load()]
    text = to_yaml(entries, indent=2)
    assert all(line.startswith("  ") for line in text.splitlines() if line.strip())
    assert "  models: [gpt-4o-mini, gpt-4o, gpt-4.1-mini]\n" in text  # flow lists
    assert yaml.safe_load("providers:\n" + text) == {"providers": entries}
    config_from_data(yaml.safe_load(f"version: '0.3.2'\nproviders:\n{text}"))


# -- embeddings --------------------------------------------------------------------------------


def test_every_embedding_entry_is_a_valid_provider_of_its_spaces() -> None:
    served = [e for e in catalog.load() if e.embeddings]
    assert {e.name for e in served} >= {"openai", "zhipu", "dashscope-compatible", "gemini"}
    providers = [{**e.provider(), "embeddings": e.embedding()} for e in served]
    config = config_from_data(
        {
            "version": "0.3.2",
            "embeddings": {"spaces": catalog.spaces(served)},
            "providers": [{**p, "name": f"p{i}"} for i, p in enumerate(providers)],
        }
    )
    gemini = [p.name for p, e in zip(config.providers, served, strict=True) if "gemini" in e.name]
    assert len(gemini) == 2  # native and OpenAI-compatible: one model, one space between them
    assert config.space_of("gemini-embedding-001") == "gemini-embedding-001"
    assert catalog.embedding_space("bge-m3:latest") == ("bge-m3", 1024)
    assert catalog.embedding_space("llama3.2:latest") is None


def test_parse_refuses_one_model_at_two_widths() -> None:
    one = {**GOOD, "embeddings": {"e": 1024}}
    with pytest.raises(ValueError, match="e is 512 wide here, 1024 in 'x'"):
        catalog.parse([one, {**one, "name": "y", "embeddings": {"e": 512}}])
    with pytest.raises(ValueError, match="field 'embeddings'"):
        catalog.parse([{**GOOD, "embeddings": {"e": 0}}])


def test_docs_embeddings_table_matches_the_catalog() -> None:
    text = DOCS.read_text(encoding="utf-8")
    block = text.split("| entry | model (space) | width |", 1)[1].split("\n\n", 1)[0]
    rows = {tuple(c.strip(" `") for c in line.split("|")[1:4]) for line in block.splitlines()[2:]}
    expected = {
        (e.name, model, str(width)) for e in catalog.load() for model, width in e.embeddings.items()
    }
    assert rows == expected
