"""One provider of the config file (protocol §2.3): its model, and the defaults its `format` fills.

The formats are the dialects' (`dialects.Format`): the model lists them for validation and for
the JSON Schema of `agent-reach config schema`, and adds none of its own.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from .. import dialects
from ..chat.validation import Level
from ..core import proxies, quota
from ..core.trace import Reason

Ms = Annotated[float, Field(gt=0, description="milliseconds")]
Name = Annotated[str, Field(pattern=r"^[A-Za-z0-9._-]+$", min_length=1)]
HookRef = Annotated[str, Field(pattern=r"^[^:\s][^\s]*:[A-Za-z_][A-Za-z0-9_]*$")]
Width = Annotated[int, Field(gt=0, le=65536)]  # an embedding's dimensions
_TOKEN = r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$"  # an HTTP header's name (RFC 9110 token)
# What agent-reach sets on a request itself, which no header of the config may replace.
_OWN_HEADERS = frozenset(
    {"host", "content-type", "content-length", "transfer-encoding", "connection"}
    | {"authorization", "x-api-key", "x-goog-api-key", "anthropic-version", "anthropic-beta"}
)
MaxTokensField = Literal[
    "max_tokens",
    "max_completion_tokens",
    "max_new_tokens",
    "num_predict",
    "tokens_to_generate",
    "max_output_tokens",
    "maxOutputTokens",
]


def http_url(value: str) -> str:
    """`value` when it is a full http(s) URL; ValueError otherwise."""
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"expected a full http(s) URL, got {value!r}")
    return value


def _dashscope_compatible(fmt: str, endpoint: str) -> bool:
    """Whether `endpoint` is DashScope's (Alibaba Model Studio's) OpenAI-compatible mode,
    which documents `cache_control` on message parts."""
    host = urlsplit(endpoint).hostname or ""
    return fmt == "openai" and host.endswith(".aliyuncs.com") and "compatible-mode" in endpoint


# DeepSeek's reasoning models refuse `tool_choice` (its Anthropic endpoint sends Claude Code's
# `claude-opus*` to deepseek-v4-pro).
_DEEPSEEK_NO_TOOL_CHOICE = ["deepseek-reasoner*", "deepseek-v4-pro*", "claude-opus*"]


def _refusing_tool_choice(endpoint: str) -> list[str]:
    """The models of `endpoint` known to refuse `tool_choice`."""
    host = urlsplit(endpoint).hostname
    return list(_DEEPSEEK_NO_TOOL_CHOICE) if host == "api.deepseek.com" else []


class Section(BaseModel):
    """A part of the config file: frozen, and a field it does not know is an error."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Timeout(Section):
    """Per-provider timeouts in ms; `read` bounds the wait for the head and between chunks."""

    connect: Ms = 1000
    read: Ms = 3000


class SchemaCompatibility(Section):
    """Where the answer is in a provider's body (protocol §7); paths default by `format`."""

    choices_path: str | None = None
    content_path: str | None = None
    model_field: str = "model"
    # On a failed attempt of one of `debug_reasons` ("*": any), show its raw answer and this
    # provider's effective config: the CLI's --verbose trace, the proxy's log (protocol §7).
    debug_mode: bool = False
    debug_reasons: list[str] = ["schema_mismatch"]

    @field_validator("debug_reasons")
    @classmethod
    def _reasons(cls, value: list[str]) -> list[str]:
        known = {r.value for r in Reason}
        for reason in value:
            if reason != "*" and reason not in known:
                raise ValueError(f"{reason!r} is not a reason ({', '.join(sorted(known))}, or *)")
        return value


Tokens = Annotated[int, Field(gt=0)]


class ProviderEmbeddings(Section):
    """A provider's `embeddings:`: the spaces it serves, each by its own model name; how many
    inputs one request of it may carry; its embeddings URL (default: the format's, beside the
    chat endpoint); whether its models take a width (`dimensions`, `outputDimensionality`);
    whether its API takes inputs as token ids (OpenAI's does; they are the space's model's
    tokens, the same at every provider of the space)."""

    models: dict[Name, Annotated[str, Field(min_length=1)]] = Field(min_length=1)
    max_batch: Annotated[int, Field(gt=0, le=100_000)] | None = None
    endpoint: str | None = None
    send_dimensions: bool = True
    token_input: bool = False

    @field_validator("endpoint")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        return None if value is None else http_url(value)


class Limits(Section):
    """What one model of a provider takes: output tokens per answer, input tokens."""

    max_output_tokens: Tokens | None = None
    context_window: Tokens | None = None


