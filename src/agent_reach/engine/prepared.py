"""A provider prepared for the engine: URLs, headers, key and limits resolved once at start-up,
plus the judgement of what it answered. No network I/O and no clock (`now` and `created` come
in); it does run the provider's hooks, which are user code.
"""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import quote, urljoin, urlsplit

import orjson

from .. import dialects
from ..chat import callids
from ..chat.request import ChatRequest
from ..config import Config, Provider
from ..config.hooks import Hook
from ..config.provider import Key
from ..core import identity, proxies, quota
from ..core.errors import ConfigError, quoted
from ..core.outcomes import Outcome
from ..core.proxies import Proxy
from ..core.quota import Budget
from ..core.redaction import Redactor
from ..core.routing import Patterns
from ..core.trace import Attempt
from ..dialects import Context, Dialect, Shape, artifacts
from ..dialects.convert import continued, one_segment


@dataclass(frozen=True)
class PreparedProvider:
    """One provider, ready to send to; built by `prepare` when the router starts."""

    spec: Provider
    dialect: Dialect
    shape: Shape
    headers: dict[str, str]
    stream_headers: dict[str, str]
    health_url: str | None
    health_headers: dict[str, str]
    connect_s: float
    read_s: float
    key: str | None = field(default=None, repr=False)
    missing_key: str | None = None  # the key variable's name when it is not set
    # Of a pool of keys (`keys`, protocol §2.3): its key's variable, named in its attempts,
    # events and metrics; None for a provider of one key. Each key is prepared on its own.
    pool_key: str | None = None
    key_weight: float = 1.0  # its key's share of the provider's traffic (`weighted`)
    key_group: str | None = None  # the keys it shares a quota with (`Key.group`)
    preprocess: Hook | None = None
    postprocess: Hook | None = None
    budgets: tuple[Budget, ...] = ()
    needs_model: bool = True
    model_in_url: bool = False  # its URL has the model in a path segment (ERNIE, Gemini)
    # Where its remembered state is kept (protocol §12 identity): circuit and health by name,
    # endpoint and key; budget counters by name and key. Fingerprints only, never the key.
    state_key: str = ""
    quota_key: str = ""
    rate_limit_window_s: float = 60.0  # a longer stated wait is a used-up window (protocol §5)
    # What its reasoning artifacts are tagged with: the fingerprint of its identity.
    origin: str = ""
    model_map: Patterns[str] = field(default_factory=lambda: Patterns({}))
    no_tool_choice: Patterns[bool] = field(default_factory=lambda: Patterns({}))
    # The HTTP proxy its requests (`proxy`) and its health checks (`health_proxy`, another
    # origin may have another) go through, None: direct; decided once by `proxies.choose`.
    proxy: Proxy | None = None
    health_proxy: Proxy | None = None
    tls: ssl.SSLContext | None = None  # `ssl_verify: false` / `ca_file`; None: the default
    # Its secrets (key, endpoint credentials, proxy credentials) in every spelling, as `***`.
    redactor: Redactor = field(default_factory=Redactor, repr=False)

    @classmethod
    def prepare(
        cls,
        spec: Provider,
        environ: os._Environ[str] | dict[str, str],
        preprocess: Hook | None = None,
        postprocess: Hook | None = None,
        rate_limit_window_s: float = 60.0,
        tls: ssl.SSLContext | None = None,
        secrets: tuple[str, ...] = (),
        member: Key | None = None,
    ) -> PreparedProvider:
        """Resolve everything that does not change between requests; ConfigError when the
        proxy variable that applies to it holds no http proxy. `secrets`: what else of its
        config is never shown besides its key and its proxy's credentials (what `${VAR}`s put
        in its endpoint's query, `Config.endpoint_secrets`, the pool's other keys). `member`:
        the key of its pool this one sends with (its budget replaces the provider's)."""
        dialect = dialects.get(spec.format).for_endpoint(spec.endpoint)
        key_env = member.env if member is not None else spec.api_key_env
        key = environ.get(key_env) if key_env else None
        auth: dict[str, str] = {}
        if key and spec.auth_header and not spec.auth_query:
            auth[spec.auth_header] = f"{spec.auth_scheme} {key}" if spec.auth_scheme else key
        headers = {"Content-Type": "application/json", **dialect.headers(), **auth}
        health_url = urljoin(spec.endpoint, spec.health_check) if spec.health_check else None
        same_origin = health_url is not None and _origin(health_url) == _origin(spec.endpoint)
        sc = spec.schema_compatibility
        scale = spec.fallback_weight if spec.timeout_scaling == "weight" else 1.0
        state_key = identity.state_key(spec.name, spec.endpoint, key)
        env = proxies.ProxyEnv.of(environ)
        proxy_auth = environ.get(spec.proxy_auth_env) if spec.proxy_auth_env else None
        try:
            proxy = proxies.choose(spec.endpoint, spec.proxy, env, proxy_auth)
            health_proxy = (
                proxies.choose(health_url, spec.proxy, env, proxy_auth) if health_url else None
            )
        except ValueError as exc:
            raise ConfigError(f"provider {spec.name!r}: {exc}") from None
        proxied = (
            *(proxy.secrets if proxy else ()),
            *(health_proxy.secrets if health_proxy else ()),
        )
        return cls(
            spec=spec,
            dialect=dialect,
            shape=Shape(sc.choices_path or "", sc.content_path or "", sc.model_field),
            headers=headers,
            stream_headers={**headers, **dialect.stream_headers()},
            health_url=health_url,
            health_headers={**dialect.headers(), **auth} if same_origin else {},
            connect_s=spec.timeout.connect / 1000,
            read_s=max(spec.timeout.read * scale, 1.0) / 1000,
            key=key or None,
            missing_key=key_env if key_env and not key else None,
            pool_key=member.env if member is not None and len(spec.keys) > 1 else None,
            key_weight=1.0 if member is None else member.weight,
            key_group=None if member is None else member.group,
            preprocess=preprocess,
            postprocess=postprocess,
            budgets=quota.parse(member.quota) if member and member.quota else spec.budgets,
            needs_model=postprocess is None and dialect.needs_model(spec.endpoint),
            model_in_url=dialect.model_in_url(spec.endpoint),
            state_key=state_key,
            quota_key=identity.quota_key(spec.name, key),
            rate_limit_window_s=rate_limit_window_s,
            origin=identity.split(state_key)[1] or "",
            model_map=Patterns.of(spec.model_map),
            no_tool_choice=Patterns.of(dict.fromkeys(spec.drop_tool_choice or (), True)),
            proxy=proxy,
            health_proxy=health_proxy,
            tls=tls,
            redactor=Redactor.masking((key, *secrets, *proxied)),
        )

    @property
    def has_hooks(self) -> bool:
        return self.preprocess is not None or self.postprocess is not None

    @property
    def name(self) -> str:
        return self.spec.name

    # -- the request -----------------------------------------------------------------------

    def cap_key(self, model: str) -> str:
        """Where the output cap this provider's `model` stated is remembered (by identity)."""
        return f"{self.state_key}|{model}"

    @property
    def cap_fields(self) -> frozenset[str]:
        """The names its refusals may give the output cap it was sent: its format's field, the
        configured `max_tokens_field`, and chat's two (every OpenAI-compatible API's)."""
        own = (self.dialect.max_tokens_field, self.spec.max_tokens_field or "max_tokens")
        return frozenset((*own, *_CHAT_CAPS))

    def names_model(self, model: str) -> bool:
        """Whether `model` is one the config names for this provider (`models`, a `model_map`
        target, `model_limits`), not only a client's choice passed on as it came."""
        spec = self.spec
        named = model in (spec.models or ()) or model in spec.model_limits
        return named or model in spec.model_map.values()

    def model_for(self, requested: str | None) -> str:
        """The model name this provider is asked for (protocol §3): `model_map` (a key with
        `*` wildcards for the models it matches, `"*"` for any model the map does not name),
        else as requested; with no model requested, the first of its `models`, else its `"*"`
        mapping, else "" (no model in the body)."""
        if requested:
            return self.model_map.get(requested) or requested
        return self.spec.models[0] if self.spec.models else self.spec.model_map.get("*", "")

    def serves(self, requested: str | None) -> bool:
        """Whether a request for `requested` may go to this provider (its `models`). A request
        that names no model goes only where the provider knows one to use, or takes requests
        without one: its URL names the model, a `post_process_hook` makes the answer, or its
        `model_map` says `"*": ""` (protocol §3)."""
        models = self.spec.models
        if not requested:
            takes_none = "*" in self.spec.model_map or not self.needs_model
            return bool(self.model_for(None)) or takes_none
        if models is None:
            return True
        return requested in models or self.model_for(requested) in models

    def refuses(self, model: str) -> str | None:
        """Why `model`, the name it would be asked for, is not sent to it: its URL has the
        model in a path segment, and that name would not stay one (`..`, `a/b`,
        `%2e%2e`), so the request (and a key in its query) would reach another path of the
        host. None when it may be sent."""
        if not self.model_in_url or one_segment(self.dialect.path_model(model)):
            return None
        return f"model {quoted(model)} cannot be a segment of its URL's path"

    def speaks(self, req: ChatRequest) -> bool:
        """Whether this provider speaks the API the request arrived in (`format: anthropic`
        for a Messages request, `format: responses` for a Responses one): then the request
        goes to it as it came, and its answer comes back as it is."""
        native = req.native is not None and req.api == self.dialect.speaks
        return native and req.continuing is None

    @property
    def prefill(self) -> bool:
        """Whether it continues a trailing assistant turn (a prefill) rather than answering it:
        `assistant_prefill`, else what its format does (protocol §10, continuation)."""
        own = self.spec.assistant_prefill
        return self.dialect.prefill if own is None else own

    def headers_for(self, req: ChatRequest, stream: bool) -> dict[str, str]:
        """The request headers: the provider's own, plus the client's API headers
        (`native_headers`) when the request goes to it natively, and the session's key in the
        provider's `session_header`."""
        base = self.stream_headers if stream else self.headers
        if req.native_headers and self.speaks(req):
            base = {**base, **req.native_headers}
        if self.spec.session_header and req.affinity:
            base = {**base, self.spec.session_header: req.affinity}
        return base

    def url(self, model: str, stream: bool) -> str:
        """The URL to POST to, with the key in the query where `auth_query` says so."""
        return self.keyed(self.dialect.url(self.spec.endpoint, model, stream))

    def keyed(self, url: str) -> str:
        """`url` with the key in its query where `auth_query` says so."""
        if self.spec.auth_query and self.key:
            sep = "&" if "?" in url else "?"
            url = f"{url}{sep}{self.spec.auth_query}={quote(self.key, safe='')}"
        return url

    def body(
        self,
        req: ChatRequest,
        model: str,
        stream: bool,
        max_output: int | None = None,
        bare: bool = False,
    ) -> bytes:
        """The serialized request body for this provider; the request's output cap lowered
        to `max_output` when it asks for more (never raised, never added); `bare`: without
        the reasoning artifacts of earlier turns (it refused them as another provider's)."""
        if req.native is not None and self.speaks(req):
            native = self.dialect.native_body(req.native, model, stream)
            body = self.dialect.home(native, None if bare else self.origin)
            if max_output is not None:
                body = _clamped(body, (self.dialect.max_tokens_field,), max_output)
        else:
            cap_field = self.spec.max_tokens_field or "max_tokens"
            request = req.marked if req.marked is not None and self.spec.cache_control else req.body
            if req.minted:
                request = callids.restored(request)
            if max_output is not None:
                request = _clamped(request, _CHAT_CAPS, max_output)
            if not self.spec.stream_usage and "stream_options" in request:
                request = {k: v for k, v in request.items() if k != "stream_options"}
            # Codex's own key, else its session's home's; a chat client's own goes as it came
            key = self.spec.prompt_cache_key and (req.session or req.affinity)
            if key and "prompt_cache_key" not in request:
                request = {**request, "prompt_cache_key": key}
            if req.continuing is not None:
                request = continued(request, req.continuing, self.prefill, not self.dialect.prefill)
            body = self.dialect.body(request, model, stream, cap_field)
        if "tool_choice" in body and self.no_tool_choice.get(model):
            del body["tool_choice"]
        if self.spec.extra_body:
            body = _merge(body, self.spec.extra_body)
        return orjson.dumps(body)

    def tag_frame(self, frame: tuple[str | None, bytes]) -> tuple[str | None, bytes]:
        """One of its own stream frames, kept for a client that speaks its API, with the
        artifacts in it tagged as its own (only a frame that may hold one is parsed)."""
        event, data = frame
        if not artifacts.may_hold(data):
            return frame
        try:
            parsed = orjson.loads(data)
        except orjson.JSONDecodeError:
            return frame
        marked = artifacts.tagged(parsed, self.origin)
        return frame if marked is parsed else (event, orjson.dumps(marked))

    def dropped(self, req: ChatRequest, translated: tuple[str, ...]) -> tuple[str, ...]:
        """What this provider is not sent of a request from a client of another API, whose
        translation to chat leaves out `translated` (for `X-Agent-Reach-Dropped`): those,
        unless the request goes natively or `cache_control` goes with its marks; what its
        native body leaves out; a `tool_choice` its model refuses (`drop_tool_choice`)."""
        speaks = self.speaks(req)
        if speaks:
            names = list(self.dialect.left_out(req.native or {}))
        else:
            marked = req.marked is not None and self.spec.cache_control
            names = [n for n in translated if not (marked and n == "cache_control")]
        sent = req.native if speaks else req.body
        if "tool_choice" in (sent or {}) and self.no_tool_choice.get(self.model_for(req.model)):
            names.append("tool_choice")
        return tuple(names)

    def counts(self, req: ChatRequest) -> str | None:
        """Where this provider counts the tokens of `req`, a request in its own API (the
        Messages `count_tokens` of a `format: anthropic` provider), if it can and is keyed."""
        url = self.dialect.count_url(self.spec.endpoint) if self.speaks(req) else None
        return None if url is None or self.missing_key or not self.serves(req.model) else url

    def count_body(self, req: ChatRequest) -> bytes:
        """The body that asks it to count `req`."""
        return orjson.dumps(self.dialect.count_body(req.native or {}, self.model_for(req.model)))

    def context(self, model: str, created: int) -> Context:
        return Context(model, created, self.shape)

    @property
    def seat(self) -> str:
        """Its name, with its key's variable for a seat of a pool (`deepseek/KEY_2`), as its
        attempts say it (`Attempt.who`)."""
        return self.name if self.pool_key is None else f"{self.name}/{self.pool_key}"

    def attempt(
        self, outcome: Outcome, ms: float, last_resort: bool, *, sent: bool = False
    ) -> Attempt:
        """An attempt of this provider's that ended with `outcome`, its detail redacted."""
        detail = self.redact(outcome.detail)
        return Attempt(
            self.name,
            outcome.reason,
            outcome.status,
            ms,
            detail,
            last_resort,
            sent,
            outcome.retry_after,
            self.pool_key,
        )

    def redact(self, text: str) -> str:
        """`text` with this provider's secrets (its key, what `${VAR}`s put in its endpoint's
        query, its proxy's credentials) replaced by `***`, in every spelling
        (`redaction.written`: URL-encoded, as an `auth_query` URL carries a key, base64, as
        a `Proxy-Authorization` header carries a proxy's)."""
        return self.redactor.text(text)

    def excerpt(self, raw: bytes | None, limit: int = 2000) -> str | None:
        """A redacted, bounded piece of a raw body, for `--debug`."""
        return None if raw is None else self.redact(excerpt_of(raw, limit))


