"""OpenTelemetry tracing (protocol §12), with the optional extra
`pip install 'agent-reach-router[otel]'`.

On when configured: `tracing: {endpoint}` in the config, or the standard
`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` / `OTEL_EXPORTER_OTLP_ENDPOINT` variables (OTLP over
HTTP); `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none` keeps it off. Off, nothing of
OpenTelemetry is imported and the engine has no tracing observer, so it costs nothing.

On, `Spans` listens to the engine's events (the hot path knows nothing of it): each request
becomes one span (`chat {model}`) with one child span per attempt (`attempt {provider}`),
skips included. An attempt's span ends when its event arrives and starts its `ms` earlier; the
request's span starts with its first attempt. Attributes: the OpenTelemetry GenAI ones
(`gen_ai.operation.name`, `gen_ai.system` = the provider's format, `gen_ai.request.model`,
`gen_ai.response.model`, `gen_ai.usage.input_tokens`, `gen_ai.usage.output_tokens`) plus
`agent_reach.provider`, `agent_reach.reason`, `agent_reach.last_resort`, `agent_reach.route`
and `agent_reach.api`. One tracer provider per process; spans are batched and exported in
the background, and at exit.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from ..config import Config
from ..core.events import AttemptEvent, Event, RequestEvent
from ..core.trace import Attempt, Reason

log = logging.getLogger("agent_reach")
_OPEN_MAX = 10_000  # requests whose attempts are held until their request ends
_provider: Any = None  # the process's tracer provider, made once


def wanted(config: Config, environ: Mapping[str, str]) -> bool:
    """Whether tracing is configured (without importing anything of OpenTelemetry)."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return False
    return bool(
        config.tracing.endpoint
        or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    )


def observer(config: Config, provider: Any = None) -> Spans | None:
    """The engine observer that makes spans, on the process's tracer provider (or on
    `provider`); None, with a warning, when the `otel` extra is not installed."""
    try:
        from opentelemetry import trace
    except ImportError:
        log.warning(
            "agent-reach: tracing is configured but OpenTelemetry is not installed: "
            "pip install 'agent-reach-router[otel]'"
        )
        return None
    provider = provider or _process_provider(config)
    tracer = provider.get_tracer("agent_reach")
    formats = {p.name: str(p.format) for p in config.providers}
    return Spans(tracer, trace, formats)


def _process_provider(config: Config) -> Any:
    global _provider
    if _provider is None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        t = config.tracing
        attributes = {"service.name": t.service_name} if t.service_name else {}
        resource = Resource.create(attributes)
        named = str(resource.attributes.get("service.name", ""))
        if "service.name" not in attributes and named.startswith("unknown_service"):
            resource = resource.merge(Resource({"service.name": "agent-reach"}))
        kwargs: dict[str, Any] = {"headers": t.headers or None}
        if t.endpoint:
            kwargs["endpoint"] = t.endpoint.rstrip("/") + "/v1/traces"
        _provider = TracerProvider(resource=resource)
        _provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(**kwargs)))
    return _provider


class Spans:
    """Engine events → spans: attempts are held until their request ends, then the request's
    span and its attempts' child spans are made with their real start and end times."""

    def __init__(self, tracer: Any, trace_api: Any, formats: dict[str, str]) -> None:
        self.tracer = tracer
        self.trace = trace_api
        self.formats = formats
        self._open: OrderedDict[str, list[tuple[int, int, Attempt]]] = OrderedDict()

    def __call__(self, event: Event) -> None:
        if isinstance(event, AttemptEvent):
            end = time.time_ns()
            held = self._open.get(event.request)
            if held is None:
                held = self._open[event.request] = []
                if len(self._open) > _OPEN_MAX:
                    self._open.popitem(last=False)
            held.append((end - int(event.attempt.ms * 1e6), end, event.attempt))
        elif isinstance(event, RequestEvent):
            self._request(event, self._open.pop(event.request, []))

    def _request(self, event: RequestEvent, attempts: list[tuple[int, int, Attempt]]) -> None:
        end = time.time_ns()
        start = min((a[0] for a in attempts), default=end)
        model = event.model or ""
        attrs: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "agent_reach.route": event.route,
            "agent_reach.api": event.api,
            "agent_reach.attempts": len(event.trace),
        }
        if model:
            attrs["gen_ai.request.model"] = model
        if event.provider is not None:
            attrs["agent_reach.provider"] = event.provider
            attrs["gen_ai.system"] = self.formats.get(event.provider, "")
            attrs.update(_answer_attributes(event.answer))
        if event.trace:
            attrs["agent_reach.reason"] = str(event.trace[-1].reason)
        span = self.tracer.start_span(f"chat {model}".strip(), start_time=start, attributes=attrs)
        if event.provider is None:
            span.set_status(self.trace.Status(self.trace.StatusCode.ERROR, "all providers failed"))
        parent = self.trace.set_span_in_context(span)
        for a_start, a_end, attempt in attempts:
            child = self.tracer.start_span(
                f"attempt {attempt.provider}",
                context=parent,
                kind=self.trace.SpanKind.CLIENT,
                start_time=a_start,
                attributes=self._attempt_attributes(attempt, model),
            )
            if attempt.reason is not Reason.OK:
                child.set_status(
                    self.trace.Status(self.trace.StatusCode.ERROR, str(attempt.reason))
                )
            child.end(end_time=a_end)
        span.end(end_time=end)

    def _attempt_attributes(self, attempt: Attempt, model: str) -> dict[str, Any]:
        attrs: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.system": self.formats.get(attempt.provider, ""),
            "agent_reach.provider": attempt.provider,
            "agent_reach.reason": str(attempt.reason),
            "agent_reach.last_resort": attempt.last_resort,
        }
        if model:
            attrs["gen_ai.request.model"] = model
        if attempt.status is not None:
            attrs["http.response.status_code"] = attempt.status
        if attempt.detail:
            attrs["agent_reach.detail"] = attempt.detail
        return attrs


def _answer_attributes(answer: Any) -> dict[str, Any]:
    """The response model and token counts of a whole answer (chat, Responses or Messages
    shaped); a stream has none yet."""
    if not isinstance(answer, dict):
        return {}
    attrs: dict[str, Any] = {}
    if isinstance(answer.get("model"), str):
        attrs["gen_ai.response.model"] = answer["model"]
    usage = answer.get("usage")
    if isinstance(usage, dict):
        for key, name in (
            ("prompt_tokens", "gen_ai.usage.input_tokens"),
            ("input_tokens", "gen_ai.usage.input_tokens"),
            ("completion_tokens", "gen_ai.usage.output_tokens"),
            ("output_tokens", "gen_ai.usage.output_tokens"),
        ):
            if isinstance(usage.get(key), int):
                attrs[name] = usage[key]
    return attrs
