"""The documentation site (mkdocs.yml): its reference pages are what the code generates now, it
builds with `--strict` in both languages (no broken link, no page left out of the navigation),
what a reader looks for is in it, and headless Chromium shows its title and navigation."""

from __future__ import annotations

import functools
import html
import http.server
import importlib.util
import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from .png import read_png
from .readme import ROOT, code_blocks, headings

SITE = ROOT / "site"  # kept after the run, with the screenshots under site/screenshots/


def _script(name: str) -> ModuleType:
    """`scripts/NAME.py`, loaded as a module."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec
    assert spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_generated_pages_are_what_the_code_generates_now() -> None:
    reference = _script("reference")
    for name, make in reference.GENERATED.items():
        page = reference.PAGES / name
        assert page.read_text(encoding="utf-8") == make(), (
            f"docs/reference/{name} is stale: run .venv/bin/python scripts/reference.py"
        )


def test_every_config_field_is_described_and_every_description_names_a_field() -> None:
    from agent_reach.config.schema import DESCRIBED, document, sections

    fields = {
        (name, field)
        for name, section in sections(document()).items()
        for field in section.get("properties", {})
    }
    described = yaml.safe_load(DESCRIBED.read_text(encoding="utf-8"))
    words = {(name, field) for name, section in described.items() for field in section}
    assert fields - words == set(), "fields with no description in config/fields.yaml"
    assert words - fields == set(), "descriptions in config/fields.yaml of no field"


# A Chinese page that is a summary of its English one, not a translation of it.
SUMMARIES = {"providers.zh.md"}


def test_each_translated_page_has_the_english_pages_sections_and_code() -> None:
    def code(text: str) -> list[str]:
        # code without its comments: the comments are translated, the code is not
        return [
            "\n".join(line.split("#", 1)[0].rstrip() for line in body.splitlines())
            for lang, body in code_blocks(text)
            if lang in ("yaml", "python", "sh", "", "json", "toml")
        ]

    pairs = [
        (zh.with_name(zh.name.replace(".zh.md", ".md")), zh)
        for zh in (ROOT / "docs").rglob("*.zh.md")
        if zh.name not in SUMMARIES
    ]
    assert len(pairs) >= 18
    for en, zh in pairs:
        en_text, zh_text = en.read_text(encoding="utf-8"), zh.read_text(encoding="utf-8")
        assert headings(zh_text) == headings(en_text), zh.name
        assert code(zh_text) == code(en_text), zh.name


def test_wide_lines_join_outside_code_only() -> None:
    hooks = _script("docs_hooks")
    text = "每个\n  提供方，\n见下文\n- 新项\n\n段落\nabc\n```\n中\n文\n```\n"
    joined = "每个提供方，见下文\n- 新项\n\n段落\nabc\n```\n中\n文\n```\n"
    assert hooks.join_wide_lines(text) == joined


@pytest.fixture(scope="module")
def site() -> Path:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--clean", "-d", str(SITE)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert "WARNING" not in done.stderr, done.stderr
    return SITE


def _text(path: Path) -> str:
    return html.unescape(re.sub(r"<[^>]+>", " ", path.read_text(encoding="utf-8")))


def test_the_site_builds_strict_in_both_languages(site: Path) -> None:
    en, zh = _text(site / "index.html"), _text(site / "zh" / "index.html")
    assert "Getting started" in en
    assert "快速开始" in zh
    assert "编程智能体" in zh  # the navigation is translated too
    # a Chinese paragraph wrapped in its Markdown reads without a space where a line broke
    assert "在每个坏掉的\n提供方上" in (ROOT / "docs" / "index.zh.md").read_text(encoding="utf-8")
    assert "在每个坏掉的提供方上" in zh
    # search finds Chinese words: the index cuts Chinese text into them (zero-width spaces)
    index = json.loads((site / "search" / "search_index.json").read_text(encoding="utf-8"))
    chinese = " ".join(d["text"] for d in index["docs"] if d["location"].startswith("zh/"))
    assert "\u200b故障\u200b" in chinese
    assert r"\u200b" in index["config"]["separator"]
    # every page of docs/ is in both languages' sites (a missing translation shows the English)
    pages = [p.relative_to(ROOT / "docs") for p in (ROOT / "docs").rglob("*.md")]
    for page in pages:
        if page.name.endswith(".zh.md"):
            continue
        built = (
            page.with_suffix("") / "index.html"
            if page.stem != "index"
            else page.with_suffix(".html")
        )
        assert (site / built).exists(), built
        assert (site / "zh" / built).exists(), built


def test_what_a_reader_looks_for_is_in_the_site(site: Path) -> None:
    from agent_reach import catalog
    from agent_reach.cli import main
    from agent_reach.config.provider import Provider
    from agent_reach.core.trace import Reason

    reference = _script("reference")
    text = {
        lang: " ".join(
            _text(p) for p in root.rglob("*.html") if lang == "zh" or "zh" not in p.parts
        )
        for lang, root in (("en", site), ("zh", site / "zh"))
    }
    serve = main.commands["serve"]
    metrics = re.findall(r"`(agent_reach_[a-z_]+)`", reference.metrics_page())
    wanted = {
        "catalog providers": [e.name for e in catalog.load()],
        "serve options": [o for p in serve.params for o in p.opts if o.startswith("--")],
        "provider fields": [f.alias or name for name, f in Provider.model_fields.items()],
        "reasons": [r.value for r in Reason],
        "metrics": metrics,
    }
    assert len(metrics) >= 14
    for lang, words in text.items():
        for what, names in wanted.items():
            missing = [
                n for n in names if not re.search(rf"(?<![\w-]){re.escape(n)}(?![\w-])", words)
            ]
            assert not missing, (lang, what, missing)


@pytest.fixture
def served(site: Path) -> Iterator[str]:
    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    class Quiet(http.server.ThreadingHTTPServer):
        def handle_error(self, request: object, client_address: object) -> None:
            pass  # a browser that closes early is no failure of the site

    server = Quiet(("127.0.0.1", 0), functools.partial(Handler, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.browser
def test_chromium_shows_the_title_and_navigation(served: str, site: Path, tmp_path: Path) -> None:
    from .services import chromium_flags, dumped_dom

    shots = site / "screenshots"
    shots.mkdir(exist_ok=True)
    pages = {
        "home": ("/", "agent-reach", "Getting started"),
        "config-reference": ("/reference/config/", "Config fields - agent-reach", "Reason table"),
        "home-zh": ("/zh/", "首页 - agent-reach", "快速开始"),
    }
    for name, (path, title, nav) in pages.items():
        dom = dumped_dom(tmp_path, served + path, budget_ms=2000)
        got = re.search(r"<title>([^<]*)</title>", dom)
        assert got, path
        assert got.group(1) == title, path
        assert 'class="md-nav md-nav--primary"' in dom, path
        navigation = dom.split('class="md-nav md-nav--primary"', 1)[1]
        navigation = navigation.split('class="md-content"', 1)[0]
        assert nav in html.unescape(navigation), path
        shot = shots / f"{name}.png"
        subprocess.run(
            [
                *chromium_flags(tmp_path, 2000),
                "--window-size=1280,900",
                f"--screenshot={shot}",
                served + path,
            ],
            capture_output=True,
            timeout=60,
            check=True,
        )
        pixels = read_png(shot)
        assert len(pixels) == 900
        assert len(pixels[0]) == 1280
        # not blank: a page with a header bar, text and a navigation has many colours
        assert len({px for row in pixels[::20] for px in row[::20]}) > 8, name