def env_name(value: str | None) -> str | None:
    """`value` when it is the name of an environment variable; ValueError otherwise."""
    if value and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value):
        # Not quoted: what is written there by mistake is often the secret itself.
        raise ValueError("expected the NAME of an environment variable, not its value")
    return value


class Key(Section):
    """One key of a provider's pool (`keys:`, protocol §2.3): the variable that holds it, its
    share of the provider's traffic under `weighted` balance, its own budget (`quota`, as
    `metadata.rate_limit` writes one), which replaces the provider's for this key, and the
    `group` of keys it shares its provider's quota with."""

    env: Annotated[str, Field(min_length=1)]
    weight: Annotated[float, Field(ge=0)] = 1.0
    quota: str | None = None
    # Keys that share one quota (one account or project behind several keys): a usage limit
    # or rate limit that parks one parks every key of its group.
    group: str | None = None

    _env = field_validator("env")(env_name)

    @field_validator("quota")
    @classmethod
    def _quota(cls, value: str | None) -> str | None:
        if value is not None:
            quota.parse(value)  # ValueError says what a budget looks like
        return value


class Provider(Section):
    """One backend endpoint (protocol §2.3)."""

    name: Name
    endpoint: str
    format: dialects.Format = "openai"
    auth_header: str | None = None
    auth_scheme: str | None = None
    api_key_env: str = ""  # the key's variable; a list of names is a pool (`keys`)
    keys: list[Key] = []  # a pool of keys, each with its own circuit and budgets
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
    # Takes the client's `cache_control` marks; unset: `format: anthropic` and DashScope's
    # compatible mode do (protocol §2.3).
    cache_control: bool | None = None
    # Models (`*` wildcards) sent no `tool_choice`, as they refuse it; unset: DeepSeek's
    # reasoning models on api.deepseek.com (protocol §2.3).
    drop_tool_choice: list[Annotated[str, Field(min_length=1)]] | None = None
    preprocess_hook: HookRef | None = None
    post_process_hook: HookRef | None = None
    fallback_weight: Annotated[float, Field(ge=0)] = 1.0
    # Extra tries of this provider before the next; unset: one, for a 5xx or a 429 whose wait
    # is 2 s at most (`routing.retry_delay`).
    retries: Annotated[int, Field(ge=0, le=10)] | None = None
    hedge_after_ms: Ms | None = None
    first_token_ms: Ms | None = None  # no content this long after sending: fail over
    stall_ms: Ms | None = None  # no line this long after the first content: a cut
    assistant_prefill: bool | None = None  # continues a trailing assistant turn (None: format's)
    context_window: Tokens | None = None  # input tokens it accepts
    max_output_tokens: Tokens | None = None  # a request's output cap is clamped to this
    model_limits: dict[str, Limits] = {}  # by the model it is asked for, over the two above
    stream_usage: bool = True  # false: never sent `stream_options` (a provider rejects it)
    # true: a chat request of a session is sent a key for it as `prompt_cache_key` (OpenAI
    # routes prompt-cache hits by it): Codex's own `prompt_cache_key` or `session-id`, else the
    # key of the session's home; a chat client's own `prompt_cache_key` goes as it came.
    prompt_cache_key: bool = False
    # A header it routes prompt-cache hits by (xAI's `x-grok-conv-id`): a request of a session
    # carries the key of the session's home (`ChatRequest.affinity`), the same on every turn.
    session_header: Annotated[str, Field(pattern=_TOKEN)] | None = None
    # The HTTP proxy its requests go through (protocol §2.3): None follows HTTPS_PROXY,
    # http_proxy and NO_PROXY as curl does; `none` connects directly; else http://host:port.
    proxy: str | None = None
    proxy_auth_env: str | None = None  # a variable holding the proxy's `user:password`
    ssl_verify: bool = True  # false: an https endpoint's certificate is not checked
    ca_file: str | None = None  # PEM CAs trusted for its https endpoint, instead of the system's
    metadata: dict[str, Any] = {}
    embeddings: ProviderEmbeddings | None = None  # the embedding spaces it serves (§2.4)

    @model_validator(mode="before")
    @classmethod
    def _seed_alias(cls, data: Any) -> Any:
        # Configs embedded in other tools (the seed's `agent_reach_fallbacks`) say `provider:`.
        if isinstance(data, dict) and "name" not in data and "provider" in data:
            data = {("name" if k == "provider" else k): v for k, v in data.items()}
        return data

    @model_validator(mode="before")
    @classmethod
    def _pool(cls, data: Any) -> Any:
        """`api_key_env: [A, B]` is the pool `keys: [{env: A}, {env: B}]`; with a pool,
        `api_key_env` names its first key (what shows one key where one is shown)."""
        if not isinstance(data, dict):
            return data
        names, keys = data.get("api_key_env"), data.get("keys")
        if isinstance(names, list):
            if keys:
                raise ValueError("set either a list in api_key_env or keys, not both")
            data = {**data, "keys": [{"env": n} for n in names]}
            keys = data["keys"]
        elif names and keys:
            raise ValueError("set either api_key_env or keys, not both")
        if keys and isinstance(keys, list):
            first = keys[0].get("env", "") if isinstance(keys[0], dict) else ""
            valid = isinstance(first, str) and re.fullmatch(r"[A-Za-z_]\w*", first, re.ASCII)
            data = {**data, "api_key_env": first if valid else ""}
        return data

    _endpoint = field_validator("endpoint")(http_url)

    @field_validator("metadata")
    @classmethod
    def _budgets(cls, value: dict[str, Any]) -> dict[str, Any]:
        if "rate_limit" in value:
            quota.parse(value["rate_limit"])  # ValueError says what a budget looks like
        return value

    def limits(self, model: str) -> tuple[int | None, int | None]:
        """(output cap, context window) of `model`, the name this provider is asked for: its
        `model_limits` entry where that sets them, else the provider's own."""
        own = self.model_limits.get(model)
        if own is None:
            return self.max_output_tokens, self.context_window
        return (
            own.max_output_tokens or self.max_output_tokens,
            own.context_window or self.context_window,
        )

    @property
    def budgets(self) -> tuple[quota.Budget, ...]:
        """The budgets of `metadata.rate_limit` (protocol §12)."""
        rate = self.metadata.get("rate_limit")
        return quota.parse(rate) if rate else ()

    @property
    def key_envs(self) -> tuple[str, ...]:
        """The variables of its keys: its pool's, else its one `api_key_env`, else none."""
        if self.keys:
            return tuple(k.env for k in self.keys)
        return (self.api_key_env,) if self.api_key_env else ()

    @field_validator("keys")
    @classmethod
    def _distinct(cls, value: list[Key]) -> list[Key]:
        seen = [k.env for k in value]
        twice = sorted({n for n in seen if seen.count(n) > 1})
        if twice:
            raise ValueError(f"a key variable is named twice: {', '.join(twice)}")
        return value

    _env_names = field_validator("api_key_env", "proxy_auth_env")(env_name)

    @field_validator("session_header")
    @classmethod
    def _own_header(cls, value: str | None, info: ValidationInfo) -> str | None:
        auth = str(info.data.get("auth_header") or "").lower()
        if value is not None and value.lower() in _OWN_HEADERS | {auth}:
            raise ValueError(f"{value} is a header agent-reach sets itself")
        return value

    @field_validator("proxy")
    @classmethod
    def _proxy(cls, value: str | None) -> str | None:
        if value is not None and not proxies.is_direct(value):
            proxies.parse(value)  # ValueError says what a proxy looks like, never its password
        return value

    @model_validator(mode="after")
    def _not_a_base_url(self) -> Provider:
        """A base URL where the endpoint belongs (`…/v1`, `…/anthropic`, as SDKs take it) is
        refused here, with the endpoint it stands for, rather than failing every request."""
        from ..catalog import endpoint_of_base

        found = endpoint_of_base(self.endpoint, self.format)
        if self.format in ("openai", "anthropic") and found is not None:
            raise ValueError(
                f"endpoint {self.endpoint!r} is a base URL; did you mean {found[1]!r}?"
            )
        return self

    @model_validator(mode="after")
    def _embeddings_url(self) -> Provider:
        """Where its embeddings go must be known: `embeddings.endpoint`, or the format's URL
        beside the chat endpoint (Gemini's from the model)."""
        from ..dialects import embeddings

        kind = embeddings.kind_of(self.format)
        served = self.embeddings
        told = kind == "gemini" or embeddings.default_url(kind, self.endpoint) is not None
        if served and served.endpoint is None and not told:
            raise ValueError(
                f"embeddings.endpoint: no embeddings URL can be told from endpoint "
                f"{self.endpoint!r}; set it (e.g. https://…/v1/embeddings)"
            )
        if served and served.token_input and kind != "openai":
            raise ValueError(
                f"embeddings.token_input: format {self.format!r} takes text only (token ids "
                "go in OpenAI's shape)"
            )
        return self

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
            "cache_control": self.cache_control
            if self.cache_control is not None
            else self.format == "anthropic" or _dashscope_compatible(self.format, self.endpoint),
            "drop_tool_choice": self.drop_tool_choice
            if self.drop_tool_choice is not None
            else _refusing_tool_choice(self.endpoint),
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
