"""Probing an endpoint: what it speaks, how well, and the config entry for it (the algorithm
of `agent-reach probe URL`; the command and its printing are `cli/probe.py`).

Everything goes through the real engine: a one-provider `Router` in memory, health checks off,
for the chat and stream requests, and `health.run_check` for the health check. The steps:

1. the health check of the format the URL suggests (its model list gives the model to ask
   for when `--model` is not given);
2. one tiny chat request ("Say OK") per candidate format: the ones the URL suggests
   (`catalog.formats_for_url`), then the ones whose dialect reads an answer already received
   (`catalog.formats_for_answer`), until one reads the answer (with `--format`, only that one);
3. when none does, the `schema_compatibility` paths of the answer's first string
   (`catalog.content_paths`), confirmed by one more request with them (level manual);
4. one stream request, to see whether chunks arrive (or a whole JSON body is replayed).

`--write NAME` appends the provider entry to the config file, keeping its comments.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..catalog import Level
    from ..core.events import Event

PROMPT = "Say OK"
MAX_TOKENS = 16
TIMEOUT = {"connect": 5000, "read": 30000}  # a real model may take a while to answer
_TRANSPORT = ("connect_failed", "timeout")


@dataclass(frozen=True)
class Try:
    """One chat request in one format."""

    format: str
    reason: str
    status: int | None
    ms: float
    detail: str = ""
    answer: str | None = None
    paths: tuple[str, str] | None = None  # custom schema_compatibility paths, when tried


@dataclass(frozen=True)
class HealthReport:
    """The health check of one format's default health URL (`url` None: there is none)."""

    url: str | None
    ok: bool | None = None
    ms: float = 0.0
    detail: str = ""
    models: list[str] | None = None


@dataclass
class Report:
    """Everything `probe` found out; `provider` is the entry `--write` appends."""

    url: str
    usable: bool = False
    format: str | None = None
    detected_by: str = ""
    level: Level | None = None
    model: str = ""
    model_from: str = ""
    health: HealthReport | None = None
    tries: list[Try] = field(default_factory=list)
    stream: dict[str, Any] = field(default_factory=dict)
    schema_compatibility: dict[str, str] = field(default_factory=dict)
    provider: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    problem: str = ""


# -- probing -----------------------------------------------------------------------------------


async def run_probe(
    url: str, fmt: str | None, model: str, key_env: str, environ: dict[str, str], name: str
) -> Report:
    """Probe `url` (see the module docstring); never raises for what the endpoint does."""
    from .. import catalog

    report = Report(url)
    candidates = [fmt] if fmt else list(catalog.formats_for_url(url))
    report.health = await _health(_entry(name, url, candidates[0], key_env), environ)
    report.model, report.model_from = model, "--model" if model else ""
    listed = report.health.models or []
    embedding = {m: known for m in listed if (known := catalog.embedding_space(m))}
    chats = [m for m in listed if m not in embedding]
    if not model and chats:
        report.model, report.model_from = chats[0], "the health check's list"
    for listed_as, (space, width) in embedding.items():
        report.notes.append(
            f"{listed_as} is an embedding model (space {space}, {width} dimensions): serve it "
            f"with embeddings: {{models: {{{space}: {listed_as}}}}} and {space} under "
            "embeddings.spaces"
        )
    answers: dict[str, Any] = {}
    chosen: Try | None = None
    for candidate in candidates:  # grows while it is walked: formats that read an answer
        t, answer = await _chat(_entry(name, url, candidate, key_env), environ, report.model)
        report.tries.append(t)
        if t.reason == "ok":
            chosen = t
            break
        if t.reason in _TRANSPORT:
            break
        if answer is not None:
            answers[candidate] = answer
            if not fmt:
                new = catalog.formats_for_answer(answer, url)
                candidates += [f for f in new if f not in candidates]
    base = fmt or "openai"
    if chosen is None and base in answers:
        found = catalog.content_paths(answers[base])
        if found is None:
            report.problem = "the answer has no text to point at: it needs a post_process_hook"
        else:
            entry = _entry(name, url, base, key_env, paths=found)
            t, _ = await _chat(entry, environ, report.model)
            t = replace(t, paths=found)
            report.tries.append(t)
            chosen = t if t.reason == "ok" else None
    if chosen is None:
        report.problem = report.problem or _problem(report.tries, key_env)
        return report
    await _conclude(report, chosen, fmt, name, key_env, environ)
    return report


async def _conclude(
    report: Report,
    chosen: Try,
    fmt: str | None,
    name: str,
    key_env: str,
    environ: dict[str, str],
) -> None:
    """Fill in what follows from the format that answered: level, paths, health check of
    that format, streaming and the provider entry."""
    from .. import catalog, dialects
    from ..core.routing import model_listed

    report.usable = True
    report.format = chosen.format
    report.level = catalog.level_of(chosen.format, chosen.paths is not None)
    if fmt:
        report.detected_by = "given with --format"
    elif chosen.paths is not None:
        report.detected_by = "no format reads the answer: OpenAI requests, custom paths"
    elif chosen.format in catalog.formats_for_url(report.url):
        report.detected_by = "suggested by the URL, confirmed by the answer"
    else:
        report.detected_by = "recognised from the answer"
    dialect = dialects.get(chosen.format).for_endpoint(report.url)
    choices_path, content_path = chosen.paths or (dialect.choices_path, dialect.content_path)
    report.schema_compatibility = {"choices_path": choices_path, "content_path": content_path}
    entry = _entry(name, report.url, chosen.format, key_env, paths=chosen.paths)
    health = report.health = await _health(entry, environ, report.health)
    report.stream = await _stream(entry, environ, report.model)
    if health.url is not None and not health.ok:
        entry["health_check"] = ""  # a failing check would keep the provider skipped
        report.notes.append("the health check failed, so the entry has none")
    elif (
        report.model
        and health.models is not None
        and not model_listed(report.model, frozenset(health.models))
    ):
        entry["health_check"] = ""  # its list would skip the provider for this model
        report.notes.append(
            f"{report.model} is not in the health check's list, so the entry has no health check"
        )
    if report.model:  # and any name a request asks for (an agent's own) is sent as that one
        entry["models"] = [report.model]
        entry["model_map"] = {"*": report.model}
    else:  # it answered a request without a model: requests without one may go there
        entry["model_map"] = {"*": ""}
    report.provider = entry


