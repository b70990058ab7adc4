"""The antique-identification transform from the original description (section 3): an API
that answers `{"item", "era", "confidence"}` becomes an OpenAI chat completion.

Used by `examples/antique.yaml` as `post_process_hook: hooks/antique.py:transform_antique_response`.
"""

from __future__ import annotations

from typing import Any


def transform_antique_response(raw: dict[str, Any]) -> dict[str, Any]:
    """`{"item": "青花瓷瓶", "era": "明永乐", "confidence": 0.92}` → a chat completion."""
    content = f"鉴定结果：{raw['item']}，年代：{raw['era']}，置信度：{raw['confidence'] * 100:.1f}%"
    return {
        "choices": [{"message": {"content": content}}],
        "model": "antique-v1",
        "object": "chat.completion",
    }
