"""OpenTelemetry tracing (protocol §12): a proxy exports the spans of a request that failed over
once to an in-process OTLP/HTTP receiver; unconfigured, nothing of OpenTelemetry is loaded."""

from __future__ import annotations

import gzip
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from ..fakes.serving import Threaded
from ..fakes.upstream import Upstream
from .test_proxy import MSG, start, stop


class Receiver:
    """An OTLP/HTTP trace receiver on 127.0.0.1: the spans it was sent, decoded."""

    def __init__(self) -> None:
        self.spans: list[Any] = []
        self.resources: list[dict[str, Any]] = []
        self.port = 0

    async def traces(self, request: web.Request) -> web.Response:
        raw = await request.read()
        if request.headers.get("Content-Encoding") == "gzip":
            raw = gzip.decompress(raw)
        export = ExportTraceServiceRequest.FromString(raw)
        for rs in export.resource_spans:
            self.resources.append({a.key: a.value.string_value for a in rs.resource.attributes})
            for ss in rs.scope_spans:
                self.spans.extend(ss.spans)
        return web.Response(body=b"", content_type="application/x-protobuf")

    def start(self) -> Receiver:
        app = web.Application()
        app.router.add_post("/v1/traces", self.traces)
        self.port = Threaded().serve(app)
        return self


def attrs(span: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for a in span.attributes:
        v = a.value
        out[a.key] = getattr(v, v.WhichOneof("value"))
    return out


def test_a_failed_over_request_is_one_span_with_a_child_per_attempt(
    up: Upstream, tmp_path: Path
) -> None:
    receiver = Receiver().start()
    config = {
        "version": "0.3.2",
        "health": {"mode": "off"},
        "state": "memory://",
        "tracing": {"service_name": "fleet-a"},
        "defaults": {"retries": 0},  # one try each: a span each
        "providers": [
            {"name": "broken", "endpoint": up.url("server")},
            {"name": "good", "endpoint": up.url("ok"), "model_map": {"m": "gpt-test"}},
        ],
    }
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver.port}",
        "OTEL_BSP_SCHEDULE_DELAY": "50",
    }
    proxy = start(config, tmp_path, up, env=env)
    try:
        client = proxy.client()
        answer = client.chat.completions.create(model="m", messages=MSG)
        assert answer.choices[0].message.content == "hello from ok"
        deadline = time.time() + 10
        while len(receiver.spans) < 3 and time.time() < deadline:
            time.sleep(0.05)
    finally:
        stop(proxy)
    by_name = {s.name: s for s in receiver.spans}
    assert set(by_name) == {"chat m", "attempt broken", "attempt good"}
    request, broken, good = by_name["chat m"], by_name["attempt broken"], by_name["attempt good"]
    assert broken.parent_span_id == request.span_id
    assert good.parent_span_id == request.span_id
    assert broken.trace_id == good.trace_id == request.trace_id
    assert request.start_time_unix_nano <= broken.start_time_unix_nano
    assert broken.end_time_unix_nano <= good.start_time_unix_nano + 1_000_000
    assert good.end_time_unix_nano <= request.end_time_unix_nano
    assert attrs(request) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "m",
        "gen_ai.response.model": "gpt-test",
        "gen_ai.system": "openai",
        "gen_ai.usage.input_tokens": 5,
        "gen_ai.usage.output_tokens": 3,
        "agent_reach.provider": "good",
        "agent_reach.reason": "ok",
        "agent_reach.route": "default",
        "agent_reach.api": "chat",
        "agent_reach.attempts": 2,
    }
    failed = attrs(broken)
    assert failed["agent_reach.provider"] == "broken"
    assert failed["agent_reach.reason"] == "server_error"
    assert failed["agent_reach.last_resort"] is False
    assert failed["http.response.status_code"] == 500
    assert failed["gen_ai.system"] == "openai"
    assert broken.status.code == 2  # ERROR
    assert attrs(good)["agent_reach.reason"] == "ok"
    assert good.status.code != 2
    assert {r.get("service.name") for r in receiver.resources} == {"fleet-a"}


def test_unconfigured_tracing_imports_nothing(up: Upstream, tmp_path: Path) -> None:
    code = f"""
import sys
from agent_reach import Router
router = Router({{"health": {{"mode": "off"}}, "state": "memory://",
                 "providers": [{{"name": "a", "endpoint": "{up.url("ok")}"}}]}})
assert router.chat({{"model": "m", "messages": [{{"role": "user", "content": "hi"}}]}}).provider == "a"
loaded = sorted(m for m in sys.modules if m.startswith("opentelemetry"))
assert loaded == [], loaded
print("clean")
"""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert result.stdout.strip() == "clean", result.stderr
