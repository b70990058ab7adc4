"""The config file: its model (pydantic), and loading it (spec §2).

`load_config(path)` finds the file (`--config` → `$AGENT_REACH_CONFIG` →
`~/.agent-reach/config.yaml`), parses YAML or JSON, expands `${VAR}` / `${VAR:-default}`,
applies `defaults:` to every provider, fills the defaults that depend on a provider's `format`,
and validates. Every problem becomes one `ConfigError` that names the file, the provider and the
field, says what was expected and, for an unknown field, suggests the closest known one.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from collections.abc import Mapping
from datetime import tzinfo
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from .. import dialects, quota
from .._version import PROTOCOL_VERSION
from ..errors import ConfigError
from ..routing import RouteTable
from ..validation import Level

DEFAULT_PATH = "~/.agent-reach/config.yaml"
ENV_PATH = "AGENT_REACH_CONFIG"

Ms = Annotated[float, Field(gt=0, description="milliseconds")]
Name = Annotated[str, Field(pattern=r"^[A-Za-z0-9._-]+$", min_length=1)]
HookRef = Annotated[str, Field(pattern=r"^[^:\s][^\s]*:[A-Za-z_][A-Za-z0-9_]*$")]
MaxTokensField = Literal[
    "max_tokens",
    "max_completion_tokens",
    "max_new_tokens",
    "num_predict",
    "tokens_to_generate",
    "max_output_tokens",
    "maxOutputTokens",
]


def zone_of(name: str) -> tzinfo:
    """A time zone by IANA name (`UTC`, `Asia/Shanghai`); ValueError if unknown."""
    from datetime import UTC
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    if name.upper() == "UTC":
        return UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown time zone {name!r} (expected e.g. UTC, Asia/Shanghai)") from None


def _http_url(value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"expected a full http(s) URL, got {value!r}")
    return value


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Timeout(_Model):
    """Per-provider timeouts in ms; `read` bounds the wait for the head and between chunks."""

    connect: Ms = 1000
    read: Ms = 3000


class SchemaCompatibility(_Model):
    """Where the answer is in a provider's body (spec §7); paths default by `format`."""

    choices_path: str | None = None
    content_path: str | None = None
    model_field: str = "model"
    debug_mode: bool = False


class Provider(_Model):
    """One backend endpoint (spec §2.3)."""

    name: Name
    endpoint: str
    format: Literal[
        "openai", "responses", "ollama", "dashscope", "minimax", "ernie", "anthropic", "gemini"
    ] = "openai"
    auth_header: str | None = None
    auth_scheme: str | None = None
    api_key_env: str = ""
    auth_query: str | None = None
    health_check: str | None = None
    health_method: Literal["GET", "HEAD"] = "GET"
    timeout: Timeout = Timeout()
    timeout_scaling: Literal["none", "weight"] = "none"
    schema_compatibility: SchemaCompatibility = SchemaCompatibility()
    validation: Level = Level.LENIENT
    model_map: dict[str, str] = {}
    models: list[Annotated[str, Field(min_length=1)]] | None = None
    max_tokens_field: MaxTokensField | None = None
    extra_body: dict[str, Any] = {}
    preprocess_hook: HookRef | None = None
    post_process_hook: HookRef | None = None
    fallback_weight: Annotated[float, Field(ge=0)] = 1.0
    retries: Annotated[int, Field(ge=0, le=10)] = 0
    hedge_after_ms: Ms | None = None
    metadata: dict[str, Any] = {}

    @model_validator(mode="before")
    @classmethod
    def _seed_alias(cls, data: Any) -> Any:
        # Configs embedded in other tools (the seed's `agent_reach_fallbacks`) say `provider:`.
        if isinstance(data, dict) and "name" not in data and "provider" in data:
            data = {("name" if k == "provider" else k): v for k, v in data.items()}
        return data

    _endpoint = field_validator("endpoint")(_http_url)

    @field_validator("metadata")
    @classmethod
    def _budgets(cls, value: dict[str, Any]) -> dict[str, Any]:
        if "rate_limit" in value:
            quota.parse(value["rate_limit"])  # ValueError says what a budget looks like
        return value

    @property
    def budgets(self) -> tuple[quota.Budget, ...]:
        """The budgets of `metadata.rate_limit` (spec §12)."""
        rate = self.metadata.get("rate_limit")
        return quota.parse(rate) if rate else ()

    @field_validator("format")
    @classmethod
    def _available(cls, value: str) -> str:
        dialects.get(value)  # ValueError names the formats this version has
        return value

    @field_validator("api_key_env")
    @classmethod
    def _env_name(cls, value: str) -> str:
        if value and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value):
            raise ValueError(f"expected the NAME of an environment variable, got {value!r}")
        return value

    @model_validator(mode="after")
    def _format_defaults(self) -> Provider:
        dialect = dialects.get(self.format)
        sc = self.schema_compatibility
        header = dialect.auth_header if self.auth_header is None else self.auth_header
        filled = {
            "auth_header": header,
            "auth_scheme": self.auth_scheme
            if self.auth_scheme is not None
            else ("Bearer" if header.lower() == "authorization" else ""),
            "health_check": self.health_check
            if self.health_check is not None
            else dialect.health_check,
            "max_tokens_field": self.max_tokens_field or dialect.max_tokens_field,
            "schema_compatibility": sc.model_copy(
                update={
                    "choices_path": sc.choices_path
                    if sc.choices_path is not None
                    else dialect.choices_path,
                    "content_path": sc.content_path
                    if sc.content_path is not None
                    else dialect.content_path,
                }
            ),
        }
        for key, value in filled.items():
            object.__setattr__(self, key, value)
        return self


