"""The whole config file (protocol §2.2): `Config` and its sections besides the providers.

Validation here checks values and how they refer to each other (a route naming a provider that
does not exist); finding, reading and expanding the file is `load`'s job.
"""

from __future__ import annotations

import re
import ssl
from dataclasses import dataclass, field
from datetime import tzinfo
from typing import Annotated, Any, Literal, Union
from urllib.parse import urlsplit

from pydantic import ConfigDict, Field, PrivateAttr, field_validator, model_validator

from ..core.balance import DEFAULT
from ..core.routing import Policy, RouteTable
from ..version import PROTOCOL_VERSION
from .describe import did_you_mean
from .embeddings import EmbeddingsConfig, names_of, token_spaces
from .provider import Ms, Name, Provider, Section, http_url
from .server import ServerConfig

# A route's name; one with `*` wildcards is a pattern of model names (`claude-*haiku*`).
RouteName = Annotated[str, Field(pattern=r"^[A-Za-z0-9._*-]+$", min_length=1)]


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


OnBlocked = Literal["stop", "failover"]
# How an order shares traffic (protocol §3): `order`, the first that can answer takes all;
# `weighted`, each request's order is drawn by `fallback_weight`; `latency`, the fastest of
# late first; `least_busy`, the one with the fewest requests in flight (a fleet's, on Redis).
Balance = Literal["order", "weighted", "latency", "least_busy"]


class RouteConfig(Section):
    """A named route: an ordered list of provider names, and what of the config's request
    policy it sets for itself (hedging, first token, blocked content, cut streams)."""

    providers: list[Name] = Field(min_length=1)
    balance: Balance = "order"
    hedge_after_ms: Ms | None = None
    first_token_ms: Ms | None = None
    stall_ms: Ms | None = None
    on_content_blocked: OnBlocked | None = None
    continue_on_cut: bool | None = None

    @model_validator(mode="before")
    @classmethod
    def _list_form(cls, data: Any) -> Any:
        return {"providers": data} if isinstance(data, list) else data


def _off(value: Any) -> Any:
    # YAML 1.1 reads a bare `off` as False.
    return "off" if value is False else value


class HealthConfig(Section):
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


class CircuitConfig(Section):
    failures: Annotated[int, Field(ge=1)] = 3
    cooldown_s: Annotated[float, Field(ge=0)] = 30.0
    auth_cooldown_s: Annotated[float, Field(ge=0)] = 300.0
    # A 429 that says to wait longer than this is a used-up window, not a rate limit.
    rate_limit_window_s: Annotated[float, Field(ge=0)] = 60.0
    quota_cooldown_s: Annotated[float, Field(ge=0)] = 3600.0  # a used-up plan that names no reset


Threshold = Annotated[float, Field(gt=0, le=1)]


AlertEvent = Literal[
    "quota_threshold", "quota_exhausted", "circuit_opened", "circuit_closed", "all_providers_failed"
]


class _Sink(Section):
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

    _url = field_validator("url")(http_url)

    @property
    def origin(self) -> str:
        """`scheme://host:port` of its URL, as log lines name it: the rest (a Slack-style
        path, a `?token=`, a `user:password@`) is often the secret that lets anyone post."""
        parts = urlsplit(self.url)
        host = f"[{parts.hostname}]" if ":" in (parts.hostname or "") else parts.hostname
        return f"{parts.scheme}://{host}" + (f":{parts.port}" if parts.port else "")


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


class TracingConfig(Section):
    """OpenTelemetry export (protocol §12), with the `otel` extra; the standard `OTEL_*`
    variables configure it too."""

    endpoint: str | None = None  # OTLP/HTTP base URL, as OTEL_EXPORTER_OTLP_ENDPOINT
    service_name: str | None = None  # else OTEL_SERVICE_NAME, else agent-reach
    headers: dict[str, str] = {}  # e.g. an auth header of the collector

    @field_validator("endpoint")
    @classmethod
    def _endpoint(cls, value: str | None) -> str | None:
        return None if value is None else http_url(value)


@dataclass(frozen=True, slots=True)
class Expansion:
    """One `${VAR}` the loader read from the environment: where in the file (the location of
    the value it stands in), the variable, and what it held."""

    at: tuple[str | int, ...]
    name: str
    value: str = field(repr=False)


def _credential(value: str, url: str) -> bool:
    """Whether `value` stands in the query or the `user:password@` of `url`."""
    parts = urlsplit(url)
    return value in parts.query or value in parts.netloc.rpartition("@")[0]


