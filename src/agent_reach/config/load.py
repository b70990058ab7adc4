"""Loading a config file (protocol §2): from a path to a validated `Config`.

`load_config(path)` finds the file (`--config` → `$AGENT_REACH_CONFIG` →
`~/.agent-reach/config.yaml`), parses YAML or JSON, expands `${VAR}` / `${VAR:-default}`,
applies `defaults:` to every provider, validates (the models fill the defaults that depend on a
provider's `format`) and imports the hooks it names. Every problem becomes one `ConfigError`
that names the file, the provider and the field.
"""

from __future__ import annotations

import json
import os
import re
import ssl
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..core.errors import ConfigError
from ..core.redaction import Redactor
from .describe import describe, did_you_mean, where
from .model import Config, Expansion
from .provider import Provider

DEFAULT_PATH = "~/.agent-reach/config.yaml"
ENV_PATH = "AGENT_REACH_CONFIG"


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


MAX_DEPTH = 64  # levels of nesting a config file may have
MAX_VALUES = 100_000  # values it may hold once YAML aliases are expanded


def parse_text(text: str, *, json_file: bool, file: str) -> Any:
    """YAML (or JSON) text to data, with the line of a syntax error; at most `MAX_DEPTH`
    deep and `MAX_VALUES` values (a YAML alias counts each time it is used)."""
    too_deep = f"nested deeper than {MAX_DEPTH} levels"
    if json_file:
        try:
            return _bounded(json.loads(text), file)
        except json.JSONDecodeError as exc:
            raise ConfigError(
                f"line {exc.lineno}, column {exc.colno}: invalid JSON: {exc.msg}", file=file
            ) from exc
        except RecursionError:
            raise ConfigError(too_deep, file=file) from None
    import yaml

    try:
        return _bounded(yaml.safe_load(text), file)
    except RecursionError:
        raise ConfigError(too_deep, file=file) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{at}invalid YAML: {problem}", file=file) from exc


def _bounded(data: Any, file: str) -> Any:
    """`data`, if within `MAX_DEPTH` and `MAX_VALUES`; the walk stops at the first excess,
    so an alias bomb costs no more than `MAX_VALUES` steps."""
    todo: list[tuple[Any, int]] = [(data, 1)]
    seen = 0
    while todo:
        value, depth = todo.pop()
        seen += 1
        if seen > MAX_VALUES:
            raise ConfigError(
                f"more than {MAX_VALUES} values once its YAML aliases are expanded", file=file
            )
        if depth > MAX_DEPTH:
            raise ConfigError(f"nested deeper than {MAX_DEPTH} levels", file=file)
        if isinstance(value, dict):
            todo.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            todo.extend((v, depth + 1) for v in value)
    return data


def config_from_data(data: Any, *, source: str = "<dict>") -> Config:
    """Validate already-parsed config data (a dict as in the file)."""
    if not isinstance(data, dict):
        raise ConfigError("expected a mapping at the top level with `providers:`", file=source)
    if "providers" not in data and "agent_reach_fallbacks" in data:
        data = {("providers" if k == "agent_reach_fallbacks" else k): v for k, v in data.items()}
    expanded: list[Expansion] = []
    data = _expand(data, (), source, data, expanded)
    try:
        data = _apply_defaults(data, source)
        try:
            config = Config.model_validate(data)
        except ValidationError as exc:
            raise ConfigError(describe(exc, data, Config), file=source) from None
        config.attach(
            source, _load_hooks(config, source), _load_tls(config, source), tuple(expanded)
        )
    except ConfigError as exc:  # it may quote a value: never what a variable held (a key)
        shown = Redactor.of({e.value: f"${{{e.name}}}" for e in expanded})
        exc.args = (shown.text(str(exc)),)
        raise
    return config


def _load_hooks(config: Config, source: str) -> dict[tuple[str, str], Any]:
    """Import every hook once, now, so that a missing one is a config error."""
    from . import hooks

    base = Path(source).parent if source != "<dict>" else Path.cwd()
    loaded = {}
    for i, p in enumerate(config.providers):
        for field in ("preprocess_hook", "post_process_hook"):
            ref = getattr(p, field)
            if ref:
                try:
                    loaded[(p.name, field)] = hooks.load(ref, base)
                except ValueError as exc:
                    blame = (
                        f"defaults, field {field!r}"  # blame the place the value came from
                        if config.defaults.get(field) == ref
                        else f"provider {p.name!r} (providers[{i}]), field {field!r}"
                    )
                    raise ConfigError(f"{blame}: {exc}", file=source) from None
    return loaded


def _load_tls(config: Config, source: str) -> dict[str, ssl.SSLContext]:
    """Read every `ca_file` once, now (relative to the config file), so that a missing or
    unreadable one is a config error; one TLS context per provider that sets `ssl_verify:
    false` (which wins: nothing is checked) or `ca_file`."""
    base = Path(source).parent if source != "<dict>" else Path.cwd()
    made: dict[tuple[bool, str | None], ssl.SSLContext] = {}
    contexts: dict[str, ssl.SSLContext] = {}
    for i, p in enumerate(config.providers):
        if p.ssl_verify and p.ca_file is None:
            continue
        cafile = None if not p.ssl_verify or p.ca_file is None else p.ca_file
        key = (p.ssl_verify, cafile)
        if key not in made:
            try:
                made[key] = _tls_context(p.ssl_verify, cafile, base)
            except (OSError, ssl.SSLError) as exc:
                problem = getattr(exc, "reason", None) or exc.strerror or str(exc)
                raise ConfigError(
                    f"provider {p.name!r} (providers[{i}]), field 'ca_file': cannot read "
                    f"{p.ca_file!r} as PEM certificates ({str(problem).lower()})",
                    file=source,
                ) from None
        contexts[p.name] = made[key]
    return contexts


def _tls_context(verify: bool, cafile: str | None, base: Path) -> ssl.SSLContext:
    if not verify:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    assert cafile is not None
    return ssl.create_default_context(cafile=str(base / Path(cafile).expanduser()))


_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def _expand(
    value: Any, loc: tuple[Any, ...], source: str, root: Any, expanded: list[Expansion]
) -> Any:
    """`${VAR}` and `${VAR:-default}` in every string, from the environment; each variable
    read goes into `expanded` (where, its name, what it held)."""
    if isinstance(value, str) and "${" in value:

        def sub(m: re.Match[str]) -> str:
            var, default = m.group(1), m.group(2)
            got = os.environ.get(var)
            if got is None or (got == "" and default is not None):
                if default is None:
                    raise ConfigError(
                        f"{where(loc, root)}: ${{{var}}} is not set in the environment "
                        f"(write ${{{var}:-default}} to give a default)",
                        file=source,
                    )
                return default
            expanded.append(Expansion(loc, var, got))
            return got

        return _VAR.sub(sub, value)
    if isinstance(value, dict):
        return {k: _expand(v, (*loc, k), source, root, expanded) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand(v, (*loc, i), source, root, expanded) for i, v in enumerate(value)]
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
                f"defaults, field {key!r}: unknown field{did_you_mean(key, known)}", file=source
            )
    try:
        Provider.model_validate({**defaults, "name": "defaults", "endpoint": "http://defaults/"})
    except ValidationError as exc:
        raise ConfigError(describe(exc, {}, Provider, ("defaults",)), file=source) from None
