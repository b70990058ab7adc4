"""Loading and validating config files (protocol §2)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent_reach import ConfigError, dialects
from agent_reach.config import (
    Config,
    EmailAlert,
    Provider,
    Timeout,
    WebhookAlert,
    config_from_data,
    load_config,
)
from agent_reach.config.describe import locate

EXAMPLES = Path(__file__).parent.parent / "examples"
MIN = {"providers": [{"name": "a", "endpoint": "http://127.0.0.1:9/v1/chat/completions"}]}


def write(tmp_path: Path, data: Any, name: str = "config.yaml") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


def error_of(tmp_path: Path, data: Any) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, data))
    return str(info.value)


def test_seed_example_loads_unchanged() -> None:
    cfg = load_config(EXAMPLES / "seed-config.yaml")
    names = [p.name for p in cfg.providers]
    assert names == ["deepseek-official", "local-ollama", "minimax-abab6.5"]
    ollama = cfg.provider("local-ollama")
    assert ollama.timeout.connect == 200
    assert ollama.schema_compatibility.choices_path == "message"
    assert ollama.auth_scheme == ""
    assert cfg.provider("deepseek-official").auth_scheme == "Bearer"
    assert cfg.provider("minimax-abab6.5").metadata["rate_limit"] == "100req/day"


@pytest.mark.parametrize("name", ["config.yaml", "embedded-fallbacks.yaml"])
def test_other_examples_load(name: str) -> None:
    assert load_config(EXAMPLES / name).providers


def test_agent_reach_fallbacks_alias() -> None:
    cfg = load_config(EXAMPLES / "embedded-fallbacks.yaml")
    assert [p.name for p in cfg.providers] == ["qwen-official", "local-qwen"]


def test_json_file(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps(MIN))
    assert load_config(path).providers[0].name == "a"


def test_lookup_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    (home / ".agent-reach").mkdir(parents=True)
    write(home / ".agent-reach", {"providers": [{**MIN["providers"][0], "name": "from-home"}]})
    env_file = write(
        tmp_path, {"providers": [{**MIN["providers"][0], "name": "from-env"}]}, "e.yaml"
    )
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("AGENT_REACH_CONFIG", raising=False)
    assert load_config().providers[0].name == "from-home"
    monkeypatch.setenv("AGENT_REACH_CONFIG", str(env_file))
    assert load_config().providers[0].name == "from-env"
    explicit = write(tmp_path, MIN, "x.yaml")
    assert load_config(explicit).providers[0].name == "a"
    monkeypatch.setenv("AGENT_REACH_CONFIG", str(tmp_path / "missing.yaml"))
    with pytest.raises(ConfigError, match="no config file"):
        load_config()


def test_env_expansion(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AR_HOST", "http://10.1.2.3:11434")
    monkeypatch.delenv("AR_UNSET", raising=False)
    data = {
        "providers": [
            {"name": "a", "endpoint": "${AR_HOST}/api/chat"},
            {"name": "b", "endpoint": "${AR_UNSET:-http://localhost:1}/v1/chat/completions"},
        ]
    }
    cfg = load_config(write(tmp_path, data))
    assert cfg.providers[0].endpoint == "http://10.1.2.3:11434/api/chat"
    assert cfg.providers[1].endpoint == "http://localhost:1/v1/chat/completions"
    msg = error_of(tmp_path, {"providers": [{"name": "a", "endpoint": "${AR_UNSET}/x"}]})
    assert "${AR_UNSET} is not set" in msg
    assert "provider 'a'" in msg


def test_defaults_apply_and_merge() -> None:
    cfg = config_from_data(
        {
            "defaults": {"timeout": {"read": 9000}, "retries": 2, "metadata": {"team": "x"}},
            "providers": [
                {
                    "name": "a",
                    "endpoint": "http://h/v1/chat/completions",
                    "timeout": {"connect": 5},
                },
                {"name": "b", "endpoint": "http://h/api/chat", "format": "ollama", "retries": 0},
            ],
        }
    )
    a, b = cfg.providers
    assert (a.timeout.connect, a.timeout.read, a.retries) == (5, 9000, 2)
    assert b.retries == 0
    assert b.metadata == {"team": "x"}


def test_format_defaults() -> None:
    cfg = config_from_data(
        {
            "providers": [
                {"name": "o", "endpoint": "http://h:11434/api/chat", "format": "ollama"},
                {
                    "name": "x",
                    "endpoint": "http://h/v1/chat/completions",
                    "auth_header": "x-api-key",
                },
            ]
        }
    )
    o, x = cfg.providers
    assert (o.health_check, o.max_tokens_field) == ("tags", "num_predict")
    assert o.schema_compatibility.choices_path == "message"
    assert (x.health_check, x.auth_scheme) == ("../models", "")


@pytest.mark.parametrize("health", [False, "off", {"mode": False}, {"mode": "off", "ttl_s": 3}])
def test_bare_off_is_off(health: Any) -> None:
    assert config_from_data({**MIN, "health": health}).health.mode == "off"


def test_yaml_bare_off(tmp_path: Path) -> None:
    text = "health: {mode: off}\nproviders:\n  - {name: a, endpoint: 'http://h/v1/x'}\n"
    assert load_config(write(tmp_path, text)).health.mode == "off"


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (
            {"providers": [{"name": "a", "endpoint": "http://h/x", "timout": {}}]},
            ["provider 'a' (providers[0])", "field 'timout'", "did you mean 'timeout'"],
        ),
        (
            {"providers": [{"name": "a", "endpoint": "http://h/x", "timeout": {"red": 1}}]},
            ["provider 'a'", "timeout.red", "did you mean 'read'"],
        ),
        (
            {"providers": [{"name": "a", "endpoint": "http://h/x", "timeout": {"read": -1}}]},
            ["provider 'a'", "timeout.read", "greater than 0", "got -1"],
        ),
        (
            {"providers": [{"name": "a", "endpoint": "ftp://h/x"}]},
            ["provider 'a'", "field 'endpoint'", "http(s) URL"],
        ),
        (
            {"providers": [{"name": "a", "endpoint": "http://h/x", "format": "grpc"}]},
            ["field 'format'", "'openai'"],
        ),
        (
            {"providers": [{"name": "a b", "endpoint": "http://h/x"}]},
            ["field 'name'"],
        ),
        (
            {"providers": [{"name": "a", "endpoint": "http://h/x", "api_key_env": "sk-pw9"}]},
            ["field 'api_key_env'", "NAME of an environment variable"],
        ),
        ({"providers": [{"endpoint": "http://h/x"}]}, ["providers[0]", "field 'name'", "required"]),
        ({**MIN, "version": "1.0"}, ["field 'version'", "0.3.x"]),
        ({**MIN, "fallback_order": ["a", "bb"]}, ["no provider named 'bb'"]),
        ({**MIN, "routes": {"r": ["a", "zz"]}}, ["routes.r", "'zz'"]),
        ({**MIN, "heath": {}}, ["field 'heath'", "did you mean 'health'"]),
        ({**MIN, "defaults": {"retires": 1}}, ["defaults", "did you mean 'retries'"]),
        ({**MIN, "state": "postgres://x"}, ["field 'state'", "sqlite:///"]),
        (
            {**MIN, "server": {"max_head_bytes": 512}},
            ["field 'server.max_head_bytes'", "greater than or equal to 1024", "got 512"],
        ),
        (
            {**MIN, "server": {"max_requests_per_key": 0}},
            ["field 'server.max_requests_per_key'", "greater than 0", "got 0"],
        ),
        (
            {**MIN, "server": {"max_upstream_connections": 8, "max_upstream_per_origin": 9}},
            ["max_upstream_per_origin (9) is above max_upstream_connections (8)"],
        ),
        ({**MIN, "alerts": [{"type": "webhook"}]}, ["field 'alerts.0.url'", "required"]),
        ({**MIN, "alerts": [{"type": "pager"}]}, ["alerts.0"]),
        ({**MIN, "alerts": [{"type": "webhook", "urll": "x"}]}, ["did you mean 'url'"]),
        (
            {**MIN, "alerts": [{"type": "email", "smtp_host": "h", "from": "a", "to": 5}]},
            ["field 'alerts.0.to': Input should be a valid list (got 5)"],
        ),
        ({"providers": []}, ["field 'providers'"]),
        (
            {"providers": [MIN["providers"][0], MIN["providers"][0]]},
            ["'a' is used twice"],
        ),
        ([1, 2], ["mapping at the top level"]),
        (
            {"providers": [{"name": "a", "endpoint": "http://h/x", "proxy": "socks5://u:pw9@h:1"}]},
            ["provider 'a'", "field 'proxy'", "socks5:// proxies are not supported", "***@h:1"],
        ),
        (
            {"providers": [{"name": "a", "endpoint": "http://h/x", "proxy_auth_env": "u:pw9"}]},
            ["provider 'a'", "field 'proxy_auth_env'", "NAME of an environment variable"],
        ),
        (
            {"providers": [{"name": "a", "endpoint": "http://h/x", "session_header": "conv id"}]},
            ["provider 'a'", "field 'session_header'", "should match pattern"],
        ),
        (
            {
                "providers": [
                    {"name": "a", "endpoint": "http://h/x", "session_header": "Authorization"}
                ]
            },
            ["provider 'a'", "field 'session_header'", "a header agent-reach sets itself"],
        ),
        (
            {
                "providers": [
                    {"name": "a", "endpoint": "http://h/x", "auth_header": "X-Key"}
                    | {"session_header": "x-key"}
                ]
            },
            ["provider 'a'", "field 'session_header'", "a header agent-reach sets itself"],
        ),
    ],
)
def test_errors_name_file_provider_and_field(
    tmp_path: Path, data: Any, expected: list[str]
) -> None:
    msg = error_of(tmp_path, data)
    assert str(tmp_path / "config.yaml") in msg
    for piece in expected:
        assert piece in msg, msg
    assert "pw9" not in msg  # a key or a proxy's password is never quoted


def test_yaml_syntax_error_has_a_line(tmp_path: Path) -> None:
    msg = error_of(tmp_path, "providers:\n  - name: a\n    endpoint: [unclosed\n")
    assert "line " in msg
    assert "invalid YAML" in msg


@pytest.mark.parametrize(
    ("fmt", "header", "scheme"),
    [
        ("openai", "Authorization", "Bearer"),
        ("ollama", "Authorization", "Bearer"),
        ("dashscope", "Authorization", "Bearer"),
        ("minimax", "Authorization", "Bearer"),
        ("ernie", "Authorization", "Bearer"),
        ("anthropic", "x-api-key", ""),
        ("gemini", "x-goog-api-key", ""),
    ],
)
def test_every_format_loads_with_its_auth_default(fmt: str, header: str, scheme: str) -> None:
    cfg = config_from_data({"providers": [{"name": "a", "endpoint": "http://h/x", "format": fmt}]})
    assert (cfg.providers[0].auth_header, cfg.providers[0].auth_scheme) == (header, scheme)


@pytest.mark.parametrize(
    ("loc", "path", "holder"),
    [
        # a discriminated union's tag: dropped, and the walk goes on in the tagged member
        (("alerts", 0, "webhook", "url"), ("alerts", 0, "url"), WebhookAlert),
        (("alerts", 0, "webhook", "urll"), ("alerts", 0, "urll"), WebhookAlert),
        # a plain union's member type: dropped
        (("alerts", 0, "email", "to", "list[str]"), ("alerts", 0, "to"), EmailAlert),
        (("alerts", 0, "email", "to", "list[str]", 1), ("alerts", 0, "to", 1), None),
        # a validator's wrapper, whatever pydantic calls it: dropped
        (
            ("function-after[_names(), Config]", "providers", 2, "timout"),
            ("providers", 2, "timout"),
            Provider,
        ),
        (
            ("wrap[some_future_name]", "providers", 0, "timeout", "red"),
            ("providers", 0, "timeout", "red"),
            Timeout,
        ),
        (("routes", "r", "providers", 1), ("routes", "r", "providers", 1), None),
        ((), (), None),
    ],
)
def test_error_locations_keep_only_fields(loc: Any, path: Any, holder: Any) -> None:
    assert locate(loc, Config) == (path, holder)


def test_the_schema_lists_the_dialects_formats() -> None:
    schema = Config.model_json_schema(by_alias=True)
    fmt = schema["$defs"]["Provider"]["properties"]["format"]
    assert fmt["enum"] == list(dialects.FORMATS)
    assert fmt["default"] == "openai"
