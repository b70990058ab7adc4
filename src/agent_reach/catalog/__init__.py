"""The catalog of known provider endpoints, and how `probe` recognises an unknown one. Pure.

`load()` reads the packaged `providers.yaml` into `Entry` values (what `agent-reach providers`
lists and `agent-reach init` picks from); `Entry.provider()` is the config entry for one.

Recognising an endpoint (spec §13 compatibility levels) takes three small steps, each a
function here so that `probe` only does the I/O:
- `formats_for_url`: the formats an endpoint's URL suggests (`/api/chat` → ollama,
  `/v1/messages` → anthropic, …), `openai` last;
- `formats_for_answer`: the formats whose dialect reads an answer the endpoint gave;
- `content_paths`: for an answer no format reads, the `schema_compatibility` paths of its first
  non-empty string.
`level_of` names the level that follows.
"""

from __future__ import annotations

import contextlib
import functools
import re
from collections.abc import Iterator
from dataclasses import asdict, dataclass, fields
from typing import Any, Literal, get_args
from urllib.parse import urlsplit

from .. import dialects, paths, validation
from ..dialects import Context, Mismatch, Shape

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
    local: bool = False  # a server on this machine
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
        """This entry as a config provider entry (spec §2.3); `overrides` replace fields."""
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
        out.update(overrides)
        return out

    def to_dict(self) -> dict[str, Any]:
        """The JSON form of `agent-reach providers --json`: every field, `auth` in words and
        the config entry (`provider`)."""
        data = asdict(self)
        data["requires"] = list(self.requires)
        data["models"] = list(self.models)
        return {**data, "auth": self.auth, "provider": self.provider()}


_NAME = re.compile(r"^[A-Za-z0-9._-]+$")
_ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@functools.cache
def load() -> tuple[Entry, ...]:
    """The packaged catalog, in file order."""
    from importlib import resources

    import yaml

    text = resources.files(__name__).joinpath("providers.yaml").read_text(encoding="utf-8")
    return parse(yaml.safe_load(text))


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
        entries.append(entry)
    return tuple(entries)


def _check(entry: Entry, where: str) -> None:
    for f in fields(Entry):
        value = getattr(entry, f.name)
        if f.name in {"requires", "models"}:
            ok = isinstance(value, tuple) and all(isinstance(v, str) and v for v in value)
        elif f.name == "local":
            ok = isinstance(value, bool)
        elif f.name == "auth_scheme":
            ok = value is None or isinstance(value, str)
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
    for bad, field, expected in problems:
        if bad:
            raise ValueError(f"{where}: field {field!r}: {expected}")


# ---------------------------------------------------------------------------------------------
# Recognising an endpoint


def formats_for_url(url: str) -> tuple[str, ...]:
    """The formats an endpoint URL suggests, most likely first, always ending with `openai`
    (what most APIs speak): `/chat/completions` → openai, `/responses` → responses,
    `/api/chat` → ollama, `/messages` →
    anthropic, `:generateContent`, a models collection (`…/models`) or a `generativelanguage`
    host → gemini, `/services/aigc/` → dashscope, `chatcompletion` → minimax,
    `wenxinworkshop` → ernie."""
    parts = urlsplit(url)
    path = parts.path.lower()
    host = (parts.hostname or "").lower()
    rules = (
        (path.rstrip("/").endswith("/chat/completions"), "openai"),
        (path.rstrip("/").endswith("/responses"), "responses"),
        ("/api/chat" in path or "/api/generate" in path, "ollama"),
        (path.rstrip("/").endswith("/messages"), "anthropic"),
        (
            "generatecontent" in path
            or path.rstrip("/").endswith("/models")
            or ("generativelanguage" in host and "/openai" not in path),
            "gemini",
        ),
        ("/services/aigc/" in path, "dashscope"),
        ("chatcompletion" in path, "minimax"),
        ("wenxinworkshop" in path, "ernie"),
    )
    found = [fmt for matched, fmt in rules if matched]
    if "openai" not in found:
        found.append("openai")
    return tuple(found)


# The order in which an answer's shape is tried: minimax last, since it also reads OpenAI's.
_SHAPE_ORDER = (
    "openai",
    "responses",
    "ollama",
    "anthropic",
    "gemini",
    "dashscope",
    "ernie",
    "minimax",
)


def formats_for_answer(raw: Any, endpoint: str) -> tuple[str, ...]:
    """The formats whose dialect reads `raw` (an endpoint's parsed JSON answer) as an answer
    with content, at their default paths."""
    found = []
    for name in _SHAPE_ORDER:
        dialect = dialects.get(name).for_endpoint(endpoint)
        ctx = Context("", 0, Shape(dialect.choices_path, dialect.content_path))
        if dialect.error_of(raw) is not None:
            continue
        try:
            normalized = dialect.normalize(raw, ctx)
        except (Mismatch, AttributeError, TypeError, KeyError, IndexError, ValueError):
            continue
        choices = normalized.get("choices") or [{}]
        if validation.has_answer(choices[0].get("message")):
            found.append(name)
    return tuple(found)


