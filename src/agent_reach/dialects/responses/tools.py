"""A Responses request's tools as chat function tools, by the name a chat provider sees
(namespaced and custom tools flattened), and back."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

_HOSTED = "tools"  # a hosted tool is named in `dropped` as `tools:<type>`


@dataclass(frozen=True, slots=True)
class Tool:
    """A client's tool as a chat provider sees it: a function. `custom` tools (free-form text
    input, such as Codex's `apply_patch` and `exec`) become functions of one string `input`;
    tools inside a `namespace` get the namespace in their chat name (`clock__sleep`), except
    for the default namespace `functions`."""

    name: str
    namespace: str | None = None
    custom: bool = False

    @property
    def chat_name(self) -> str:
        """The function name a chat provider sees (`[A-Za-z0-9_-]`, at most 64 long)."""
        plain = self.namespace in (None, "functions")
        full = self.name if plain else f"{self.namespace}__{self.name}"
        return re.sub(r"[^A-Za-z0-9_-]", "_", full)[:64]


def tool_items(body: dict[str, Any]) -> Iterator[Any]:
    """Each tool of the request: `tools`, and those of `additional_tools` input items (as
    Codex sends them)."""
    tools = body.get("tools")
    yield from tools if isinstance(tools, list) else ()
    items = body.get("input")
    for item in items if isinstance(items, list) else ():
        if isinstance(item, dict) and item.get("type") == "additional_tools":
            yield from item.get("tools") or ()


def flattened(tool: Any, namespace: str | None = None) -> Iterator[tuple[Tool, Any]]:
    """The function and custom tools in `tool` (a namespace holds several), with their
    definitions; a hosted tool is yielded as `tools:<type>` with no definition. `tool` is
    one `request_in` accepted."""
    kind = tool.get("type") if isinstance(tool, dict) else None
    if kind == "namespace":
        for inner in tool.get("tools") or ():
            yield from flattened(inner, str(tool.get("name") or ""))
    elif kind in ("function", "custom"):
        yield Tool(tool["name"], namespace, kind == "custom"), tool
    elif isinstance(kind, str):
        yield Tool(f"{_HOSTED}:{kind}"), None


def tool_map(body: dict[str, Any]) -> dict[str, Tool]:
    """Chat function name → the client's tool, for every function and custom tool."""
    return {
        tool.chat_name: tool
        for given in tool_items(body)
        for tool, spec in flattened(given)
        if spec is not None
    }
