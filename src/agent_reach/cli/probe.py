"""`agent-reach probe URL`: what an endpoint speaks, how well, and the config entry for it.

Everything goes through the real engine: a one-provider `Router` in memory, health checks off,
for the chat and stream requests, and `health.probe` for the health check. The steps:

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

import os
import re
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from . import expected_errors, fail

if TYPE_CHECKING:
    from ..catalog import Level
    from ..events import Event

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


@click.command()
@click.argument("url")
@click.option("--format", "fmt", help="The endpoint's format (default: detect it).")
@click.option("--model", "-m", help="The model to ask for (default: the first one listed).")
@click.option("--api-key-env", "key_env", help="The environment variable holding the key.")
@click.option("--write", "name", help="Append the entry to the config file as provider NAME.")
@click.option(
    "--weight",
    type=click.FloatRange(min=0),
    help="The written entry's fallback_weight (default: below every other, so it comes last).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_obj
@expected_errors
def probe(
    obj: dict[str, Any],
    url: str,
    fmt: str | None,
    model: str | None,
    key_env: str | None,
    name: str | None,
    weight: float | None,
    as_json: bool,
) -> None:
    """Send one health check and one small chat request to URL; report its format, its
    compatibility level, streaming and the schema_compatibility paths. Exit 1 when it did not
    answer usably."""
    import asyncio

    from .. import dialects
    from ..catalog import formats_for_url
    from .init_cmd import config_target

    if not re.match(r"^https?://[^/?#]+", url):
        fail(f"expected a full http(s) URL, got {url!r}", 2)
    if fmt is not None and fmt not in dialects.FORMATS:
        fail(f"format {fmt!r} is not available (available: {', '.join(dialects.FORMATS)})", 2)
    if (fmt or formats_for_url(url)[0]) == "gemini" and not model and not _model_in_url(url):
        fail("a Gemini models collection URL needs --model (or a URL that names the model)", 2)
    environ: dict[str, str] = {}
    if key_env:
        if not os.environ.get(key_env):
            fail(f"{key_env} is not set", 2)
        environ[key_env] = os.environ[key_env]
    target = None
    if name is not None:
        if not re.fullmatch(r"[A-Za-z0-9._-]+", name):
            fail(f"provider name {name!r}: expected letters, digits, '.', '_' or '-'", 2)
        target = config_target(obj["config_path"])
        if name in _names_in(target):
            fail(f"{target} already has a provider named {name!r}", 2)
    report = asyncio.run(run_probe(url, fmt, model or "", key_env or "", environ, name or "probe"))
    if target is not None and report.usable:
        weight = weight if weight is not None else _weight_after_last(target)
        if weight is not None:
            report.provider["fallback_weight"] = weight
    if as_json:
        from .render import print_json

        print_json(asdict(report))
    else:
        _print(report)
    if target is not None:
        if not report.usable:
            fail("nothing was written: the endpoint did not answer usably", 1)
        how = append_provider(target, report.provider)
        click.echo(_written(how, repr(name), target), err=as_json)
        if _read(target)[0].get("fallback_order"):
            click.echo(
                f"note: the file's fallback_order does not name {name!r}; add it there to try "
                "it by default",
                err=True,
            )
    if not report.usable:
        raise SystemExit(1)


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
    if not model and report.health.models:
        report.model, report.model_from = report.health.models[0], "the health check's list"
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
    from ..routing import model_listed

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
    if report.model:
        entry["models"] = [report.model]
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
    from .._version import PROTOCOL_VERSION

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
    """The health check of `entry`'s format (its default health URL), through `health.probe`;
    `known` when it is the check of the same URL."""
    import time

    from ..backend import Backend
    from ..config import config_from_data
    from ..health import probe as health_probe
    from ..transport import new_session

    spec = config_from_data({"providers": [{**entry, "timeout": TIMEOUT}]}).providers[0]
    backend = Backend.prepare(spec, environ)
    if backend.health_url is None:
        return HealthReport(None)
    if known is not None and known.url == backend.health_url:
        return known
    async with new_session() as session:
        budget = backend.connect_s + backend.read_s
        health = await health_probe(session, backend, time.time(), budget)
    outcome = health.outcome
    detail = "" if health.ok else f"{outcome.reason}"
    if not health.ok and outcome.status:
        detail += f" ({outcome.status})"
    if not health.ok and outcome.detail:
        detail += f" — {backend.redact(outcome.detail)}"
    models = sorted(health.models) if health.models is not None else None
    return HealthReport(backend.health_url, health.ok, round(health.ms, 1), detail, models)


async def _chat(
    entry: dict[str, Any], environ: dict[str, str], model: str
) -> tuple[Try, Any | None]:
    """One chat request through the engine: what happened, and the parsed body of an answer
    it could not read (None when there is none, or it is not JSON)."""
    from ..errors import AllProvidersFailed
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
    from ..errors import AllProvidersFailed
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


def _model_in_url(url: str) -> bool:
    return "{model}" in url or "generatecontent" in url.lower()


# -- reporting ---------------------------------------------------------------------------------


def _print(r: Report) -> None:
    from .. import catalog

    rows: list[tuple[str, str]] = []
    h = r.health
    if h is None or h.url is None:
        rows.append(("health check", "none (the format has no default health check)"))
    elif h.ok:
        listed = f", lists {_few(h.models)}" if h.models else ""
        rows.append(("health check", f"ok ({h.ms:.0f} ms) — {h.url}{listed}"))
    else:
        rows.append(("health check", f"failed ({h.ms:.0f} ms) — {h.url}: {h.detail}"))
    if r.model:
        rows.append(("model", f"{r.model} (from {r.model_from})"))
    for i, t in enumerate(r.tries):
        status = f"HTTP {t.status}, " if t.status else ""
        what = f"{t.format}{' with custom paths' if t.paths else ''}: {t.reason}"
        tail = f' — "{_short(t.answer)}"' if t.answer is not None else ""
        if t.detail:
            tail = f" — {t.detail}"
        rows.append(("chat" if i == 0 else "", f"{what} ({status}{t.ms:.0f} ms){tail}"))
    if r.usable:
        assert r.level is not None
        rows.append(("format", f"{r.format} ({r.detected_by})"))
        rows.append(("level", f"{r.level} — {catalog.LEVEL_MEANING[r.level]}"))
        s = r.stream
        works = f"yes ({s['chunks']} chunks)" if s["works"] else f"no — {s['detail']}"
        rows.append(("streaming", works))
        sc = r.schema_compatibility
        rows.append(
            ("paths", f"choices_path: {sc['choices_path']!r}, content_path: {sc['content_path']!r}")
        )
    else:
        rows.append(("result", f"not usable: {r.problem}"))
    rows += [("note", note) for note in r.notes]
    for label, text in rows:
        click.echo(f"{label:<14}{text}")
    if r.usable:
        click.echo("\nconfig entry:\n" + catalog.to_yaml([r.provider], indent=2).rstrip("\n"))


def _few(models: list[str]) -> str:
    return ", ".join(models[:3]) + (f" (+{len(models) - 3})" if len(models) > 3 else "")


def _short(text: str | None, limit: int = 60) -> str:
    one_line = " ".join((text or "").split())
    return one_line if len(one_line) <= limit else one_line[:limit] + "…"


# -- writing -----------------------------------------------------------------------------------


def _names_in(target: Path) -> set[str]:
    """The provider names in the config file at `target` (none when it does not exist)."""
    if not target.exists():
        return set()
    _, items = _read(target)
    return {str(p.get("name", p.get("provider"))) for p in items if isinstance(p, dict)}


def _weight_after_last(target: Path) -> float | None:
    """A `fallback_weight` below every provider's in the file, so that a new provider comes
    last in the default order (None when the file has none). At 0 the tie keeps file order,
    which puts an appended provider last as well."""
    if not target.exists():
        return None
    data, items = _read(target)
    defaults = data.get("defaults")
    if not isinstance(defaults, dict):
        defaults = {}
    weights = [
        float(w)
        for p in items
        if isinstance(p, dict)
        for w in [p.get("fallback_weight", defaults.get("fallback_weight", 1.0))]
        if isinstance(w, int | float) and not isinstance(w, bool)
    ]
    return round(max(0.0, min(weights) - 0.1), 4) if weights else None


def _read(target: Path) -> tuple[dict[str, Any], list[Any]]:
    """(the file's data, its provider list), parsed but not expanded or validated."""
    from ..config import parse_text
    from ..errors import ConfigError

    try:
        text = target.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the file: {exc}", file=str(target)) from exc
    data = parse_text(text, json_file=target.suffix.lower() == ".json", file=str(target))
    if not isinstance(data, dict):
        raise ConfigError("expected a mapping at the top level", file=str(target))
    items = data.get(_list_key(data))
    return data, items if isinstance(items, list) else []


def _list_key(data: dict[str, Any]) -> str:
    embedded = "providers" not in data and "agent_reach_fallbacks" in data
    return "agent_reach_fallbacks" if embedded else "providers"


def _written(how: str, name: str, target: Path) -> str:
    if how == "created":
        return f"created {target} with provider {name}"
    if how == "appended":
        return f"appended provider {name} to {target}"
    backup = target.with_name(target.name + ".bak")
    lost = "" if target.suffix.lower() == ".json" else ", so its comments were not kept"
    return f"added provider {name} to {target}, rewritten as a whole{lost} (the old one: {backup})"


def append_provider(target: Path, entry: dict[str, Any]) -> str:
    """Add `entry` to the config file's providers and say how: `created` (a new file),
    `appended` (the text added after the list's last item, comments kept) or `rewrote` (a JSON
    file, or a list that text cannot be appended to; the old file is kept as `.bak`)."""
    from .._version import PROTOCOL_VERSION

    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        import json

        if target.suffix.lower() == ".json":
            data = {"version": PROTOCOL_VERSION, "providers": [entry]}
            target.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
        else:
            from ..catalog import to_yaml

            head = f'version: "{PROTOCOL_VERSION}"\nproviders:\n'
            target.write_text(head + to_yaml([entry], indent=2), encoding="utf-8")
        return "created"
    data, items = _read(target)
    key = _list_key(data)
    expected = {**data, key: [*items, entry]}
    text = target.read_text(encoding="utf-8")
    if target.suffix.lower() != ".json":
        appended = _append_yaml(text, key, entry)
        if appended is not None and _parses_to(appended, expected):
            target.write_text(appended, encoding="utf-8")
            return "appended"
    backup = target.with_name(target.name + ".bak")
    backup.write_text(text, encoding="utf-8")
    if target.suffix.lower() == ".json":
        import json

        target.write_text(json.dumps(expected, indent=2, ensure_ascii=False) + "\n")
    else:
        from ..catalog import to_yaml

        target.write_text(to_yaml(expected), encoding="utf-8")
    return "rewrote"


def _append_yaml(text: str, key: str, entry: dict[str, Any]) -> str | None:
    """`text` with `entry` added after the last item of the block list under `key`, keeping
    every comment; None when the list is not a non-empty block list."""
    import yaml

    from ..catalog import to_yaml

    try:
        root = yaml.compose(text)
    except yaml.YAMLError:
        return None
    if not isinstance(root, yaml.MappingNode):
        return None
    node = next((v for k, v in root.value if getattr(k, "value", None) == key), None)
    if not isinstance(node, yaml.SequenceNode) or node.flow_style or not node.value:
        return None
    lines = text.splitlines(keepends=True)
    end = min(node.end_mark.line, len(lines))
    if node.end_mark.column > 0 and end < len(lines):
        end += 1  # the list ends inside this line (at the end of the file without a newline)
    while end > 0 and (not lines[end - 1].strip() or lines[end - 1].lstrip().startswith("#")):
        end -= 1  # blank lines and comments after the list belong to what follows
    head = "".join(lines[:end])
    if head and not head.endswith("\n"):
        head += "\n"
    return head + to_yaml([entry], indent=node.start_mark.column) + "".join(lines[end:])


def _parses_to(text: str, expected: dict[str, Any]) -> bool:
    import yaml

    try:
        return bool(yaml.safe_load(text) == expected)
    except yaml.YAMLError:
        return False
