"""The catalog of known provider endpoints: its entries and loading them. Pure.

`load()` reads the packaged `providers.yaml` into `Entry` values (what `agent-reach providers`
lists and `agent-reach init` picks from); `Entry.provider()` is the config entry for one.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal, get_args
from urllib.parse import urlsplit

from .. import dialects

Level = Literal["full", "partial", "manual"]
LEVELS: tuple[Level, ...] = get_args(Level)
LEVEL_MEANING: dict[Level, str] = {
    "full": "OpenAI schema: works as is",
    "partial": "a built-in format adapter handles it",
    "manual": "needs schema_compatibility paths or a post_process_hook",
}


@dataclass(frozen=True)
class Entry:
    """One known endpoint: where it is, how it is spoken to, and what to expect of it."""

    name: str
    title: str
    endpoint: str
    format: str
    level: Level
    key_env: str = ""  # the variable that holds the key; "" = no key (a local server)
    auth_header: str = "Authorization"  # "" = no auth header
    auth_scheme: str | None = None  # None = Bearer for Authorization, none otherwise
    auth_query: str = ""  # a query parameter that carries the key instead of a header
    requires: tuple[str, ...] = ()  # other environment variables the endpoint reads
    health_check: str = ""
    models: tuple[str, ...] = ()
    max_tokens_field: str = ""
    # The published output cap and context window of models it names (sources in
    # docs/providers.md): model → {max_output_tokens, context_window}.
    limits: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    assistant_prefill: bool | None = None  # None: the format's default (protocol §2.3)
    # Embedding models it serves, each with its default width: each is the embedding space of
    # its name (sources in docs/providers.md); and its most inputs a request (0: the format's).
    embeddings: Mapping[str, int] = field(default_factory=dict)
    embeddings_max_batch: int = 0
    local: bool = False  # a server on this machine
    prompt_cache_key: bool = False  # routes prompt-cache hits by a session key (protocol §2.3)
    session_header: str = ""  # a header it routes prompt-cache hits by (protocol §2.3)
    own_models: bool = False  # the coding agents send this provider's own model names
    notes: str = ""

    @property
    def auth(self) -> str:
        """How the key travels, in a few words: `Authorization: Bearer`, `x-api-key`,
        `query access_token`, or `none`."""
        if self.auth_query:
            return f"query {self.auth_query}"
        if not self.auth_header or not self.key_env:
            return "none"
        scheme = self.auth_scheme
        if scheme is None:
            scheme = "Bearer" if self.auth_header.lower() == "authorization" else ""
        return f"{self.auth_header}: {scheme}" if scheme else self.auth_header

    def provider(self, **overrides: Any) -> dict[str, Any]:
        """This entry as a config provider entry (protocol §2.3); `overrides` replace fields."""
        out: dict[str, Any] = {"name": self.name, "endpoint": self.endpoint, "format": self.format}
        if self.key_env:
            out["api_key_env"] = self.key_env
        if self.auth_header != "Authorization" or self.auth_query:
            out["auth_header"] = "" if self.auth_query else self.auth_header
        if self.auth_scheme is not None:
            out["auth_scheme"] = self.auth_scheme
        if self.auth_query:
            out["auth_query"] = self.auth_query
        out["health_check"] = self.health_check
        if self.max_tokens_field:
            out["max_tokens_field"] = self.max_tokens_field
        if self.models:
            out["models"] = list(self.models)
        if self.limits:
            out["model_limits"] = {m: dict(v) for m, v in self.limits.items()}
        if self.assistant_prefill is not None:
            out["assistant_prefill"] = self.assistant_prefill
        if self.prompt_cache_key:
            out["prompt_cache_key"] = True
        if self.session_header:
            out["session_header"] = self.session_header
        out.update(overrides)
        return out

    def embedding(self, served: Mapping[str, str] | None = None) -> dict[str, Any] | None:
        """A config provider's `embeddings` (protocol §2.4) for its models: `served` maps a
        space to the name a server lists it under (default: all of them, by their own)."""
        models = {m: m for m in self.embeddings} if served is None else dict(served)
        if not models:
            return None
        out: dict[str, Any] = {"models": models}
        if self.embeddings_max_batch:
            out["max_batch"] = self.embeddings_max_batch
        return out

    def to_dict(self) -> dict[str, Any]:
        """The JSON form of `agent-reach providers --json`: every field, `auth` in words and
        the config entry (`provider`)."""
        data = asdict(self)
        data["requires"] = list(self.requires)
        data["models"] = list(self.models)
        data["limits"] = {m: dict(v) for m, v in self.limits.items()}
        data["embeddings"] = dict(self.embeddings)
        return {**data, "auth": self.auth, "provider": self.provider()}


_NAME = re.compile(r"^[A-Za-z0-9._-]+$")
_ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@functools.cache
def load() -> tuple[Entry, ...]:
    """The packaged catalog, in file order."""
    from importlib import resources

    import yaml

    text = (
        resources.files("agent_reach.catalog")
        .joinpath("providers.yaml")
        .read_text(encoding="utf-8")
    )
    return parse(yaml.safe_load(text))


def spaces(entries: Iterable[Entry]) -> dict[str, dict[str, int]]:
    """The config's `embeddings.spaces` for the embedding models of `entries`: one space per
    model, at its width (`parse` made sure two entries never disagree on it)."""
    return {m: {"dimensions": w} for e in entries for m, w in e.embeddings.items()}


def embedding_space(listed: str) -> tuple[str, int] | None:
    """(space, width) of a catalog embedding model a server lists as `listed` (Ollama adds a
    `:latest` tag), or None: a model of some other kind, or one the catalog does not know."""
    model = listed.removesuffix(":latest")
    for entry in load():
        if model in entry.embeddings:
            return model, entry.embeddings[model]
    return None


def get(name: str) -> Entry:
    """The catalog entry called `name` (KeyError if there is none)."""
    for entry in load():
        if entry.name == name:
            return entry
    raise KeyError(name)


def parse(data: Any) -> tuple[Entry, ...]:
    """Catalog data (a list of mappings) to entries; ValueError names the entry and field of
    any problem."""
    if not isinstance(data, list):
        raise ValueError("the catalog is a list of entries")
    known = {f.name: f for f in fields(Entry)}
    entries: list[Entry] = []
    for i, item in enumerate(data):
        where = f"catalog entry {i}"
        if not isinstance(item, dict):
            raise ValueError(f"{where}: expected a mapping")
        where = f"catalog entry {item.get('name', i)!r}"
        unknown = sorted(set(item) - set(known))
        if unknown:
            raise ValueError(f"{where}: unknown field(s) {', '.join(unknown)}")
        values: dict[str, Any] = {
            k: tuple(v) if isinstance(v, list) else v for k, v in item.items()
        }
        try:
            entry = Entry(**values)
        except TypeError as exc:
            raise ValueError(f"{where}: {exc}") from None
        _check(entry, where)
        if any(e.name == entry.name for e in entries):
            raise ValueError(f"{where}: the name is used twice")
        for model, width in entry.embeddings.items():
            other = next((e for e in entries if e.embeddings.get(model, width) != width), None)
            if other is not None:
                raise ValueError(
                    f"{where}: field 'embeddings': {model} is {width} wide here, "
                    f"{other.embeddings[model]} in {other.name!r} (one model, one space)"
                )
        entries.append(entry)
    return tuple(entries)


_LIMITS = frozenset({"max_output_tokens", "context_window"})


def _limits_ok(value: Any, models: tuple[str, ...]) -> bool:
    """Limits of models the entry names, each a positive number of tokens."""
    return isinstance(value, dict) and all(
        model in models
        and isinstance(figures, dict)
        and set(figures) <= _LIMITS
        and all(_positive(n) for n in figures.values())
        for model, figures in value.items()
    )


def _positive(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _check(entry: Entry, where: str) -> None:
    for f in fields(Entry):
        value = getattr(entry, f.name)
        if f.name in {"requires", "models"}:
            ok = isinstance(value, tuple) and all(isinstance(v, str) and v for v in value)
        elif f.name in {"local", "own_models", "prompt_cache_key"}:
            ok = isinstance(value, bool)
        elif f.name == "auth_scheme":
            ok = value is None or isinstance(value, str)
        elif f.name == "limits":
            ok = _limits_ok(value, entry.models)
        elif f.name == "embeddings":
            ok = isinstance(value, dict) and all(
                isinstance(m, str) and m and _positive(w) for m, w in value.items()
            )
        elif f.name == "embeddings_max_batch":
            ok = _positive(value) or value == 0
        elif f.name == "assistant_prefill":
            ok = value is None or isinstance(value, bool)
        else:
            ok = isinstance(value, str)
        if not ok:
            raise ValueError(f"{where}: field {f.name!r} has the wrong type ({value!r})")
    problems = [
        (not _NAME.match(entry.name), "name", "expected [A-Za-z0-9._-]+"),
        (entry.format not in dialects.FORMATS, "format", f"expected one of {dialects.FORMATS}"),
        (entry.level not in LEVELS, "level", f"expected one of {LEVELS}"),
        (bool(entry.key_env) and not _ENV.match(entry.key_env), "key_env", "not a variable name"),
        (not all(_ENV.match(v) for v in entry.requires), "requires", "not variable names"),
        (urlsplit(entry.endpoint).scheme not in ("http", "https"), "endpoint", "not a URL"),
    ]
    for bad, name, expected in problems:
        if bad:
            raise ValueError(f"{where}: field {name!r}: {expected}")
