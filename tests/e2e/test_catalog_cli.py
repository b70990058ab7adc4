"""`agent-reach providers`, `init` and `probe` as a user runs them: subprocesses, against
simulated providers of every dialect on 127.0.0.1 (`tests/fakes/dialects.py`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from agent_reach import catalog
from agent_reach.config import config_from_data, load_config

from ..fakes.dialects import ANTIQUE, KEY, OLLAMA_MODELS, DialectServer, answer, running
from ..fakes.embeddings import vector
from ..fakes.upstream import refused_url

BIN = str(Path(sys.executable).parent / "agent-reach")
# Variables a developer's shell may have set that would change what init keeps.
_CLEARED = {e.key_env for e in catalog.load()} | {"OLLAMA_HOST", "MINIMAX_GROUP_ID"}


def run(
    *args: str, home: Path, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    base = {
        k: v for k, v in os.environ.items() if not k.startswith("AGENT_REACH") and k not in _CLEARED
    }
    base.update({"HOME": str(home), "PROBE_KEY": KEY}, **(env or {}))
    return subprocess.run(
        [BIN, *args],
        capture_output=True,
        text=True,
        env=base,
        timeout=timeout,
        check=False,
    )


def no_secrets(result: subprocess.CompletedProcess[str], *values: str) -> None:
    for value in (KEY, *values):
        assert value not in result.stdout
        assert value not in result.stderr


@pytest.fixture(scope="module")
def servers() -> Iterator[DialectServer]:
    with running() as server:
        yield server


@pytest.fixture
def srv(servers: DialectServer) -> DialectServer:
    servers.received.clear()
    return servers


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path


# -- providers ---------------------------------------------------------------------------------


def test_providers_table_lists_every_entry(home: Path) -> None:
    result = run("providers", home=home)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    for e in catalog.load():
        row = next((line for line in lines if line.split()[:1] == [e.name]), None)
        assert row is not None, e.name
        assert e.format in row
        assert e.level in row
        assert (e.key_env or "-") in row
        assert e.endpoint in row
    assert "partial = a built-in format adapter handles it" in result.stderr


def test_providers_json_entries_are_valid_providers(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = run("providers", "--json", home=home)
    assert result.returncode == 0, result.stderr
    entries = json.loads(result.stdout)
    assert [e["name"] for e in entries] == [e.name for e in catalog.load()]
    monkeypatch.setenv("MINIMAX_GROUP_ID", "1234567")
    config = config_from_data({"providers": [e["provider"] for e in entries]})
    assert [p.name for p in config.providers] == [e["name"] for e in entries]
    by_name = {e["name"]: e for e in entries}
    assert by_name["anthropic"]["level"] == "partial"
    assert by_name["deepseek"]["key_env"] == "DEEPSEEK_API_KEY"
    assert by_name["ernie"]["auth"] == "query access_token"
    assert by_name["vllm"]["local"] is True


# -- init --------------------------------------------------------------------------------------

INIT_KEYS = {
    "DEEPSEEK_API_KEY": "sk-deepseek-0000-VALUE",
    "ANTHROPIC_API_KEY": "sk-ant-1111-VALUE",
    "DASHSCOPE_API_KEY": "sk-dash-2222-VALUE",
    "MINIMAX_API_KEY": "mm-3333-VALUE",  # without MINIMAX_GROUP_ID: only v2 is possible
    "OPENAI_API_KEY": "",  # set but empty counts as unset
}


def test_init_keeps_set_keys_and_a_local_ollama(srv: DialectServer, home: Path) -> None:
    env = {**INIT_KEYS, "OLLAMA_HOST": srv.host}
    result = run("init", home=home, env=env)
    assert result.returncode == 0, result.stderr
    target = home / ".agent-reach" / "config.yaml"
    lines = result.stdout.splitlines()
    assert "openai: skipped (OPENAI_API_KEY is not set)" in lines
    assert "deepseek: kept (DEEPSEEK_API_KEY is set)" in lines
    assert "zhipu: skipped (ZHIPU_API_KEY is not set)" in lines
    assert "dashscope-compatible: kept (DASHSCOPE_API_KEY is set)" in lines
    assert "dashscope: skipped (DASHSCOPE_API_KEY is already used by dashscope-compatible)" in lines
    assert "minimax-v2: kept (MINIMAX_API_KEY is set)" in lines
    assert "minimax-v1: skipped (MINIMAX_API_KEY is already used by minimax-v2)" in lines
    assert "anthropic: kept (ANTHROPIC_API_KEY is set)" in lines
    # each key's Anthropic-compatible endpoint too: Claude Code's requests go there first
    for name, var in (("deepseek", "DEEPSEEK"), ("minimax", "MINIMAX"), ("dashscope", "DASHSCOPE")):
        assert (
            f"{name}-anthropic: kept ({var}_API_KEY is set; route claude-* sends Claude Code"
            " here first)"
        ) in lines
    assert f"ollama: kept (Ollama answers at {srv.url('/api/tags')}, 3 model(s))" in lines
    assert any(line.startswith("vllm: skipped (a local server") for line in lines)
    assert len([line for line in lines if ": kept (" in line or ": skipped (" in line]) == len(
        catalog.load()
    )
    assert f"wrote {target} with 8 provider(s)" in result.stdout

    text = target.read_text()
    for value in INIT_KEYS.values():
        if value:
            assert value not in text
    no_secrets(result, *(v for v in INIT_KEYS.values() if v))
    config = load_config(target)
    names = [p.name for p in config.providers]
    messages = ["deepseek-anthropic", "minimax-anthropic", "dashscope-anthropic"]
    chats = ["deepseek", "dashscope-compatible", "minimax-v2"]
    assert names == [*chats, "anthropic", *messages, "ollama"]
    # Claude Code's model names (claude-…) take the Anthropic endpoints first, untranslated
    assert config.routes["claude-*"].providers == ["anthropic", *messages, *chats, "ollama"]
    ollama = config.provider("ollama")
    assert ollama.endpoint == srv.url("/api/chat")
    ollama_chats = sorted(OLLAMA_MODELS[:2])  # bge-m3 embeds: it is no chat model
    assert ollama.models == ollama_chats
    # The embedding models of the kept providers, each its own space at its width; Ollama's
    # only where it has pulled one.
    assert ollama.embeddings is not None
    assert ollama.embeddings.models == {"bge-m3": "bge-m3:latest"}
    dash = config.provider("dashscope-compatible").embeddings
    assert dash is not None
    assert (dash.models, dash.max_batch) == ({"text-embedding-v4": "text-embedding-v4"}, 10)
    assert {name: s.dimensions for name, s in config.embeddings.spaces.items()} == {
        "text-embedding-v4": 1024,
        "bge-m3": 1024,
    }
    assert config.provider("anthropic").auth_header == "x-api-key"
    assert config.provider("deepseek").api_key_env == "DEEPSEEK_API_KEY"
    assert config.providers[0].timeout.read == 30000
    # Agent-ready: any model name goes to each provider's first model, but where the agents
    # send the provider's own names (Anthropic's claude-…).
    assert {p.name: p.model_map for p in config.providers} == {
        "deepseek": {"*": "deepseek-chat"},
        "dashscope-compatible": {"*": "qwen-plus"},
        "minimax-v2": {"*": catalog.get("minimax-v2").models[0]},
        "anthropic": {},
        **{m: {"*": catalog.get(m).models[0]} for m in messages},
        "ollama": {"*": ollama_chats[0]},
    }
    assert (
        "Codex CLI and Claude Code can use it: deepseek, dashscope-compatible, minimax-v2, "
        "deepseek-anthropic, minimax-anthropic, dashscope-anthropic, ollama map any model name"
        ' to their first model (model_map "*")'
    ) in lines

    # The written config works: the local Ollama answers through it.
    chat = run("chat", "-p", "hi", "--route", "ollama", home=home, env=env)
    assert chat.returncode == 0, chat.stderr
    assert chat.stdout == f"{answer('ollama')}\n"
    embed = run("embed", "-m", "bge-m3", "one", "two", home=home, env=env)
    assert embed.returncode == 0, embed.stderr
    got = [json.loads(line) for line in embed.stdout.splitlines()]
    assert got == [vector("bge-m3:latest", t, 1024) for t in ("one", "two")]

    again = run("init", home=home, env=env)
    assert again.returncode == 2
    assert "already exists; use --force" in again.stderr
    assert again.stdout == ""
    assert target.read_text() == text

    nowhere = refused_url().split("/v1")[0]
    forced = run(
        "init", "--force", home=home, env={"GROQ_API_KEY": "gsk-VALUE", "OLLAMA_HOST": nowhere}
    )
    assert forced.returncode == 0, forced.stderr
    assert f"ollama: skipped (no Ollama answers at {nowhere}/api/tags" in forced.stdout
    assert [p.name for p in load_config(target).providers] == ["groq"]


def test_init_writes_to_the_config_path_and_path(srv: DialectServer, home: Path) -> None:
    env = {"MOONSHOT_API_KEY": "sk-moon-VALUE", "OLLAMA_HOST": refused_url().split("/v1")[0]}
    given = home / "given.yaml"
    result = run("--config", str(given), "init", home=home, env=env)
    assert result.returncode == 0, result.stderr
    assert [p.name for p in load_config(given).providers] == ["moonshot", "moonshot-anthropic"]
    assert "ollama: skipped (no Ollama answers at" in result.stdout
    assert "connect_failed" in result.stdout
    other = home / "sub" / "other.json"
    result = run("--config", str(given), "init", "--path", str(other), home=home, env=env)
    assert result.returncode == 0, result.stderr
    assert json.loads(other.read_text())["providers"][0]["name"] == "moonshot"
    assert [p.name for p in load_config(other).providers] == ["moonshot", "moonshot-anthropic"]
    via_env = home / "env.yaml"
    result = run("init", home=home, env={**env, "AGENT_REACH_CONFIG": str(via_env)})
    assert result.returncode == 0, result.stderr
    assert via_env.exists()


def test_init_with_nothing_usable_writes_nothing(home: Path) -> None:
    result = run("init", home=home, env={"OLLAMA_HOST": refused_url().split("/v1")[0]})
    assert result.returncode == 1
    assert "nothing usable was found, so nothing was written" in result.stderr
    assert "deepseek: skipped (DEEPSEEK_API_KEY is not set)" in result.stdout
    assert not (home / ".agent-reach" / "config.yaml").exists()


# -- probe -------------------------------------------------------------------------------------

# (case, path, extra args, format, level, schema_compatibility paths)
DIALECTS = [
    ("openai", "/openai/v1/chat/completions", [], "openai", "full", ("choices", "message.content")),
    ("ollama", "/ollama/api/chat", [], "ollama", "partial", ("message", "content")),
    (
        "anthropic",
        "/anthropic/v1/messages",
        ["--api-key-env", "PROBE_KEY", "--model", "claude-test"],
        "anthropic",
        "partial",
        ("content", "text"),
    ),
    (
        "gemini",
        "/gemini/v1beta/models",
        ["--api-key-env", "PROBE_KEY", "--model", "gemini-2.0-flash"],
        "gemini",
        "partial",
        ("candidates", "content.parts.0.text"),
    ),
    (
        "dashscope",
        "/dashscope/api/v1/services/aigc/text-generation/generation",
        ["--model", "qwen-plus", "--api-key-env", "PROBE_KEY"],
        "dashscope",
        "partial",
        ("output.choices", "message.content"),
    ),
    (
        "minimax-v2",
        "/minimax/v1/text/chatcompletion_v2",
        ["--model", "MiniMax-Text-01"],
        "minimax",
        "partial",
        ("choices", "message.content"),
    ),
    (
        "minimax-v1",
        "/minimax/v1/text/chatcompletion",
        ["--model", "abab5.5-chat"],
        "minimax",
        "partial",
        ("choices", "messages.0.text"),
    ),
    (
        "ernie",
        "/ernie/rpc/2.0/ai_custom/v1/wenxinworkshop/chat/completions_pro",
        ["--api-key-env", "PROBE_KEY"],
        "ernie",
        "partial",
        ("result", ""),
    ),
]


@pytest.mark.parametrize(
    ("case", "path", "args", "fmt", "level", "shape"), DIALECTS, ids=[d[0] for d in DIALECTS]
)
def test_probe_names_format_and_level_and_writes_a_working_entry(
    srv: DialectServer,
    home: Path,
    case: str,
    path: str,
    args: list[str],
    fmt: str,
    level: str,
    shape: tuple[str, str],
) -> None:
    cfg = home / "config.yaml"
    url = srv.url(path)
    result = run("--config", str(cfg), "probe", url, *args, "--json", "--write", case, home=home)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["usable"] is True
    assert report["format"] == fmt
    assert report["detected_by"] == "suggested by the URL, confirmed by the answer"
    assert report["level"] == level
    assert report["stream"]["works"] is True, report["stream"]
    assert report["stream"]["chunks"] >= 2
    assert report["schema_compatibility"] == {"choices_path": shape[0], "content_path": shape[1]}
    assert report["tries"][-1]["status"] == 200
    assert report["tries"][-1]["answer"] == answer(fmt)
    assert report["tries"][-1]["ms"] > 0
    assert f"created {cfg} with provider '{case}'" in result.stderr
    no_secrets(result)
    assert KEY not in cfg.read_text()

    entry = load_config(cfg).provider(case)
    assert entry.format == fmt
    assert entry.endpoint == url
    if "--api-key-env" in args:
        assert entry.api_key_env == "PROBE_KEY"
    assert {r.path for r in srv.chats("/")} >= {path} or fmt == "gemini"

    chat = run("--config", str(cfg), "chat", "-p", "hi", home=home)
    assert chat.returncode == 0, chat.stderr
    assert chat.stdout == f"{answer(fmt)}\n"
    streamed = run("--config", str(cfg), "chat", "--stream", "-p", "hi", home=home)
    assert streamed.returncode == 0, streamed.stderr
    assert streamed.stdout == f"{answer(fmt)}\n"


@pytest.mark.parametrize(
    ("base", "endpoint", "fmt"),
    [
        ("/anthropic", "/anthropic/v1/messages", "anthropic"),
        ("/openai/v1", "/openai/v1/chat/completions", "openai"),
    ],
)
def test_probe_of_a_base_url_probes_its_endpoint(
    srv: DialectServer, home: Path, base: str, endpoint: str, fmt: str
) -> None:
    result = run("probe", srv.url(base), "--api-key-env", "PROBE_KEY", "--json", home=home)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert (report["url"], report["format"]) == (srv.url(endpoint), fmt)
    assert report["tries"][0]["format"] == fmt  # recognised from the URL, not from an answer
    assert f"{srv.url(base)} is a base URL: probing its {fmt} endpoint {srv.url(endpoint)}" in (
        result.stderr
    )


def test_probe_text_report(srv: DialectServer, home: Path) -> None:
    result = run("probe", srv.url("/ollama/api/chat"), home=home)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "health check  ok (" in out
    assert f"lists {', '.join(sorted(OLLAMA_MODELS))}" in out
    assert "bge-m3:latest is an embedding model (space bge-m3, 1024 dimensions)" in out
    assert f"model         {OLLAMA_MODELS[0]} (from the health check's list)" in out
    assert "ollama: ok (HTTP 200, " in out
    assert f'"{answer("ollama")}"' in out
    assert "format        ollama (suggested by the URL, confirmed by the answer)" in out
    assert "level         partial — a built-in format adapter handles it" in out
    assert "streaming     yes (" in out
    assert "paths         choices_path: 'message', content_path: 'content'" in out
    entry = yaml.safe_load(out.split("config entry:\n", 1)[1])
    assert entry == [
        {
            "name": "probe",
            "endpoint": srv.url("/ollama/api/chat"),
            "format": "ollama",
            "models": [OLLAMA_MODELS[0]],
            # any name an agent asks for (its own) goes to that model (issue 56)
            "model_map": {"*": OLLAMA_MODELS[0]},
        }
    ]
    # The model the health check listed is the one asked for.
    assert srv.chats("/ollama")[-1].body["model"] == OLLAMA_MODELS[0]


def test_probe_sends_keys_where_each_format_wants_them(srv: DialectServer, home: Path) -> None:
    url = srv.url("/anthropic/v1/messages")
    anthropic = run("probe", url, "--api-key-env", "PROBE_KEY", "-m", "c", home=home)
    assert anthropic.returncode == 0, anthropic.stdout
    assert all(r.headers.get("x-api-key") == KEY for r in srv.chats("/anthropic"))
    assert all("Authorization" not in r.headers for r in srv.chats("/anthropic"))
    ernie = run(
        "probe",
        srv.url("/ernie/rpc/2.0/ai_custom/v1/wenxinworkshop/chat/completions_pro"),
        "--api-key-env",
        "PROBE_KEY",
        home=home,
    )
    assert ernie.returncode == 0, ernie.stdout
    assert all(r.query.get("access_token") == KEY for r in srv.chats("/ernie"))
    assert "auth_query: access_token" in ernie.stdout
    openai = run(
        "probe", srv.url("/openai/v1/chat/completions"), "--api-key-env", "PROBE_KEY", home=home
    )
    assert openai.returncode == 0, openai.stdout
    assert srv.chats("/openai")[-1].headers["Authorization"] == f"Bearer {KEY}"
    for result in (anthropic, ernie, openai):
        no_secrets(result)


def test_probe_recognises_a_format_from_its_answer(srv: DialectServer, home: Path) -> None:
    # An Ollama server on a path that says nothing: the OpenAI request gets an Ollama answer.
    result = run("probe", srv.url("/custom/chat"), "--model", "llama3.2", "--json", home=home)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert [(t["format"], t["reason"]) for t in report["tries"]] == [
        ("openai", "schema_mismatch"),
        ("ollama", "ok"),
    ]
    assert report["format"] == "ollama"
    assert report["detected_by"] == "recognised from the answer"
    assert report["level"] == "partial"
    assert report["stream"]["works"] is True
    assert report["health"]["ok"] is False  # /custom/tags does not exist
    assert report["provider"]["health_check"] == ""


@pytest.mark.parametrize(
    ("path", "shape", "text"),
    [
        ("/antique/identify", ("", "item"), ANTIQUE["item"]),
        ("/data/generate", ("data", "text"), "OK from data"),
    ],
)
def test_probe_finds_paths_in_an_arbitrary_json_api(
    srv: DialectServer, home: Path, path: str, shape: tuple[str, str], text: str
) -> None:
    cfg = home / "config.yaml"
    cfg.write_text(
        "# my providers\n"
        'version: "0.3.2"\n'
        "providers:\n"
        "  # a dead one, kept last by weight\n"
        f"  - name: dead\n    endpoint: {refused_url()}\n    fallback_weight: 0.1\n"
        "\n# a route, after the list\n"
        "routes:\n  only-dead: [dead]\n"
    )
    result = run("--config", str(cfg), "probe", srv.url(path), "--write", "api", home=home)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "openai: schema_mismatch (HTTP 200, " in out
    assert "openai with custom paths: ok (HTTP 200, " in out
    assert "level         manual — needs schema_compatibility paths or a post_process_hook" in out
    assert f"paths         choices_path: {shape[0]!r}, content_path: {shape[1]!r}" in out
    assert "streaming     no — the stream request got one whole JSON answer" in out
    assert f"appended provider 'api' to {cfg}" in out

    written = cfg.read_text()
    assert written.startswith("# my providers\n")
    assert "# a route, after the list\nroutes:" in written
    config = load_config(cfg)
    assert [p.name for p in config.providers] == ["dead", "api"]
    api = config.provider("api")
    sc = api.schema_compatibility
    assert (sc.choices_path, sc.content_path) == shape
    assert api.health_check == ""
    chat = run("--config", str(cfg), "chat", "-p", "identify this", home=home)
    assert chat.returncode == 0, chat.stderr
    assert chat.stdout == f"{text}\n"

    again = run("--config", str(cfg), "probe", srv.url(path), "--write", "api", home=home)
    assert again.returncode == 2
    assert "already has a provider named 'api'" in again.stderr
    assert load_config(cfg).providers[-1].name == "api"
    assert len(load_config(cfg).providers) == 2


def test_probe_write_rewrites_json_and_flow_lists(srv: DialectServer, home: Path) -> None:
    url = srv.url("/openai/v1/chat/completions")
    dead = {"name": "dead", "endpoint": refused_url()}
    as_json = home / "config.json"
    as_json.write_text(json.dumps({"version": "0.3.2", "providers": [dead]}))
    flow = home / "flow.yaml"
    flow.write_text(f'version: "0.3.2"\nproviders: [{{name: dead, endpoint: "{refused_url()}"}}]\n')
    for cfg in (as_json, flow):
        result = run("--config", str(cfg), "probe", url, "--write", "gpt", home=home)
        assert result.returncode == 0, result.stderr
        assert "rewritten as a whole" in result.stdout
        assert [p.name for p in load_config(cfg).providers] == ["dead", "gpt"]
        assert cfg.with_name(cfg.name + ".bak").exists()


def test_probe_write_uses_the_default_lookup(srv: DialectServer, home: Path) -> None:
    url = srv.url("/openai/v1/chat/completions")
    result = run("probe", url, "--write", "gpt", home=home)
    assert result.returncode == 0, result.stderr
    target = home / ".agent-reach" / "config.yaml"
    assert [p.name for p in load_config(target).providers] == ["gpt"]
    via_env = home / "elsewhere.yaml"
    result = run(
        "probe", url, "--write", "gpt", home=home, env={"AGENT_REACH_CONFIG": str(via_env)}
    )
    assert result.returncode == 0, result.stderr
    assert [p.name for p in load_config(via_env).providers] == ["gpt"]


def test_probe_unusable_endpoints_exit_1(srv: DialectServer, home: Path) -> None:
    dead = run("probe", refused_url(), "--write", "dead", home=home)
    assert dead.returncode == 1
    assert "not usable: the endpoint did not answer (connect_failed" in dead.stdout
    assert "nothing was written" in dead.stderr
    assert not (home / ".agent-reach" / "config.yaml").exists()
    nokey = run("probe", srv.url("/anthropic/v1/messages"), "--model", "c", "--json", home=home)
    assert nokey.returncode == 1
    report = json.loads(nokey.stdout)
    assert report["usable"] is False
    assert report["tries"][0] == {**report["tries"][0], "format": "anthropic", "status": 401}
    assert "--api-key-env" in report["problem"]
    assert "Traceback" not in dead.stderr + nokey.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["probe", "not-a-url"], "expected a full http(s) URL"),
        (["probe", "http://h/x", "--format", "soap"], "format 'soap' is not available"),
        (
            ["probe", "http://h/x", "--api-key-env", "SURELY_UNSET_VAR"],
            "SURELY_UNSET_VAR is not set",
        ),
        (["probe", "http://h/v1beta/models"], "needs --model"),
        (["probe", "http://h/x", "--write", "no spaces"], "provider name 'no spaces'"),
    ],
)
def test_probe_usage_errors_exit_2(home: Path, args: list[str], message: str) -> None:
    result = run(*args, home=home)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_help_lists_the_new_commands(home: Path) -> None:
    result = run("--help", home=home)
    for command in ("providers", "init", "probe"):
        assert command in result.stdout


def test_init_keeps_an_anthropic_compatible_entry_agent_ready(home: Path) -> None:
    nowhere = refused_url().split("/v1")[0]
    result = run("init", home=home, env={"ZAI_API_KEY": "zai-VALUE", "OLLAMA_HOST": nowhere})
    assert result.returncode == 0, result.stderr
    assert "zai-anthropic: kept (ZAI_API_KEY is set)" in result.stdout
    assert "zai-coding: skipped (ZAI_API_KEY is already used by zai-anthropic)" in result.stdout
    [provider] = load_config(home / ".agent-reach" / "config.yaml").providers
    assert (provider.name, provider.format, provider.auth_header) == (
        "zai-anthropic",
        "anthropic",
        "x-api-key",
    )
    assert provider.endpoint == "https://api.z.ai/api/anthropic/v1/messages"
    assert provider.model_map == {"*": "glm-4.6"}
    no_secrets(result, "zai-VALUE")