class RouteConfig(_Model):
    """A named route: an ordered list of provider names (and, optionally, hedging)."""

    providers: list[Name] = Field(min_length=1)
    hedge_after_ms: Ms | None = None

    @model_validator(mode="before")
    @classmethod
    def _list_form(cls, data: Any) -> Any:
        return {"providers": data} if isinstance(data, list) else data


def _off(value: Any) -> Any:
    # YAML 1.1 reads a bare `off` as False.
    return "off" if value is False else value


class HealthConfig(_Model):
    mode: Literal["per_request", "cached", "background", "off"] = "cached"
    ttl_s: Annotated[float, Field(gt=0)] = 10.0

    @model_validator(mode="before")
    @classmethod
    def _bare_off(cls, data: Any) -> Any:
        if data is False or data == "off" or isinstance(data, str):
            return {"mode": _off(data)}
        if isinstance(data, dict) and "mode" in data:
            return {**data, "mode": _off(data["mode"])}
        return data


class CircuitConfig(_Model):
    failures: Annotated[int, Field(ge=1)] = 3
    cooldown_s: Annotated[float, Field(ge=0)] = 30.0
    auth_cooldown_s: Annotated[float, Field(ge=0)] = 300.0


Threshold = Annotated[float, Field(gt=0, le=1)]


AlertEvent = Literal[
    "quota_threshold", "quota_exhausted", "circuit_opened", "circuit_closed", "all_providers_failed"
]


class _Sink(_Model):
    """What every alert sink has: when quota alerts start, which events, how often."""

    threshold: Threshold = 0.8  # quota_threshold fires at this share of a budget
    events: list[AlertEvent] | None = None  # None: all
    repeat_after_s: Annotated[float, Field(ge=0)] = 300.0  # non-quota events, per provider


class LogAlert(_Sink):
    type: Literal["log"]


class WebhookAlert(_Sink):
    type: Literal["webhook"]
    url: str
    timeout_ms: Ms = 3000

    _url = field_validator("url")(_http_url)


class EmailAlert(_Sink):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    type: Literal["email"]
    smtp_host: str
    smtp_port: Annotated[int, Field(ge=1, le=65535)] = 587
    from_: str = Field(alias="from")
    to: list[str] | str
    starttls: bool = True
    username_env: str | None = None
    password_env: str | None = None


Alert = Annotated[Union[LogAlert, WebhookAlert, EmailAlert], Field(discriminator="type")]  # noqa: UP007


