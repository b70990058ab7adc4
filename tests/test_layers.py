"""The layer rule of docs/architecture.md: no import in `src/agent_reach` points up a layer; and
the import graph that page shows is the one `scripts/import_graph.py` draws from the code now."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent


def graph() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "import_graph", ROOT / "scripts" / "import_graph.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["import_graph"] = module
    spec.loader.exec_module(module)
    return module


def test_no_import_points_up() -> None:
    g = graph()
    edges = g.imports()
    assert "engine" in edges["router"]  # the graph is read from the code
    assert g.violations(edges) == []


def test_an_import_pointing_up_is_caught(tmp_path: Path) -> None:
    g = graph()
    package = tmp_path / "agent_reach"
    (package / "dialects").mkdir(parents=True)
    (package / "__init__.py").write_text("from .router import Router\n")
    (package / "router.py").write_text("from . import engine\n")
    (package / "engine.py").write_text("from .dialects import openai\n")
    (package / "dialects" / "__init__.py").write_text("")
    # A dialect that reaches up into the engine, inside a function: still a dependency.
    (package / "dialects" / "openai.py").write_text("def f():\n    from ..engine import Engine\n")
    (package / "gadget.py").write_text("import agent_reach.core.trace\n")
    problems = g.violations(g.imports(package))
    assert problems == [
        "gadget: in no layer (add it to LAYERS in scripts/import_graph.py)",
        "dialects (formats) imports engine (engine): an import pointing up",
    ]


def test_the_graph_in_the_docs_is_the_one_the_code_draws() -> None:
    g = graph()
    shown = g.embedded(g.DOC.read_text(encoding="utf-8"))
    assert shown is not None, f"{g.DOC} has lost its {g.BEGIN!r} ... {g.END!r} block"
    assert shown == g.markdown(g.imports()), (
        "docs/architecture.md's import graph differs from the code's: regenerate it with "
        "`.venv/bin/python scripts/import_graph.py --update-docs`"
    )


def test_the_graph_is_written_between_the_markers(tmp_path: Path) -> None:
    g = graph()
    doc = tmp_path / "architecture.md"
    doc.write_text(f"# Map\n\n{g.BEGIN}\nold graph\n{g.END}\n\nafter\n")
    edges = {"router": {"engine"}, "engine": {"core"}}
    g.update_docs(edges, doc)
    text = doc.read_text()
    assert g.embedded(text) == g.markdown(edges)
    assert text.startswith(f"# Map\n\n{g.BEGIN}\n```mermaid\n")
    assert text.endswith(f"\n{g.END}\n\nafter\n")
    assert "L6 -->|1| L4" in text  # front door → engine
    assert "| front door | `router` | `engine` |" in text


def test_no_circle_of_imports_anywhere() -> None:
    """Between any two modules of `src/agent_reach`, `TYPE_CHECKING` and lazy imports counted,
    package `__init__`s included (a submodule importing its package's face is one)."""
    g = graph()
    edges = g.module_imports()
    assert "agent_reach.engine.loop" in edges["agent_reach.router"]  # read from the code
    assert g.circles(edges) == []


def test_a_circle_is_caught(tmp_path: Path) -> None:
    g = graph()
    package = tmp_path / "agent_reach"
    (package / "state").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "state" / "__init__.py").write_text("from .memory import Store\n")
    memory = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import Logged\n"
    (package / "state" / "memory.py").write_text(memory)
    (package / "engine.py").write_text("def f():\n    from . import router\n")
    (package / "router.py").write_text("from .engine import f\n")
    assert g.circles(g.module_imports(package)) == [
        ["agent_reach.engine", "agent_reach.router"],
        ["agent_reach.state", "agent_reach.state.memory"],
    ]