def level_of(fmt: str, custom_paths: bool = False) -> Level:
    """The compatibility level (spec §13) of an endpoint read with `fmt`: `full` for the OpenAI
    format at its default paths, `partial` for another built-in format, `manual` when it needs
    its own `schema_compatibility` paths (or a hook)."""
    if custom_paths:
        return "manual"
    return "full" if fmt == "openai" else "partial"


# Keys whose strings describe an answer rather than carry it.
_META_KEYS = frozenset(
    {
        "id",
        "object",
        "model",
        "role",
        "type",
        "created",
        "created_at",
        "request_id",
        "status",
        "finish_reason",
        "stop_reason",
        "done_reason",
        "system_fingerprint",
        "sender_type",
        "modelversion",
        "responseid",
    }
)

Segment = tuple[str, bool]  # (key or index, is a list index)


def _strings(value: Any, at: tuple[Segment, ...]) -> Iterator[tuple[tuple[Segment, ...], str]]:
    """Every non-empty string in `value`, depth first in document order, with its path."""
    if isinstance(value, str):
        if value.strip():
            yield at, value
    elif isinstance(value, dict):
        for key, item in value.items():
            if str(key).lower() not in _META_KEYS:
                yield from _strings(item, (*at, (str(key), False)))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _strings(item, (*at, (str(i), True)))


def content_paths(raw: Any) -> tuple[str, str] | None:
    """(`choices_path`, `content_path`) that extract the first non-empty string of an answer
    no format reads (spec §7): the path up to the first list (whose first element is the
    choice) and the rest; without a list, the string's parent and its key. Dot paths, or JSON
    Pointers when a key has a dot or a slash. None when the answer is not a JSON object or has
    no string (then only a `post_process_hook` can read it)."""
    if not isinstance(raw, dict):
        return None
    for at, _ in _strings(raw, ()):
        split = next((i for i, (k, is_index) in enumerate(at) if is_index and k == "0"), None)
        if split is not None:
            choice, content = at[:split], at[split + 1 :]
        else:
            choice, content = at[:-1], at[-1:]
        keys = [k for k, _ in at]
        pointer = any("." in k or k.startswith("/") or not k for k in keys)
        return _path(choice, pointer), _path(content, pointer)
    return None


def _path(segments: tuple[Segment, ...], pointer: bool) -> str:
    if not segments:
        return ""
    if pointer:
        return "/" + "/".join(k.replace("~", "~0").replace("/", "~1") for k, _ in segments)
    return ".".join(k for k, _ in segments)


def extracts(raw: Any, choices_path: str, content_path: str) -> str | None:
    """The string that `choices_path` / `content_path` extract from `raw`, if any."""
    _, content = paths.extract(raw, choices_path, content_path)
    return content if isinstance(content, str) else None


# ---------------------------------------------------------------------------------------------
# Writing config entries


def ollama_base(value: str | None) -> str:
    """The base URL of the local Ollama from `$OLLAMA_HOST`, read as Ollama reads it: `host`,
    `host:port` or a URL; no port means 11434 (80 or 443 after an explicit scheme); unset
    means `http://127.0.0.1:11434`."""
    text = (value or "").strip()
    scheme, sep, rest = text.partition("://")
    if not sep:
        scheme, rest, port = "http", text, 11434
    else:
        port = 443 if scheme == "https" else 80
    hostport = rest.split("/", 1)[0]
    parts = urlsplit(f"//{hostport}")
    host = parts.hostname or "127.0.0.1"
    with contextlib.suppress(ValueError):  # a port that is not a number: the default
        port = parts.port or port
    if ":" in host:
        host = f"[{host}]"
    default = {"http": 80, "https": 443}.get(scheme)
    return f"{scheme}://{host}" + ("" if port == default else f":{port}")


@functools.cache
def _dumper() -> type:
    import yaml

    class Dumper(yaml.SafeDumper):
        """Block mappings, flow lists of plain values (`models: [a, b]`)."""

    def represent_list(dumper: yaml.SafeDumper, data: list[Any]) -> yaml.Node:
        flat = all(not isinstance(v, dict | list) for v in data)
        return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flat)

    Dumper.add_representer(list, represent_list)
    return Dumper


def to_yaml(data: Any, indent: int = 0) -> str:
    """`data` as block YAML (lists of plain values in flow style), every line indented by
    `indent` spaces."""
    import yaml

    text = yaml.dump(data, Dumper=_dumper(), sort_keys=False, allow_unicode=True, width=1000)
    pad = " " * indent
    return "".join(pad + line if line.strip() else line for line in text.splitlines(True))