def _entry(
    name: str, url: str, fmt: str, key_env: str, paths: tuple[str, str] | None = None
) -> dict[str, Any]:
    """The provider entry for `url` spoken in `fmt` (the key in ERNIE's query parameter)."""
    entry: dict[str, Any] = {"name": name, "endpoint": url, "format": fmt}
    if key_env:
        entry["api_key_env"] = key_env
        if fmt == "ernie":
            entry.update(auth_header="", auth_query="access_token")
    if paths is not None:
        entry["schema_compatibility"] = {"choices_path": paths[0], "content_path": paths[1]}
    return entry


def _config(entry: dict[str, Any]) -> dict[str, Any]:
    """A one-provider config in memory, without health checks, with generous timeouts."""
    from ..version import PROTOCOL_VERSION

    return {
        "version": PROTOCOL_VERSION,
        "state": "memory://",
        "health": {"mode": "off"},
        # `"*": ""`: an endpoint that lists no model is asked without one (it may need none).
        "providers": [{**entry, "health_check": "", "timeout": TIMEOUT, "model_map": {"*": ""}}],
    }


def _request(model: str) -> dict[str, Any]:
    request: dict[str, Any] = {
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": MAX_TOKENS,
    }
    if model:
        request["model"] = model
    return request


async def _health(
    entry: dict[str, Any], environ: dict[str, str], known: HealthReport | None = None
) -> HealthReport:
    """The health check of `entry`'s format (its default health URL), through
    `Router.check`; `known` when it is the check of the same URL."""
    from ..router import Router

    config = {"state": "memory://", "providers": [{**entry, "timeout": TIMEOUT}]}
    router = Router(config, environ=environ)
    url = router.health_url(entry["name"])
    if url is None:
        return HealthReport(None)
    if known is not None and known.url == url:
        return known
    try:
        checked = await router.check(entry["name"])
    finally:
        await router.aclose()
    ok = checked.health == "ok"
    detail = "" if ok else checked.health + (f" ({checked.status})" if checked.status else "")
    if not ok and checked.detail:
        detail += f" — {checked.detail}"
    ms = checked.latency_ms if checked.latency_ms is not None else 0.0
    return HealthReport(url, ok, ms, detail, checked.models)


async def _chat(
    entry: dict[str, Any], environ: dict[str, str], model: str
) -> tuple[Try, Any | None]:
    """One chat request through the engine: what happened, and the parsed body of an answer
    it could not read (None when there is none, or it is not JSON)."""
    from ..core.errors import AllProvidersFailed
    from ..router import Router

    router = Router(_config(entry), environ=environ)
    raws: list[str] = []

    def keep_raw(event: Event) -> None:
        raw = getattr(event, "raw", None)
        if raw:
            raws.append(raw)

    router.subscribe(keep_raw)
    try:
        result = await router.achat(_request(model))
    except AllProvidersFailed as exc:
        a = exc.attempts[-1]
        t = Try(entry["format"], str(a.reason), a.status, round(a.ms, 1), a.detail)
        return t, _json(raws[-1]) if raws and a.reason == "schema_mismatch" else None
    finally:
        await router.aclose()
    a = result.trace[-1]
    content = result.response["choices"][0]["message"].get("content")
    return Try(entry["format"], "ok", a.status, round(a.ms, 1), "", content), None


async def _stream(entry: dict[str, Any], environ: dict[str, str], model: str) -> dict[str, Any]:
    """One stream request: whether chunks arrived as a stream, and how many."""
    from ..core.errors import AllProvidersFailed
    from ..router import Router

    router = Router(_config(entry), environ=environ)
    try:
        stream = await router.open_stream(_request(model))
        chunks = [c async for c in stream]
    except AllProvidersFailed as exc:
        a = exc.attempts[-1]
        status = f" ({a.status})" if a.status else ""
        return {"works": False, "chunks": 0, "detail": f"{a.reason}{status} — {a.detail}"}
    finally:
        await router.aclose()
    if stream.live.resp is None:
        what = "the stream request got one whole JSON answer (agent-reach replays it as chunks)"
        return {"works": False, "chunks": len(chunks), "detail": what}
    return {"works": True, "chunks": len(chunks), "detail": ""}


def _problem(tries: list[Try], key_env: str) -> str:
    """Why no request got a usable answer, in a few words."""
    if not tries:
        return "no request was sent"
    last = tries[-1]
    if last.reason in _TRANSPORT:
        return f"the endpoint did not answer ({last.reason}: {last.detail})"
    if any(t.reason == "auth_failed" for t in tries):
        hint = "" if key_env else "; give the key's variable with --api-key-env"
        return f"the endpoint refused the request as unauthorized{hint}"
    if all(t.reason != "schema_mismatch" for t in tries):
        reasons = ", ".join(sorted({t.reason for t in tries}))
        return f"no request in any format was answered ({reasons})"
    return "no format reads its answer (see the details above)"


def _json(text: str) -> Any | None:
    import orjson

    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:  # not JSON, or an excerpt cut at 2000 characters
        return None


def model_in_url(url: str) -> bool:
    return "{model}" in url or "generatecontent" in url.lower()
