"""docs/architecture.md names what exists (issue 48): every file or folder it names, every
`Class.member` and every dotted name (`caps.stated_cap`, `dialects.anthropic.answer.…`) is in
the code. A rename that forgets the page fails here."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src" / "agent_reach"
PAGE = (ROOT / "docs" / "architecture.md").read_text()
NAMED = sorted(set(re.findall(r"`([^`\s]+)`", PAGE)))
UNITS = [p.name for p in SRC.iterdir() if p.is_dir() and (p / "__init__.py").exists()]
PLACEHOLDER = "NAME"  # `dialects/NAME.py`: any one


def _path(token: str) -> Path | None:
    """Where a named file, folder or module (`server/faces/step`, `cli/chat.chat`: a module's
    name) is: in the package (a codec's folder in `dialects/`), or in the repository."""
    folder, _, last = token.rpartition("/")
    named = last.endswith(".py") or not last
    module = token if named else f"{folder}/{last.split('.', 1)[0]}"
    for base in (SRC, SRC / "dialects", ROOT):
        for found in (base / token, base / f"{module}.py"):
            if found.exists():
                return found
    return None


def test_every_path_it_names_exists() -> None:
    paths = [
        t
        for t in NAMED
        if "/" in t and not t.startswith("/") and PLACEHOLDER not in t and "{" not in t
    ]
    assert len(paths) >= 20
    missing = [t for t in paths if _path(t) is None]
    assert not missing, missing


def _class_file(name: str) -> str | None:
    for path in SRC.rglob("*.py"):
        text = path.read_text()
        if re.search(rf"^class {name}\b", text, re.M):
            return text
    return None


def test_every_class_member_it_names_exists() -> None:
    members = [
        m.groups()
        for t in NAMED
        if (m := re.fullmatch(r"([A-Z]\w+)\.(_?[a-z]\w*)(?:\(.*\))?", t)) and t != "Class.member"
    ]
    assert len(members) >= 20
    missing = []
    for cls, member in members:
        text = _class_file(cls)
        defined = rf"^\s+(?:async def |def ){member}\b|^\s+{member}\s*[:=]"
        if text is None or not re.search(defined, text, re.M):
            missing.append(f"{cls}.{member}")
    assert not missing, missing


def _resolves(dotted: str) -> bool | None:
    """Whether `dotted` names something, read as `agent_reach.…` or `agent_reach.UNIT.…`; None
    when its first part is no module (a field or a word, not a name of the code)."""
    parts = dotted.split(".")
    for prefix in ([], *([u] for u in UNITS)):
        for cut in range(len(parts), 0, -1):
            name = ".".join(["agent_reach", *prefix, *parts[:cut]])
            try:
                found: object = importlib.import_module(name)
            except ImportError:
                continue
            for attr in parts[cut:]:
                if not hasattr(found, attr):  # an instance's attribute, set in its class
                    source = getattr(found, "__file__", None)
                    return source is not None and f"self.{attr} =" in Path(source).read_text()
                found = getattr(found, attr)
            return True
    return None


def test_every_dotted_name_it_names_exists() -> None:
    dotted = [
        t
        for t in NAMED
        if re.fullmatch(r"[a-z_]\w*(?:\.[A-Za-z_]\w*)+", t) and not t.endswith((".py", ".md"))
    ]
    checked = {t: _resolves(t) for t in dotted}
    assert sum(v is not None for v in checked.values()) >= 15
    assert not [t for t, ok in checked.items() if ok is False]
