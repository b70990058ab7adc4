"""Codex's model catalog for a run (`model_catalog_json`): Codex ≥ 0.156 no longer asks a
custom provider for `/v1/models`, and a model missing from its catalog gets "fallback
metadata" and a warning each session (issue 49, item 4).

The catalog is Codex's own bundled one (`codex debug models --bundled`, so its entry shape is
always the installed version's), and after it one entry per name the proxy answers for (its
routes and models, `Router.model_names`). Each is a copy of the entry Codex would pick by
default, the one its requests through the proxy are known to work with, under the proxy's name
and with the context window the providers behind that name are known to accept. Codex's own
default model stays its default.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Sequence
from typing import Any

import orjson

# A name's context window when no provider behind it states one: what most chat models of the
# catalog take (DeepSeek's, GLM's, Kimi's 131,072; GPT-4o's 128,000), so Codex compacts in time.
UNKNOWN_WINDOW = 128_000
_ASK_S = 10.0  # `codex debug models --bundled` takes about 0.1 s


async def bundled(program: str, env: dict[str, str]) -> list[dict[str, Any]] | None:
    """The installed Codex's bundled catalog, or None when it cannot say (a Codex before
    `debug models`, or one that fails): the run then writes no catalog."""
    try:
        proc = await asyncio.create_subprocess_exec(
            program,
            "debug",
            "models",
            "--bundled",
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
    except OSError:
        return None
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), _ASK_S)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return None
    try:
        models = orjson.loads(out)["models"] if proc.returncode == 0 else None
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return None
    ok = isinstance(models, list) and models and all(isinstance(m, dict) for m in models)
    return models if ok else None


def catalog(models: list[dict[str, Any]], names: Sequence[tuple[str, int | None]]) -> bytes:
    """`models` (Codex's own entries) and an entry per (name, context window) of the proxy
    that Codex does not list itself, as a `model_catalog_json` file's bytes."""
    listed = [m for m in models if m.get("visibility") == "list"] or models
    template = min(listed, key=lambda m: m.get("priority", 0))
    own = {m.get("slug") for m in models}
    last = max(int(m.get("priority", 0)) for m in models)
    added = []
    for n, (name, window) in enumerate((x for x in names if x[0] not in own), start=1):
        entry = copy.deepcopy(template)
        size = window or UNKNOWN_WINDOW
        entry.update(
            slug=name,
            display_name=name,
            description="Through agent-reach: its providers for this name, with failover.",
            context_window=size,
            visibility="list",
            priority=last + n,  # after Codex's own: its default model stays the default
        )
        # Fields of some versions only: set where the installed Codex has them.
        changed = {"max_context_window": size, "auto_compact_token_limit": None, "upgrade": None}
        entry.update({k: v for k, v in changed.items() if k in entry})
        added.append(entry)
    return orjson.dumps({"models": [*models, *added]})
