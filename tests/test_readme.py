"""README.zh-CN.md is kept in step with README.md: the same sections, the same commands, the
same config fields, and each links to the other. What is compared is read from README.md's own
structure (its command-line table, its shell examples, its YAML), so a command or field added
there must be added to the Chinese README too."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from .readme import (
    README,
    README_ZH,
    cli_table_commands,
    code_blocks,
    config_fields,
    headings,
    shown_commands,
    subcommands,
)

BIN = str(Path(sys.executable).parent / "agent-reach")


def _schema_fields() -> set[str]:
    """Every field name of the config file, from `agent-reach config schema`."""
    schema = json.loads(
        subprocess.run([BIN, "config", "schema"], capture_output=True, text=True, check=True).stdout
    )
    names: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            names.update(node.get("properties", {}))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    return names


def test_both_readmes_have_the_same_sections() -> None:
    assert headings(README_ZH.read_text()) == headings(README.read_text())


def test_both_readmes_name_the_same_commands() -> None:
    en, zh = README.read_text(), README_ZH.read_text()
    assert cli_table_commands(zh) == cli_table_commands(en)
    assert shown_commands(zh) == shown_commands(en)  # commands and the output they show
    assert subcommands(zh) == subcommands(en)
    assert len(cli_table_commands(en)) >= 15


def test_both_readmes_name_the_same_config_fields() -> None:
    known = _schema_fields()
    en = config_fields(README.read_text(), known)
    zh = config_fields(README_ZH.read_text(), known)
    assert "fallback_weight" in en
    assert "api_key_env" in en
    assert zh == en, {"only in README.md": en - zh, "only in README.zh-CN.md": zh - en}


def test_the_examples_are_the_same() -> None:
    def examples(text: str) -> list[str]:
        # code without its comments: the comments are translated, the code is not
        return [
            "\n".join(line.split("#", 1)[0].rstrip() for line in body.splitlines())
            for lang, body in code_blocks(text)
            if lang in ("yaml", "python", "sh", "")
        ]

    assert examples(README_ZH.read_text()) == examples(README.read_text())


def test_each_readme_links_to_the_other() -> None:
    assert "(README.zh-CN.md)" in README.read_text().split("\n## ", 1)[0]
    assert "(README.md)" in README_ZH.read_text().split("\n## ", 1)[0]


def test_the_chinese_readme_is_chinese() -> None:
    # prose in Chinese; commands, fields, links and CLI messages stay as they are
    prose = re.sub(
        r"^```.*?^```|`[^`]+`|\([^)]*\)|^\|.*$", "", README_ZH.read_text(), flags=re.S | re.M
    )
    han = sum("\u4e00" <= ch <= "\u9fff" for ch in prose)
    words = len(re.findall(r"[A-Za-z]+", prose))
    assert han > 800
    assert han > 5 * words


def test_each_readme_is_short_and_has_no_history() -> None:
    for path in (README, README_ZH):
        text = path.read_text()
        assert len(text.splitlines()) <= 400, path.name
        assert not re.search(r"\bissue \d|\bcommit\b|\bthis session|最初的需求说明", text), (
            path.name
        )
        hashes = [w for w in re.findall(r"\b[0-9a-f]{7,40}\b", text) if re.search("[a-f]", w)]
        assert not [w for w in hashes if re.search("[0-9]", w)], path.name


def test_no_readme_installs_the_unrelated_pypi_project() -> None:
    # `agent-reach` on PyPI is another project: ours is `agent-reach-router` (pyproject.toml).
    for path in (README, README_ZH):
        text = path.read_text()
        assert "install 'agent-reach[" not in text, path.name
        assert not re.search(r"(pipx|uv tool|pip) install agent-reach\b(?!-router)", text)
        for line in ("pipx install agent-reach-router", "uv tool install agent-reach-router"):
            assert line in text, (path.name, line)


def test_the_chinese_pages_keep_one_term_per_concept() -> None:
    # the Chinese pages of the documentation too
    pages = [README_ZH, *(README_ZH.parent / "docs").rglob("*.zh.md")]
    text = "\n".join(page.read_text(encoding="utf-8") for page in pages)
    # One term each: 单步模式 (step mode), 客户端鉴权 (client auth), 提供方 for a provider (上游
    # read as "the caller's side" clashed with it), plain words for the seed and wire formats.
    for dropped in ("步进模式", "客户端认证", "上游什么", "线上格式", "原始描述"):
        assert dropped not in text, dropped
    assert "单步模式" in text
    assert "客户端鉴权" in text


def test_every_config_in_the_readmes_validates(tmp_path: Path) -> None:
    for readme in (README, README_ZH):
        configs = [b for lang, b in code_blocks(readme.read_text()) if "providers:" in b]
        assert len(configs) >= 2, readme.name
        for i, body in enumerate(configs):
            path = tmp_path / f"{readme.stem}-{i}.yaml"
            path.write_text(body)
            done = subprocess.run(
                [BIN, "config", "validate", str(path)], capture_output=True, text=True, check=False
            )
            assert done.returncode == 0, (readme.name, body, done.stderr)


def test_every_link_in_the_readmes_leads_to_a_file() -> None:
    for readme in (README, README_ZH):
        targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme.read_text())
        local = [t for t in targets if "://" not in t]
        assert len(local) >= 10, readme.name
        missing = [t for t in local if not (readme.parent / t).exists()]
        assert not missing, (readme.name, missing)


def test_the_catalog_size_the_readmes_state_is_the_catalogs() -> None:
    from agent_reach import catalog

    stated = [
        re.search(r"catalog of (\d+) known endpoints", README.read_text()),
        re.search(r"内置目录中 (\d+) 个已知端点", README_ZH.read_text()),
    ]
    assert [int(m.group(1)) if m else None for m in stated] == [len(catalog.load())] * 2