_CHAT_CAPS = ("max_tokens", "max_completion_tokens")


def _clamped(body: dict[str, Any], fields: tuple[str, ...], cap: int) -> dict[str, Any]:
    """`body` with each of its output-cap `fields` above `cap` set to `cap` (a copy if any is)."""
    over = [f for f in fields if isinstance(body.get(f), int) and body[f] > cap]
    return {**body, **dict.fromkeys(over, cap)} if over else body


def _origin(url: str) -> tuple[str, str | None, int | None]:
    parts = urlsplit(url)
    return parts.scheme, parts.hostname, parts.port


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in extra.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def excerpt_of(raw: bytes, limit: int = 300) -> str:
    text = raw.decode("utf-8", "replace").strip()
    return text if len(text) <= limit else text[:limit] + "…"


Pool = tuple[PreparedProvider, ...]  # a provider's keys, each prepared; one for most


def prepare_all(config: Config, environ: os._Environ[str] | dict[str, str]) -> dict[str, Pool]:
    """Every provider of `config`, prepared (`PreparedProvider.prepare`), by name: once, or
    once for each key of its pool (`keys`), each masking all of the pool's keys."""
    return {p.name: _pool(config, p, environ) for p in config.providers}


def _pool(config: Config, spec: Provider, environ: os._Environ[str] | dict[str, str]) -> Pool:
    """A provider's keys, prepared; they share the first's `origin`: the reasoning one of
    them wrote is the provider's, whichever key reads it back."""
    keys: list[Key] | list[None] = spec.keys or [None]
    values = tuple(v for k in spec.keys if (v := environ.get(k.env)))
    pool = tuple(
        PreparedProvider.prepare(
            spec,
            environ,
            config.hook(spec.name, "preprocess_hook"),
            config.hook(spec.name, "post_process_hook"),
            config.circuit.rate_limit_window_s,
            config.tls(spec.name),
            (*config.endpoint_secrets(spec.name), *values),
            member,
        )
        for member in keys
    )
    return tuple(replace(m, origin=pool[0].origin) for m in pool)