class ServerConfig(_Model):
    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=0, le=65535)] = 8000
    api_keys_env: str | None = "AGENT_REACH_API_KEYS"
    max_body_bytes: Annotated[int, Field(gt=0)] = 4 * 1024 * 1024
    responses_ttl_s: Annotated[float, Field(gt=0)] = 86400.0  # stored Responses-API answers
    # Client connections (spec §14): idle keep-alive, receiving one request's head and body,
    # a streaming client that reads nothing, and how many connections are open at once.
    keepalive_timeout_s: Annotated[float, Field(gt=0)] = 75.0
    request_timeout_s: Annotated[float, Field(gt=0)] = 30.0
    client_write_timeout_s: Annotated[float, Field(gt=0)] = 60.0
    max_connections: Annotated[int, Field(gt=0)] = 10000


class TracingConfig(_Model):
    """OpenTelemetry export (spec §12), with the `otel` extra; the standard `OTEL_*`
    variables configure it too."""

    endpoint: str | None = None  # OTLP/HTTP base URL, as OTEL_EXPORTER_OTLP_ENDPOINT
    service_name: str | None = None  # else OTEL_SERVICE_NAME, else agent-reach
    headers: dict[str, str] = {}  # e.g. an auth header of the collector

    @field_validator("endpoint")
    @classmethod
    def _endpoint(cls, value: str | None) -> str | None:
        return None if value is None else _http_url(value)


class Config(_Model):
    """The whole config file (spec §2.2)."""

    version: str = PROTOCOL_VERSION
    defaults: dict[str, Any] = {}
    fallback_order: list[Name] | None = None
    routes: dict[Name, RouteConfig] = {}
    health: HealthConfig = HealthConfig()
    circuit: CircuitConfig = CircuitConfig()
    deadline_ms: Ms = 60000
    alerts: list[Alert] = []
    state: str = "sqlite:///~/.agent-reach/state.db"
    retention_days: Annotated[float, Field(gt=0)] = 7.0  # how long the attempt log keeps
    quota_tz: str = "UTC"  # the time zone of budget windows (calendar days, hours)
    server: ServerConfig = ServerConfig()
    tracing: TracingConfig = TracingConfig()
    providers: list[Provider] = Field(min_length=1)

    _source: str = PrivateAttr(default="<dict>")
    _hooks: dict[tuple[str, str], Any] = PrivateAttr(default_factory=dict)

    @property
    def source(self) -> str:
        """The file this config came from (`<dict>` when built from a dict)."""
        return self._source

    @field_validator("version", mode="before")
    @classmethod
    def _version(cls, value: Any) -> str:
        text = str(value)
        if not re.fullmatch(r"0\.3(\.\d+)?", text):
            raise ValueError(f"protocol version {text!r} is not supported; expected 0.3.x")
        return text

    @field_validator("quota_tz")
    @classmethod
    def _zone(cls, value: str) -> str:
        zone_of(value)
        return value

    @property
    def tz(self) -> tzinfo:
        """`quota_tz` as a time zone."""
        return zone_of(self.quota_tz)

    @field_validator("state")
    @classmethod
    def _state_url(cls, value: str) -> str:
        scheme = value.split("://", 1)[0] if "://" in value else ""
        if scheme not in ("sqlite", "redis", "rediss", "memory"):
            raise ValueError(
                f"expected sqlite:///PATH, redis://HOST:PORT/DB or memory://, got {value!r}"
            )
        return value

    @model_validator(mode="after")
    def _names(self) -> Config:
        seen: set[str] = set()
        for i, p in enumerate(self.providers):
            if p.name in seen:
                raise ValueError(f"providers[{i}]: provider name {p.name!r} is used twice")
            seen.add(p.name)
        for where, names in [("fallback_order", self.fallback_order or [])] + [
            (f"routes.{r}", route.providers) for r, route in self.routes.items()
        ]:
            for n in names:
                if n not in seen:
                    hint = _did_you_mean(n, seen)
                    raise ValueError(f"{where}: no provider named {n!r}{hint}")
        return self

    def route_table(self) -> RouteTable:
        """The default order and named routes, resolved (spec §3)."""
        return RouteTable.build(
            [(p.name, p.fallback_weight) for p in self.providers],
            self.fallback_order,
            {name: route.providers for name, route in self.routes.items()},
        )

    def hook(self, provider: str, field: str) -> Any:
        """The loaded function of a provider's `preprocess_hook` / `post_process_hook`."""
        return self._hooks.get((provider, field))

    def provider(self, name: str) -> Provider:
        """The provider called `name` (KeyError if there is none)."""
        for p in self.providers:
            if p.name == name:
                return p
        raise KeyError(name)


