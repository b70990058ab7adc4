"""The library face (protocol §11.1): `Router`, a thin front over the engine."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any

from .chat.embedding import EmbeddingAsk
from .chat.request import ChatRequest
from .config import Config, Provider, config_from_data, load_config
from .core.events import Observer
from .core.trace import Attempt, Result
from .engine import spaces
from .engine.health import CheckResult
from .engine.loop import Engine
from .engine.stream import ChatStream
from .state import LoggedAttempt, StateStore

if TYPE_CHECKING:
    from .observe.alerts import Alerts


class Router:
    """Routes OpenAI chat requests through a config's providers with failover.

        router = Router.from_config("config.yaml")
        result = await router.achat({"model": "m", "messages": [...]})
        result.response, result.provider, result.trace

    Raises `AllProvidersFailed` (with `.attempts`) when no provider answers, `RequestError`
    for a malformed request, `ConfigError` for a bad config.
    """

    def __init__(
        self,
        config: Config | dict[str, Any],
        *,
        store: StateStore | None = None,
        clock: Callable[[], float] | None = None,
        monotonic: Callable[[], float] | None = None,
        environ: dict[str, str] | None = None,
    ) -> None:
        self.config = config if isinstance(config, Config) else config_from_data(config)
        kwargs: dict[str, Any] = {"store": store, "environ": environ}
        if clock is not None:
            kwargs["clock"] = clock
        if monotonic is not None:
            kwargs["monotonic"] = monotonic
        self.engine = Engine(self.config, **kwargs)
        self.alerts: Alerts | None = None
        if self.config.alerts:
            from .observe.alerts import Alerts

            self.alerts = Alerts(
                self.config, self.engine.store, self.engine.clock, environ or os.environ
            )
            self.subscribe(self.alerts)
        from .observe import tracing

        if tracing.wanted(self.config, environ or os.environ):
            spans = tracing.observer(self.config)
            if spans is not None:
                self.subscribe(spans)

    @classmethod
    def from_config(cls, path: str | os.PathLike[str] | None = None, **kwargs: Any) -> Router:
        """A router for the config file at `path`, or the default lookup (protocol §2.1)."""
        return cls(load_config(path), **kwargs)

    # -- what the config says ------------------------------------------------------------------

    @property
    def routes(self) -> Mapping[str, tuple[str, ...]]:
        """The config's named routes (model aliases among them), resolved."""
        return self.engine.table.routes

    @property
    def default_order(self) -> tuple[str, ...]:
        """The providers a request that names no route walks through (protocol §3)."""
        return self.engine.table.default

    @property
    def providers(self) -> tuple[str, ...]:
        """The config's provider names, in file order."""
        return tuple(self.engine.prepared)

    @property
    def seats(self) -> tuple[str, ...]:
        """Each provider's name in config order, or for a pool of keys each of its seats'
        (`deepseek/KEY_2`), as the attempt log names them."""
        return tuple(self.engine.seats)

    def provider(self, name: str) -> Provider:
        """Provider `name`'s config entry (KeyError if there is none)."""
        return self.engine.prepared[name].spec

    def model_names(self) -> list[str]:
        """Every name a request may ask for: providers' models, `model_map` keys and the
        models they map to, and the route names, each a model alias (protocol §3); no pattern
        (the catch-all `"*"` among them)."""
        names: dict[str, None] = {}
        for p in self.config.providers:
            names.update(dict.fromkeys(p.models or ()))
            names.update(dict.fromkeys(p.model_map))
            names.update(dict.fromkeys(m for m in p.model_map.values() if m))
        names.update(dict.fromkeys(self.config.routes))
        return [n for n in names if "*" not in n]

    def context_window(self, model: str) -> int | None:
        """The smallest context window known among the providers a request for `model`
        walks (its route's, else the default order), each for its own name of the model;
        None when none is known."""
        order = self.routes.get(model) or self.default_order
        prepared = (self.engine.prepared[name] for name in order)
        windows = [p.spec.limits(p.model_for(model))[1] for p in prepared if p.serves(model)]
        known = [w for w in windows if w is not None]
        return min(known) if known else None

    def describe(self, name: str) -> dict[str, Any]:
        """Provider `name`'s config as `--debug` shows it: every field, its key as `***` (or
        "(not set)"), its proxy's credentials as `***`, and the key's value nowhere."""
        import orjson

        from .core import proxies

        prepared = self.engine.prepared[name]
        data = prepared.spec.model_dump(mode="json", exclude_defaults=False)
        if prepared.spec.api_key_env:
            data["api_key"] = "***" if prepared.key else "(not set)"
        pool = self.engine.pools[name]
        if len(pool) > 1:
            data["api_keys"] = {m.pool_key: "***" if m.key else "(not set)" for m in pool}
        if prepared.spec.proxy:
            data["proxy"] = proxies.redacted(prepared.spec.proxy)
        redacted: dict[str, Any] = orjson.loads(prepared.redact(orjson.dumps(data).decode()))
        return redacted

    def debugged(self, attempt: Attempt) -> bool:
        """Whether a failed attempt is one its provider's `schema_compatibility.debug_mode`
        wants shown (its raw answer and `describe`), for one of its `debug_reasons`."""
        prepared = self.engine.prepared.get(attempt.provider)
        if prepared is None or attempt.ok or not attempt.sent:
            return False
        sc = prepared.spec.schema_compatibility
        return sc.debug_mode and ("*" in sc.debug_reasons or attempt.reason in sc.debug_reasons)

    def health_url(self, name: str) -> str | None:
        """Provider `name`'s health URL (resolved against its endpoint), or None."""
        return self.engine.prepared[name].health_url

    def dropped(
        self, provider: str, req: ChatRequest, translated: tuple[str, ...]
    ) -> tuple[str, ...]:
        """What provider `provider` was not sent of `req`, whose translation from the client's
        API left out `translated` (protocol §10.1, `X-Agent-Reach-Dropped`)."""
        return self.engine.prepared[provider].dropped(req, translated)

    @property
    def store(self) -> StateStore:
        """The state store (circuits, budgets, health, stored responses, the attempt log)."""
        return self.engine.store

    def now(self) -> float:
        """The router's wall clock (what circuits and budgets are kept in)."""
        return self.engine.clock()

    # -- what is known now -------------------------------------------------------------------

    async def status(self, everything: bool = False) -> list[dict[str, Any]]:
        """Every provider as the status views show it (see `status.providers`)."""
        from .observe import status

        return await status.providers(self.engine, everything)

    async def quota_use(self, name: str) -> list[dict[str, Any]]:
        """Provider `name`'s budgets and their use in the current windows."""
        from .observe import status

        engine = self.engine
        return await status.quota_use(engine, engine.seats.get(name) or engine.prepared[name])

    async def learned_caps(self) -> list[dict[str, Any]]:
        """Every learned output cap in the store (see `status.learned_caps`)."""
        from .observe import status

        await self.engine.store.refresh()
        return await status.learned_caps(self.engine)

    async def forget_caps(self, provider: str | None = None) -> int:
        """Forget the learned output caps (of every identity named `provider`, or all), in
        every process sharing the store; how many were kept."""
        from .core.identity import SEP

        prefix = "" if provider is None else f"{provider}{SEP}"
        return await self.engine.store.forget_caps(self.now(), prefix)

    async def attempt_log(self, since: float, everything: bool = False) -> list[LoggedAttempt]:
        """The attempt log since `since` (see `status.logged`)."""
        from .observe import status

        return await status.logged(self.engine, since, everything)

    @property
    def skipped_records(self) -> int:
        """How many records (and messages) of a shared state store it could not read and
        skipped (`agent_reach_state_skipped_records_total`)."""
        return self.engine.store.skipped

    @property
    def state_down(self) -> bool:
        """The state store's backend is down (`StateStore.down`): `/readyz` says so."""
        return self.engine.store.down

    async def refresh_health(self) -> None:
        """Run every provider's health check now and remember the results (health mode
        `background`)."""
        await self.engine.refresh_health()

    def adopt(self, old: Router) -> None:
        """Take over what outlives `old`, the router of the config this one replaces."""
        self.engine.adopt(old.engine)

    async def check(self, name: str, model: str | None = None) -> CheckResult:
        """Run provider `name`'s health check now (a TCP connect when it has none), whatever
        `health.mode` says; with `model`, its health check must list that model."""
        return await self.engine.check(name, model)

    def subscribe(self, observer: Observer) -> None:
        """Call `observer` with every event (attempts, requests, circuit changes)."""
        self.engine.observers.append(observer)

    async def achat(self, request: dict[str, Any]) -> Result:
        """One chat request with failover; the normalized response, provider and trace."""
        return await self.engine.chat(ChatRequest.parse(request, stream=False))

    def chat(self, request: dict[str, Any]) -> Result:
        """`achat` for scripts without an event loop."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self._chat_once(request))
        raise RuntimeError("Router.chat() was called inside an event loop; use await achat()")

    async def _chat_once(self, request: dict[str, Any]) -> Result:
        try:
            return await self.achat(request)
        finally:  # this event loop ends here: nothing may be left running in it
            await self._settle()
            await self.engine.store.flush()

    async def _settle(self) -> None:
        if self.alerts is not None:
            await self.alerts.drain()
        await self.engine.aclose()

    async def answer(self, req: ChatRequest) -> Result:
        """`achat` for a request already parsed (the proxy's API faces build their own)."""
        return await self.engine.chat(req)

    async def stream(self, req: ChatRequest) -> ChatStream:
        """`open_stream` for a request already parsed."""
        return await self.engine.stream(req)

    async def count_tokens(self, req: ChatRequest) -> tuple[str, int] | None:
        """(provider, input tokens) of `req` as the first provider of its route that speaks its
        API counts them (a Messages `count_tokens`), or None: the caller estimates."""
        return await self.engine.count_tokens(req)

    async def aembed(self, request: dict[str, Any]) -> Result:
        """An OpenAI embeddings request with failover inside its embedding space (protocol
        §10.3): the answer in OpenAI's shape (float vectors, `model` the space that answered),
        provider and trace."""
        result = await self.embed(self.embedding_request(request))
        for item in result.response["data"]:
            item["embedding"] = item["embedding"].tolist()
        return result

    def embedding_request(self, request: dict[str, Any]) -> ChatRequest:
        """The engine's request of an OpenAI embeddings body (`RequestError`: a 4xx)."""
        return spaces.request_of(self.config, EmbeddingAsk.parse(request))

    async def embed(self, req: ChatRequest) -> Result:
        """`aembed` for a request already made (`embedding_request`), each vector compact
        (`array('d')`, as the proxy writes it in pieces)."""
        return await spaces.embed(self.engine, self.config, req)

    def candidates(self, req: ChatRequest) -> tuple[str, ...]:
        """The providers `req` would walk through that can do it, in order."""
        return self.engine.candidates(req)

    async def step(self, req: ChatRequest, provider: str) -> tuple[Attempt, dict[str, Any] | None]:
        """Step mode (protocol §9): one provider, no failover; its attempt and, when it answered,
        the response (vectors, for an `embedding_request`)."""
        return await self.engine.step(req, provider)

    async def open_stream(self, request: dict[str, Any]) -> ChatStream:
        """A stream that has produced its first content chunk; `.provider` and `.trace` say
        who answers. Iterate it for OpenAI `chat.completion.chunk` dicts."""
        return await self.engine.stream(ChatRequest.parse(request, stream=True))

    async def astream(self, request: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """OpenAI `chat.completion.chunk` dicts, failing over until the first one."""
        stream = await self.open_stream(request)
        async for chunk in stream:
            yield chunk

    async def aclose(self) -> None:
        """Deliver pending alerts, then close connections and the state store."""
        await self._settle()
        await self.engine.store.aclose()

    async def __aenter__(self) -> Router:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
