"""What each coding agent needs to reach the proxy, beyond the OpenAI and Anthropic variables
every run sets: Gemini CLI's base URL and key variables, and a private Gemini CLI home whose
settings take an API key (Gemini CLI reads its auth type only from settings.json; a user's own
settings are kept, their other files linked, nothing of theirs is written)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

GEMINI_AUTH = "gemini-api-key"


def gemini_env(base: str, key: str) -> dict[str, str]:
    """The variables that point Gemini CLI (and Google's SDKs) at the proxy."""
    return {"GOOGLE_GEMINI_BASE_URL": base, "GEMINI_API_KEY": key}


def gemini_home(environ: dict[str, str]) -> Path:
    """A private home for one Gemini CLI run (its `GEMINI_CLI_HOME`): `.gemini/settings.json`
    is the user's own with `security.auth.selectedType` set to take the key, every other
    entry of the user's `.gemini` is a link to it. The caller removes it after the run."""
    real = Path(environ.get("GEMINI_CLI_HOME") or environ.get("HOME") or Path.home()) / ".gemini"
    home = Path(tempfile.mkdtemp(prefix="agent-reach-gemini-"))  # 0700
    own = home / ".gemini"
    own.mkdir(mode=0o700)
    settings: Any = {}
    if real.is_dir():
        for entry in real.iterdir():
            if entry.name != "settings.json":
                (own / entry.name).symlink_to(entry)
        try:
            settings = json.loads((real / "settings.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            settings = {}
    if not isinstance(settings, dict):
        settings = {}
    security = settings.setdefault("security", {})
    if not isinstance(security, dict):
        security = settings["security"] = {}
    auth = security.setdefault("auth", {})
    if not isinstance(auth, dict):
        auth = security["auth"] = {}
    auth["selectedType"] = GEMINI_AUTH
    auth.pop("enforcedType", None)
    path = own / "settings.json"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        json.dump(settings, out, indent=2)
    return home