class Config(Section):
    """The whole config file (protocol §2.2)."""

    version: str = PROTOCOL_VERSION
    defaults: dict[str, Any] = {}
    fallback_order: list[Name] | None = None
    balance: Balance = "order"  # the default order's
    routes: dict[RouteName, RouteConfig] = {}
    health: HealthConfig = HealthConfig()
    circuit: CircuitConfig = CircuitConfig()
    # Sessions keep their provider's prompt cache (protocol §3.1): a session's turns try its home
    # first; `affinity_move_after` turns in a row served elsewhere move it; a home unchanged for
    # `affinity_ttl_s` (OpenAI's extended cache retention, the longest the catalog's providers
    # document) is forgotten; at most `affinity_max_sessions` are kept.
    affinity: bool = True
    affinity_ttl_s: Annotated[float, Field(gt=0)] = 86400.0
    affinity_move_after: Annotated[int, Field(ge=1)] = 5
    affinity_max_sessions: Annotated[int, Field(ge=1)] = 100_000
    deadline_ms: Ms = 60000
    on_content_blocked: OnBlocked = "stop"  # or failover (protocol §5.1); also per route
    continue_on_cut: bool = True  # finish a cut stream with the next provider (protocol §10)
    last_resort_includes_auth: bool = False  # a bad key's open circuit is a last resort too
    alerts: list[Alert] = []
    state: str = "sqlite:///~/.agent-reach/state.db"
    retention_days: Annotated[float, Field(gt=0)] = 7.0  # how long the attempt log keeps
    quota_tz: str = "UTC"  # the time zone of budget windows (calendar days, hours)
    server: ServerConfig = ServerConfig()
    tracing: TracingConfig = TracingConfig()
    embeddings: EmbeddingsConfig = EmbeddingsConfig()
    providers: list[Provider] = Field(min_length=1)

    _source: str = PrivateAttr(default="<dict>")
    _hooks: dict[tuple[str, str], Any] = PrivateAttr(default_factory=dict)
    _tls: dict[str, ssl.SSLContext] = PrivateAttr(default_factory=dict)
    _expanded: tuple[Expansion, ...] = PrivateAttr(default=())
    _spaces: dict[str, str] = PrivateAttr(default_factory=dict)  # a name or alias → its space
    _token_spaces: frozenset[str] = PrivateAttr(default_factory=frozenset)

    @property
    def source(self) -> str:
        """The file this config came from (`<dict>` when built from a dict)."""
        return self._source

    def attach(
        self,
        source: str,
        hooks: dict[tuple[str, str], Any],
        tls: dict[str, ssl.SSLContext] | None = None,
        expanded: tuple[Expansion, ...] = (),
    ) -> None:
        """Record the file this config was read from, its loaded hook functions
        ((provider, field) → function), the TLS contexts of the providers that set
        `ssl_verify` or `ca_file`, and the `${VAR}`s it read; the loader does this once,
        after validation."""
        self._source = source
        self._hooks = hooks
        self._tls = tls or {}
        self._expanded = expanded

    @property
    def variables(self) -> frozenset[str]:
        """The environment variables its `${VAR}`s read (what they held is the config's:
        a Redis password, a collector's token, a key in an endpoint)."""
        return frozenset(e.name for e in self._expanded)

    def endpoint_secrets(self, name: str) -> tuple[str, ...]:
        """What `${VAR}`s put where a credential goes in provider `name`'s `endpoint` or
        `health_check` (its own or the `defaults:` one): the query or the `user:password@`
        (`?key=${GEMINI_KEY}`). Secrets, as its key is (protocol §14); elsewhere in a URL (a
        host, a path) a variable is no secret."""
        i, spec = next((i, p) for i, p in enumerate(self.providers) if p.name == name)
        check = spec.health_check or ""
        urls: dict[tuple[str | int, ...], str] = {
            ("providers", i, "endpoint"): spec.endpoint,
            ("providers", i, "health_check"): check,
            ("defaults", "health_check"): check,
        }
        return tuple(
            e.value for e in self._expanded if e.at in urls and _credential(e.value, urls[e.at])
        )

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
                    raise ValueError(f"{where}: no provider named {n!r}{did_you_mean(n, seen)}")
        return self

    @model_validator(mode="after")
    def _embedding_spaces(self) -> Config:
        self._spaces = names_of(self.embeddings.spaces, self.providers)
        self._token_spaces = token_spaces(self.providers)
        return self

    def takes_tokens(self, space: str) -> bool:
        """Whether a provider of `space` takes inputs as token ids (`token_input`)."""
        return space in self._token_spaces

    def space_of(self, model: str | None) -> str | None:
        """The embedding space a request's `model` names (the space or one of its aliases)."""
        return self._spaces.get(model) if model else None

    def route_table(self) -> RouteTable:
        """The default order and named routes, resolved (protocol §3)."""
        ways = {DEFAULT: self.balance} | {n: r.balance for n, r in self.routes.items()}
        return RouteTable.build(
            [(p.name, p.fallback_weight) for p in self.providers],
            self.fallback_order,
            {name: route.providers for name, route in self.routes.items()},
            {n: way for n, way in ways.items() if way != "order"},
        )

    def policies(self) -> dict[str, Policy]:
        """The failure policy of each named route, and of the rest under the name ""."""
        top = Policy(self.on_content_blocked == "stop", self.continue_on_cut)
        out = {"": top}
        for name, route in self.routes.items():
            blocked = route.on_content_blocked or self.on_content_blocked
            cut = self.continue_on_cut if route.continue_on_cut is None else route.continue_on_cut
            out[name] = Policy(
                blocked == "stop", cut, route.first_token_ms, route.hedge_after_ms, route.stall_ms
            )
        return out

    def hook(self, provider: str, field: str) -> Any:
        """The loaded function of a provider's `preprocess_hook` / `post_process_hook`."""
        return self._hooks.get((provider, field))

    def tls(self, provider: str) -> ssl.SSLContext | None:
        """The TLS context of a provider's `ssl_verify: false` or `ca_file`; None: the
        client's default (the system's CAs, verified)."""
        return self._tls.get(provider)

    def provider(self, name: str) -> Provider:
        """The provider called `name` (KeyError if there is none)."""
        for p in self.providers:
            if p.name == name:
                return p
        raise KeyError(name)
