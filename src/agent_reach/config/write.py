"""Writing config files: the one place YAML (or JSON) is written, for `init` (a whole new
file), `probe --write` (one provider added to a file the user owns) and the catalog's entries.

A file the user wrote keeps its comments: a provider is added as text after the last item of
its provider list. Where that cannot be done safely (a JSON file, a flow-style list), the file
is rewritten as a whole and the old one kept as `*.bak`.

Every file agent-reach creates in the user's folders (a config, `run.log`, a `--log` file, an
agent's settings, the state file) is created 0600, in new directories made 0700
(`open_private`, `private_parents`): they hold keys' names and more, what was asked of whom,
stored conversations. A file that exists keeps its mode.
"""

from __future__ import annotations

import functools
import json
import os
import textwrap
from pathlib import Path
from typing import IO, Any, Literal

from ..core.errors import ConfigError
from ..version import PROTOCOL_VERSION

How = Literal["created", "appended", "rewrote"]


@functools.cache
def _dumper() -> type:
    import yaml

    class Dumper(yaml.SafeDumper):
        """Block mappings, flow lists of plain values (`models: [a, b]`)."""

    def represent_list(dumper: yaml.SafeDumper, data: list[Any]) -> yaml.Node:
        flat = all(not isinstance(v, dict | list) for v in data)
        return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flat)

    Dumper.add_representer(list, represent_list)
    return Dumper


def to_yaml(data: Any, indent: int = 0) -> str:
    """`data` as block YAML (lists of plain values in flow style), every line indented by
    `indent` spaces."""
    import yaml

    text = yaml.dump(data, Dumper=_dumper(), sort_keys=False, allow_unicode=True, width=1000)
    pad = " " * indent
    return "".join(pad + line if line.strip() else line for line in text.splitlines(True))


def _json(data: Any) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def render(
    providers: list[tuple[dict[str, Any], str]],
    defaults: dict[str, Any],
    header: list[str],
    *,
    json_file: bool = False,
    top: dict[str, Any] | None = None,
) -> str:
    """A whole config file: `header` comment lines, the version, `defaults`, the `top`
    sections, and each provider after its note (a `.json` file gets the same data, without the
    comments)."""
    sections = {"defaults": defaults, **(top or {})}
    if json_file:
        data = {"version": PROTOCOL_VERSION, **sections}
        return _json({**data, "providers": [p for p, _ in providers]})
    lines = [f"# {line}" for line in header]
    lines += [f'version: "{PROTOCOL_VERSION}"', "", to_yaml(sections).rstrip()]
    lines += ["", "providers:"]
    for provider, note in providers:
        lines += textwrap.wrap(note, 96, initial_indent="  # ", subsequent_indent="  # ")
        lines.append(to_yaml([provider], indent=2).rstrip("\n"))
    return "\n".join(lines) + "\n"


def read_raw(target: Path) -> tuple[dict[str, Any], list[Any]]:
    """(the file's data, its provider list), parsed but neither expanded nor validated."""
    from . import parse_text

    try:
        text = target.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the file: {exc}", file=str(target)) from exc
    data = parse_text(text, json_file=target.suffix.lower() == ".json", file=str(target))
    if not isinstance(data, dict):
        raise ConfigError("expected a mapping at the top level", file=str(target))
    items = data.get(_list_key(data))
    return data, items if isinstance(items, list) else []


def provider_names(target: Path) -> set[str]:
    """The provider names in the config file at `target` (none when it does not exist)."""
    if not target.exists():
        return set()
    _, items = read_raw(target)
    return {str(p.get("name", p.get("provider"))) for p in items if isinstance(p, dict)}


def weight_after_last(target: Path) -> float | None:
    """A `fallback_weight` below every provider's in the file, so that a new provider comes
    last in the default order (None when the file has none). At 0 the tie keeps file order,
    which puts an appended provider last as well."""
    if not target.exists():
        return None
    data, items = read_raw(target)
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


def _list_key(data: dict[str, Any]) -> str:
    embedded = "providers" not in data and "agent_reach_fallbacks" in data
    return "agent_reach_fallbacks" if embedded else "providers"


def private_parents(path: Path) -> None:
    """Make the missing directories above `path`, each 0700."""
    missing = [d for d in (path.parent, *path.parent.parents) if not d.exists()]
    for directory in reversed(missing):
        directory.mkdir(mode=0o700, exist_ok=True)


def open_private(path: Path, append: bool = False) -> IO[str]:
    """`path` open to write text (to its end with `append`, else from empty), created 0600
    when it is new, in missing directories made 0700."""
    private_parents(path)
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC)
    return os.fdopen(os.open(path, flags, 0o600), "a" if append else "w", encoding="utf-8")


def write_private(path: Path, text: str) -> None:
    """Write `text` to `path` as `open_private` opens it."""
    with open_private(path) as out:
        out.write(text)


def append_provider(target: Path, entry: dict[str, Any]) -> How:
    """Add `entry` to the config file's providers and say how: `created` (a new file),
    `appended` (the text added after the list's last item, comments kept) or `rewrote` (a JSON
    file, or a list that text cannot be appended to; the old file is kept as `.bak`)."""
    json_file = target.suffix.lower() == ".json"
    if not target.exists():
        if json_file:
            write_private(target, _json({"version": PROTOCOL_VERSION, "providers": [entry]}))
        else:
            head = f'version: "{PROTOCOL_VERSION}"\nproviders:\n'
            write_private(target, head + to_yaml([entry], indent=2))
        return "created"
    data, items = read_raw(target)
    key = _list_key(data)
    expected = {**data, key: [*items, entry]}
    text = target.read_text(encoding="utf-8")
    if not json_file:
        appended = _append_yaml(text, key, entry)
        if appended is not None and _parses_to(appended, expected):
            target.write_text(appended, encoding="utf-8")
            return "appended"
    target.with_name(target.name + ".bak").write_text(text, encoding="utf-8")
    target.write_text(_json(expected) if json_file else to_yaml(expected), encoding="utf-8")
    return "rewrote"


def written(how: How, name: str, target: Path) -> str:
    """What `append_provider` did, in words."""
    if how == "created":
        return f"created {target} with provider {name}"
    if how == "appended":
        return f"appended provider {name} to {target}"
    backup = target.with_name(target.name + ".bak")
    lost = "" if target.suffix.lower() == ".json" else ", so its comments were not kept"
    return f"added provider {name} to {target}, rewritten as a whole{lost} (the old one: {backup})"


def _append_yaml(text: str, key: str, entry: dict[str, Any]) -> str | None:
    """`text` with `entry` added after the last item of the block list under `key`, keeping
    every comment; None when the list is not a non-empty block list."""
    import yaml

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
