#!/usr/bin/env python3
"""The import graph of `src/agent_reach`, drawn from the code, and the layer rule it must keep.

    python scripts/import_graph.py                 # the graph, layer by layer, as text
    python scripts/import_graph.py --dot           # the same as Graphviz DOT
    python scripts/import_graph.py --markdown      # a mermaid chart and a table, for GitHub
    python scripts/import_graph.py --update-docs   # the same, written into docs/architecture.md
    python scripts/import_graph.py --check         # exit 1, naming each import that points up
                                                   # and each circle of imports between modules

A unit is a top-level module or subpackage of `agent_reach`. Units sit in layers (`LAYERS`,
bottom first); a unit may import units of its own layer or of a layer below, never above.
Imports inside functions count too (a lazy import is still a dependency), and so do imports
under `TYPE_CHECKING`, so that the picture is the whole truth.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ROOT = REPO / "src" / "agent_reach"
DOC = REPO / "docs" / "architecture.md"
# docs/architecture.md holds `markdown`'s output between these two lines.
BEGIN = "<!-- import-graph: begin (python scripts/import_graph.py --update-docs) -->"
END = "<!-- import-graph: end -->"

# Bottom first, each unit a folder (but the front door, the version and the package's own
# files): the words of the protocol and the pure decisions; the middle's request and answer
# types; the wire formats and the config; what does I/O below the engine (sockets, stored
# state, our HTTP/1.1 server, which knows no API); the one loop; the views and listeners over
# it; the library's front door; the faces.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("core", ("core", "version")),
    ("chat", ("chat",)),
    ("formats", ("dialects", "config", "catalog")),
    ("io", ("net", "state", "server.http11")),
    ("engine", ("engine",)),
    ("observe", ("observe",)),
    ("front door", ("router",)),
    ("faces", ("server", "cli", "__init__", "__main__")),
)
# A folder inside a unit that is a unit of its own, in a lower layer.
_NESTED = ("server.http11",)


def unit_of(module: str) -> str:
    """`agent_reach.x.y` → `x` (`server.http11` for what is in that folder); the package
    itself → `__init__`."""
    parts = module.split(".")
    if len(parts) == 1:
        return "__init__"
    nested = ".".join(parts[1:3])
    return nested if nested in _NESTED else parts[1]


def imports(root: Path = ROOT) -> dict[str, set[str]]:
    """unit → the other units it imports."""
    edges: dict[str, set[str]] = defaultdict(set)
    for file in sorted(root.rglob("*.py")):
        parts = file.relative_to(root.parent).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        package = module if parts[-1] == "__init__" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                targets = [base] if node.module else [f"{base}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            for target in targets:
                if target.split(".")[0] == "agent_reach" and unit_of(target) != unit_of(module):
                    edges[unit_of(module)].add(unit_of(target))
    return dict(edges)


def module_imports(root: Path = ROOT) -> dict[str, set[str]]:
    """module → the modules of the package it imports (`from . import x` of a module `x`
    names that module; lazy and `TYPE_CHECKING` imports count)."""
    files = {".".join(_parts(f, root)): f for f in sorted(root.rglob("*.py"))}
    edges: dict[str, set[str]] = defaultdict(set)
    for module, file in files.items():
        package = module if file.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                subs = [f"{base}.{a.name}" for a in node.names]
                targets = [t for t in subs if t in files] or [base]
                if len(targets) < len(subs) and base in files:
                    targets.append(base)
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            edges[module].update(t for t in targets if t in files and t != module)
    return dict(edges)


def _parts(file: Path, root: Path) -> tuple[str, ...]:
    parts = file.relative_to(root.parent).with_suffix("").parts
    return parts[:-1] if parts[-1] == "__init__" else parts


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The circles of imports (strongly connected sets of two modules or more), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's algorithm
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(edges.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return sorted(found)


def layer_of(unit: str) -> int:
    for i, (_, units) in enumerate(LAYERS):
        if unit in units:
            return i
    raise KeyError(unit)


def violations(edges: dict[str, set[str]]) -> list[str]:
    """Every import that points up a layer, and every unit no layer names."""
    out = []
    known = {u for _, units in LAYERS for u in units}
    for unit in sorted(set(edges) | {t for ts in edges.values() for t in ts}):
        if unit not in known:
            out.append(f"{unit}: in no layer (add it to LAYERS in scripts/import_graph.py)")
    for unit, targets in sorted(edges.items()):
        for target in sorted(targets):
            if unit in known and target in known and layer_of(target) > layer_of(unit):
                here, there = LAYERS[layer_of(unit)][0], LAYERS[layer_of(target)][0]
                out.append(f"{unit} ({here}) imports {target} ({there}): an import pointing up")
    return out


def text(edges: dict[str, set[str]]) -> str:
    lines = []
    for name, units in reversed(LAYERS):
        lines.append(f"{name}:")
        for unit in units:
            if unit in edges or any(unit in t for t in edges.values()):
                lines.append(f"  {unit} -> {', '.join(sorted(edges.get(unit, ()))) or '-'}")
    return "\n".join(lines)


def dot(edges: dict[str, set[str]]) -> str:
    lines = ["digraph agent_reach {", "  rankdir=BT; node [shape=box];"]
    for i, (name, units) in enumerate(LAYERS):
        present = [u for u in units if u in edges or any(u in t for t in edges.values())]
        members = " ".join(f'"{u}";' for u in present)
        lines.append(f'  subgraph cluster_{i} {{ label="{name}"; {members} }}')
    for unit, targets in sorted(edges.items()):
        lines += [f'  "{unit}" -> "{t}";' for t in sorted(targets)]
    return "\n".join([*lines, "}"])


def markdown(edges: dict[str, set[str]]) -> str:
    """The graph for a page on GitHub: a mermaid chart of the layers (an arrow from one layer to
    a lower one, labelled with how many imports of a unit by a unit it stands for) and a table
    of every unit's imports, top layer first."""
    present = [
        (name, [u for u in units if u in edges or any(u in t for t in edges.values())])
        for name, units in LAYERS
    ]
    chart = ["```mermaid", "flowchart TD"]
    for i, (name, units) in reversed(list(enumerate(present))):
        rows = [" · ".join(units[j : j + 6]) for j in range(0, len(units), 6)]
        chart.append(f'  L{i}["<b>{name}</b><br/>{"<br/>".join(rows)}"]')
    between: dict[tuple[int, int], int] = defaultdict(int)
    for unit, targets in edges.items():
        for target in targets:
            if layer_of(target) != layer_of(unit):
                between[layer_of(unit), layer_of(target)] += 1
    for (above, below), count in sorted(between.items(), key=lambda p: (-p[0][0], -p[0][1])):
        chart.append(f"  L{above} -->|{count}| L{below}")
    chart.append("```")
    table = ["| layer | unit | imports |", "|---|---|---|"]
    for name, units in reversed(present):
        for i, unit in enumerate(units):
            shown = ", ".join(f"`{t}`" for t in sorted(edges.get(unit, ()))) or "–"
            table.append(f"| {name if i == 0 else ''} | `{unit}` | {shown} |")
    return "\n".join([*chart, "", *table])


def embedded(doc: str) -> str | None:
    """What `doc` holds between the markers, or None when it lacks them."""
    _, begin, rest = doc.partition(BEGIN + "\n")
    body, end, _ = rest.partition("\n" + END)
    return body if begin and end else None


def update_docs(edges: dict[str, set[str]], doc: Path = DOC) -> None:
    """Write `markdown(edges)` into `doc` between the markers."""
    text = doc.read_text(encoding="utf-8")
    old = embedded(text)
    if old is None:
        raise SystemExit(f"{doc}: no {BEGIN!r} ... {END!r} block to write the graph into")
    doc.write_text(text.replace(BEGIN + "\n" + old, BEGIN + "\n" + markdown(edges), 1))


def main(argv: list[str]) -> int:
    edges = imports()
    if "--check" in argv:
        problems = violations(edges)
        problems += [f"a circle of imports: {' -> '.join(c)}" for c in circles(module_imports())]
        for problem in problems:
            print(problem, file=sys.stderr)
        return 1 if problems else 0
    if "--update-docs" in argv:
        update_docs(edges)
    elif "--markdown" in argv:
        print(markdown(edges))
    else:
        print(dot(edges) if "--dot" in argv else text(edges))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
