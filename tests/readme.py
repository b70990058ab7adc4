"""Reading the READMEs' structure for the tests that keep them true: their sections, code
blocks, the command-line table, the commands they show and the config fields they name."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parents[1]
README = ROOT / "README.md"
README_ZH = ROOT / "README.zh-CN.md"

_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
_SPAN = re.compile(r"`([^`]+)`")


def headings(text: str) -> list[str]:
    """The `#` marks of every heading, in order (`##`, `###`, …), outside code blocks."""
    return [line.split(" ", 1)[0] for line in _FENCE.sub("", text).splitlines() if line[:1] == "#"]


def code_blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of every fenced block, in order."""
    return [(m.group(1), m.group(2)) for m in _FENCE.finditer(text)]


def section(text: str, title: str) -> str:
    """The text under the heading that starts with `title`, up to the next heading of the same
    or a higher level."""
    lines = text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        level = len(line) - len(line.lstrip("#"))
        if level and line[level:].strip().startswith(title):
            end = next(
                (
                    j
                    for j in range(i + 1, len(lines))
                    if lines[j].startswith("#")
                    and len(lines[j]) - len(lines[j].lstrip("#")) <= level
                    and not _in_fence(lines[: j + 1])
                ),
                len(lines),
            )
            return "".join(lines[i + 1 : end])
    raise AssertionError(f"no section {title!r}")


def _in_fence(lines: list[str]) -> bool:
    return sum(line.startswith("```") for line in lines) % 2 == 1


def tables(text: str) -> list[list[list[str]]]:
    """Every table as its rows of cells (header and separator rows left out; `\\|` is a pipe)."""
    found: list[list[list[str]]] = []
    previous = ""
    for line in _FENCE.sub("", text).splitlines():
        if line.startswith("|") and not set(line) <= set("|-: "):
            cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line)[1:-1]]
            if previous.startswith("|"):
                found[-1].append(cells)
            else:
                found.append([])  # this line is the header
        previous = line
    return found


def _command(span: str) -> bool:
    return span.startswith("agent-reach ") or "| agent-reach " in span


def cli_table_commands(text: str) -> list[str]:
    """The commands of the command-line table (the first table whose rows start with
    `agent-reach …`), as written; a cell such as "`agent-reach --version`, `--help`" gives
    two."""
    for rows in tables(text):
        firsts = [_SPAN.findall(cells[0]) for cells in rows]
        if firsts and all(spans and _command(spans[0]) for spans in firsts):
            return [
                span if _command(span) else f"agent-reach {span}"
                for spans in firsts
                for span in spans
            ]
    raise AssertionError("no command-line table")


def shown_commands(text: str) -> list[tuple[str, str]]:
    """(`$ agent-reach …` command, the output shown under it) from the shell code blocks."""
    out = []
    for lang, body in code_blocks(text):
        if lang not in ("", "sh", "console"):
            continue
        lines = body.splitlines()
        for i, line in enumerate(lines):
            if line.startswith("$ agent-reach "):
                shown = []
                for after in lines[i + 1 :]:
                    if after.startswith("$ ") or not after.strip():
                        break
                    shown.append(after)
                out.append((line[2:], "\n".join(shown)))
    return out


def subcommands(text: str) -> set[str]:
    """Every `agent-reach SUBCOMMAND` the text shows in code (spans and blocks)."""
    code = [body for _, body in code_blocks(text)] + _SPAN.findall(_FENCE.sub("", text))
    return {
        m.group(1)
        for piece in code
        for m in re.finditer(r"agent-reach ((?:config )?[a-z][a-z-]*)", piece)
    }


def config_fields(text: str, known: set[str]) -> set[str]:
    """The config fields a README names: keys of its YAML blocks, and words in code spans
    that are fields of the config file (`known`, from `agent-reach config schema`)."""
    fields: set[str] = set()
    for lang, body in code_blocks(text):
        if lang == "yaml":
            fields |= {m.group(1) for m in re.finditer(r"^\s*-?\s*([a-z_]+):", body, re.M)}
    for span in _SPAN.findall(_FENCE.sub("", text)):
        fields |= {w for w in re.findall(r"[a-z_][a-z0-9_]*", span) if w in known}
    return fields