# ---------------------------------------------------------------------------------------------
# Loading


def find_config_path(path: str | os.PathLike[str] | None = None) -> Path:
    """The file to read: `path`, else `$AGENT_REACH_CONFIG`, else `~/.agent-reach/config.yaml`."""
    if path:
        candidate = Path(path).expanduser()
    elif os.environ.get(ENV_PATH):
        candidate = Path(os.environ[ENV_PATH]).expanduser()
    else:
        candidate = Path(DEFAULT_PATH).expanduser()
    if not candidate.is_file():
        how = (
            "given with --config"
            if path
            else (f"from ${ENV_PATH}" if os.environ.get(ENV_PATH) else "the default location")
        )
        raise ConfigError(
            f"no config file at {candidate} ({how}); "
            "create one (see examples/config.yaml) or run `agent-reach init`"
        )
    return candidate


def load_config(path: str | os.PathLike[str] | None = None) -> Config:
    """Find, read, expand and validate a config file."""
    file = find_config_path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the file: {exc}", file=str(file)) from exc
    data = parse_text(text, json_file=file.suffix.lower() == ".json", file=str(file))
    return config_from_data(data, source=str(file))


def parse_text(text: str, *, json_file: bool, file: str) -> Any:
    """YAML (or JSON) text to data, with the line of a syntax error."""
    if json_file:
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(
                f"line {exc.lineno}, column {exc.colno}: invalid JSON: {exc.msg}", file=file
            ) from exc
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{where}invalid YAML: {problem}", file=file) from exc


def config_from_data(data: Any, *, source: str = "<dict>") -> Config:
    """Validate already-parsed config data (a dict as in the file)."""
    if not isinstance(data, dict):
        raise ConfigError("expected a mapping at the top level with `providers:`", file=source)
    if "providers" not in data and "agent_reach_fallbacks" in data:
        data = {("providers" if k == "agent_reach_fallbacks" else k): v for k, v in data.items()}
    data = _expand(data, (), source, data)
    data = _apply_defaults(data, source)
    try:
        config = Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, data), file=source) from None
    config._source = source
    config._hooks = _load_hooks(config, source)
    return config


def _load_hooks(config: Config, source: str) -> dict[tuple[str, str], Any]:
    """Import every hook once, now, so that a missing one is a config error."""
    from .. import hooks

    base = Path(source).parent if source != "<dict>" else Path.cwd()
    loaded = {}
    for i, p in enumerate(config.providers):
        for field in ("preprocess_hook", "post_process_hook"):
            ref = getattr(p, field)
            if ref:
                try:
                    loaded[(p.name, field)] = hooks.load(ref, base)
                except ValueError as exc:
                    where = (
                        f"defaults, field {field!r}"  # blame the place the value came from
                        if config.defaults.get(field) == ref
                        else f"provider {p.name!r} (providers[{i}]), field {field!r}"
                    )
                    raise ConfigError(f"{where}: {exc}", file=source) from None
    return loaded


_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def _expand(value: Any, loc: tuple[Any, ...], source: str, root: Any) -> Any:
    """`${VAR}` and `${VAR:-default}` in every string, from the environment."""
    if isinstance(value, str) and "${" in value:

        def sub(m: re.Match[str]) -> str:
            var, default = m.group(1), m.group(2)
            got = os.environ.get(var)
            if got is None or (got == "" and default is not None):
                if default is None:
                    raise ConfigError(
                        f"{_where(loc, root)}: ${{{var}}} is not set in the environment "
                        f"(write ${{{var}:-default}} to give a default)",
                        file=source,
                    )
                return default
            return got

        return _VAR.sub(sub, value)
    if isinstance(value, dict):
        return {k: _expand(v, (*loc, k), source, root) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand(v, (*loc, i), source, root) for i, v in enumerate(value)]
    return value


_MERGED_FIELDS = ("timeout", "schema_compatibility", "model_map", "extra_body", "metadata")


