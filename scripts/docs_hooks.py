"""MkDocs hooks (mkdocs.yml `hooks:`): a Chinese page's paragraphs are wrapped at 100 columns in
their Markdown like every other, and a line break inside one renders as a space, which Chinese
text does not have between its characters. Line breaks between two Chinese characters (or
full-width punctuation) are joined before the page is rendered, outside code."""

from __future__ import annotations

import re
from typing import Any

_WIDE = "\u3000-\u303f\u4e00-\u9fff\uff00-\uffef"  # CJK punctuation, ideographs, full-width forms
_BREAK = re.compile(rf"(?<=[{_WIDE}])\n[ \t]*(?=[{_WIDE}])")
_CODE = re.compile(r"(^```.*?^```)", re.S | re.M)


def join_wide_lines(markdown: str) -> str:
    """`markdown` with each line break between two wide characters removed, code untouched."""
    parts = _CODE.split(markdown)
    return "".join(part if i % 2 else _BREAK.sub("", part) for i, part in enumerate(parts))


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    if page.file.src_uri.endswith(".zh.md"):
        return join_wide_lines(markdown)
    return markdown
