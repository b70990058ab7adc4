"""The one table of what each reason does (`trace.EFFECTS`, protocol §5): every reason has its
row, and no other module keeps a set of reasons of its own (it reads the table instead)."""

from __future__ import annotations

import ast
from pathlib import Path

from agent_reach.core.trace import EFFECTS, Circuit, Reason

SRC = Path(__file__).resolve().parent.parent / "src" / "agent_reach"


def test_every_reason_has_exactly_one_row() -> None:
    assert list(EFFECTS) == list(Reason)  # a row each, in the enum's order, none twice


def test_what_the_rows_say() -> None:
    """A few rows as protocol §5 states them, so that an edit of the table is a visible one."""
    assert {r for r, e in EFFECTS.items() if e.circuit is Circuit.COUNTS} == {
        Reason.CONNECT_FAILED,
        Reason.TIMEOUT,
        Reason.SERVER_ERROR,
        Reason.SCHEMA_MISMATCH,
        Reason.HOOK_ERROR,
    }
    assert {r for r, e in EFFECTS.items() if e.retried} == {
        Reason.CONNECT_FAILED,
        Reason.TIMEOUT,
        Reason.SERVER_ERROR,
        Reason.RATE_LIMITED,
        Reason.SCHEMA_MISMATCH,
    }
    assert {r for r, e in EFFECTS.items() if e.deferred} == {Reason.CIRCUIT_OPEN, Reason.UNHEALTHY}
    assert {r for r, e in EFFECTS.items() if not e.budget} == {
        Reason.CONNECT_FAILED,
        Reason.UNHEALTHY,
        Reason.CIRCUIT_OPEN,
        Reason.QUOTA_EXHAUSTED,
    }
    assert EFFECTS[Reason.AUTH_FAILED].circuit is Circuit.OPENS
    assert EFFECTS[Reason.MODEL_UNAVAILABLE].status == 404


def _reason_sets(tree: ast.AST) -> list[int]:
    """The lines of set, tuple or list literals (a `frozenset({...})` holds one) with two
    members of `Reason` or more."""

    def members(node: ast.AST) -> int:
        elts = node.elts if isinstance(node, ast.Set | ast.Tuple | ast.List) else []
        return sum(
            isinstance(e, ast.Attribute)
            and isinstance(e.value, ast.Name)
            and e.value.id == "Reason"
            for e in elts
        )

    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Set | ast.Tuple | ast.List) and members(node) >= 2
    ]


def test_no_module_outside_the_table_names_a_set_of_reasons() -> None:
    found = {
        str(path.relative_to(SRC)): lines
        for path in sorted(SRC.rglob("*.py"))
        if path.name != "trace.py" and (lines := _reason_sets(ast.parse(path.read_text())))
    }
    assert found == {}, "read trace.EFFECTS (add a column there) instead of naming a set"


def test_a_set_of_reasons_is_found() -> None:
    code = "x = frozenset({Reason.OK, Reason.TIMEOUT})\nif r in (Reason.A, Reason.B): pass\n"
    assert _reason_sets(ast.parse(code)) == [1, 2]