def _apply_defaults(data: dict[str, Any], source: str) -> dict[str, Any]:
    """Fill each provider's missing fields from `defaults:` (mappings merge one level deep)."""
    defaults = data.get("defaults") or {}
    if not isinstance(defaults, dict):
        raise ConfigError("defaults: expected a mapping of provider fields", file=source)
    _check_defaults(defaults, source)
    providers = data.get("providers")
    if not defaults or not isinstance(providers, list):
        return data
    merged = []
    for p in providers:
        if isinstance(p, dict):
            out = {**defaults, **p}
            for key in _MERGED_FIELDS:
                if isinstance(defaults.get(key), dict) and isinstance(p.get(key), dict):
                    out[key] = {**defaults[key], **p[key]}
            merged.append(out)
        else:
            merged.append(p)
    return {**data, "providers": merged}


def _check_defaults(defaults: dict[str, Any], source: str) -> None:
    """Validate `defaults:` on its own, so that a mistake in it is reported once, as its own,
    rather than once for every provider it is copied into."""
    known = set(Provider.model_fields) - {"name", "endpoint"}
    for key in defaults:
        if key not in known:
            raise ConfigError(
                f"defaults, field {key!r}: unknown field{_did_you_mean(key, known)}", file=source
            )
    try:
        Provider.model_validate({**defaults, "name": "defaults", "endpoint": "http://defaults/"})
    except ValidationError as exc:
        raise ConfigError(_describe(exc, {}, ("defaults",)), file=source) from None


def _did_you_mean(word: object, choices: Any) -> str:
    close = difflib.get_close_matches(str(word), list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _where(loc: tuple[Any, ...], data: Any) -> str:
    """`provider 'x' (providers[2]), field 'timeout.read'` from a validation location."""
    if len(loc) >= 2 and loc[0] == "providers" and isinstance(loc[1], int):
        name = None
        if isinstance(data, dict):
            items = data.get("providers")
            if isinstance(items, list) and loc[1] < len(items) and isinstance(items[loc[1]], dict):
                name = items[loc[1]].get("name")
        who = f"provider {name!r} (providers[{loc[1]}])" if name else f"providers[{loc[1]}]"
        rest = ".".join(str(x) for x in loc[2:])
        return f"{who}, field {rest!r}" if rest else who
    if len(loc) >= 2 and loc[0] == "defaults":
        return f"defaults, field {'.'.join(str(x) for x in loc[1:])!r}"
    return f"field {'.'.join(str(x) for x in loc)!r}" if loc else "top level"


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The config model class that holds the field at `loc` (for 'did you mean')."""
    model: Any = Config
    if loc[:1] == ("defaults",):  # `defaults:` holds provider fields
        model, loc = Provider, loc[1:]
    for part in loc:
        if isinstance(part, int) or model is None:
            continue
        field = model.model_fields.get(part)
        if field is None:
            return None
        model = _first_model(field.annotation)
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _first_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _first_model(arg)
        if found is not None:
            return found
    if get_origin(annotation) is Annotated:
        return _first_model(get_args(annotation)[0])
    return None


def _describe(exc: ValidationError, data: Any, prefix: tuple[str, ...] = ()) -> str:
    """Readable lines from pydantic's errors: where, what was expected, what was given.
    `prefix` is where the validated value sits in the file (its errors' locations are
    relative to it)."""
    lines = []
    for err in exc.errors(include_url=False):
        loc = prefix + tuple(p for p in err["loc"] if not (isinstance(p, str) and p in _UNION_TAGS))
        msg = str(err["msg"]).removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            model = _model_at(loc[:-1])
            known = [f.alias or k for k, f in (model.model_fields.items() if model else [])]
            msg = f"unknown field{_did_you_mean(loc[-1], known)}"
        elif err["type"] not in ("value_error", "missing") and "input" in err:
            given = err["input"]
            if not isinstance(given, Mapping | list):
                msg = f"{msg} (got {given!r})"
        lines.append(f"{_where(loc, data)}: {msg}")
    return "; ".join(lines)


_UNION_TAGS = frozenset({"log", "webhook", "email", "function-after[_names(), Config]"})
