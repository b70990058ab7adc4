"""What each coding agent needs to reach the proxy, beyond the OpenAI and Anthropic variables
every run sets (protocol §11, `run`):

- Gemini CLI: `GOOGLE_GEMINI_BASE_URL` and `GEMINI_API_KEY`, and a private home whose
  settings take an API key (Gemini CLI reads its auth type only from settings.json; the user's
  own settings are kept, their other files linked, nothing of theirs is written);
- Qwen Code: `--auth-type openai` (it reads `OPENAI_BASE_URL` and `OPENAI_API_KEY` then);
- OpenCode: a provider `agent-reach` (OpenAI-compatible, at the proxy) and its model
  `agent-reach/default` in `OPENCODE_CONFIG_CONTENT`, on top of the user's own;
- Aider and other LiteLLM-based tools: `OPENAI_API_BASE`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

GEMINI_AUTH = {"selectedType": "gemini-api-key"}


OPENCODE_MODEL = "agent-reach/default"


def codex_provider(base: str, key_var: str) -> dict[str, Any]:
    """Codex's `model_providers.agent_reach` for the proxy at `base`, its key in `key_var`
    (`run` and `setup codex` write the same): never named `OpenAI` (Codex would ask it for
    remote compaction), over one WebSocket per session (measured faster: bench/agent_session.py,
    docs/decisions.md), and one retry
    of Codex's own where it makes 4 and 5 (the proxy has tried every provider already: an
    all-failed turn took 30 requests and 25 s)."""
    return {
        "name": "agent-reach",
        "base_url": f"{base}/v1",
        "env_key": key_var,
        "wire_api": "responses",
        "supports_websockets": True,
        "request_max_retries": 1,
        "stream_max_retries": 1,
    }


def toml_value(value: Any) -> str:
    """A string, bool or int as TOML writes it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value)


def env_for(base: str, key: str, environ: dict[str, str]) -> dict[str, str]:
    """The variables, beyond the OpenAI and Anthropic ones, that point the agents at the
    proxy: Gemini CLI's (and Google's SDKs'), Aider's, OpenCode's config."""
    return {
        "GOOGLE_GEMINI_BASE_URL": base,
        "GEMINI_API_KEY": key,
        "OPENAI_API_BASE": f"{base}/v1",
        "OPENCODE_CONFIG_CONTENT": _opencode_config(base, key, environ),
    }


def argv_for(name: str, argv: list[str]) -> list[str]:
    """The program's argv with what its agent needs on the command line (Qwen Code's auth
    type, unless the user gave one)."""
    if name == "qwen" and not any(a.startswith("--auth-type") for a in argv):
        return [argv[0], "--auth-type", "openai", *argv[1:]]
    return argv


def opencode_provider(base: str, key: str) -> dict[str, Any]:
    """OpenCode's `provider` entry for the proxy (OpenAI-compatible), keyed by `key`."""
    return {
        "agent-reach": {
            "npm": "@ai-sdk/openai-compatible",
            "name": "agent-reach",
            "options": {"baseURL": f"{base}/v1", "apiKey": key},
            "models": {"default": {"name": "agent-reach (the proxy's routes)"}},
        }
    }


def _opencode_config(base: str, key: str, environ: dict[str, str]) -> str:
    try:
        config = json.loads(environ.get("OPENCODE_CONFIG_CONTENT") or "{}")
    except ValueError:
        config = {}
    if not isinstance(config, dict):
        config = {}
    providers = config.get("provider")
    config["provider"] = {
        **(providers if isinstance(providers, dict) else {}),
        **opencode_provider(base, key),
    }
    config["model"] = OPENCODE_MODEL
    return json.dumps(config)


def with_auth(settings: Any, auth: dict[str, str]) -> dict[str, Any]:
    """`settings` (Gemini CLI's or Qwen Code's settings.json) with `auth` in its
    `security.auth`; everything else kept."""
    out = dict(settings) if isinstance(settings, dict) else {}
    security = out.get("security")
    security = dict(security) if isinstance(security, dict) else {}
    current = security.get("auth")
    security["auth"] = {**(current if isinstance(current, dict) else {}), **auth}
    out["security"] = security
    return out


def gemini_home(environ: dict[str, str], private: Path) -> Path:
    """A home for one Gemini CLI run (its `GEMINI_CLI_HOME`) in the folder `private`:
    `.gemini/settings.json` is the user's own with `security.auth.selectedType` set to take
    the key, every other entry of the user's `.gemini` is a link to it. The caller removes
    `private` after the run (its links are removed, not followed)."""
    real = Path(environ.get("GEMINI_CLI_HOME") or environ.get("HOME") or Path.home()) / ".gemini"
    home = private / "gemini-home"
    own = home / ".gemini"
    own.mkdir(mode=0o700, parents=True)
    settings: Any = {}
    if real.is_dir():
        for entry in real.iterdir():
            if entry.name != "settings.json":
                (own / entry.name).symlink_to(entry)
        try:
            settings = json.loads((real / "settings.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            settings = {}
    settings = with_auth(settings, GEMINI_AUTH)
    settings["security"]["auth"].pop("enforcedType", None)
    path = own / "settings.json"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        json.dump(settings, out, indent=2)
    return home
