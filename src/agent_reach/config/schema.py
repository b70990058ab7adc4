"""The config file's JSON Schema (`agent-reach config schema`), each field described.

The descriptions are `fields.yaml`'s, by section (a model's name in the schema) and field: the
models stay as short as the code needs them, and editors and the configuration reference
(generated from this schema) read the same words.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from .model import Config

DESCRIBED = Path(__file__).with_name("fields.yaml")


def sections(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The schema's sections by name: `Config` (the file's top level) and every model in it."""
    return {"Config": doc, **doc.get("$defs", {})}


def document() -> dict[str, Any]:
    """The JSON Schema of the config file, with `fields.yaml`'s descriptions."""
    doc = Config.model_json_schema(by_alias=True)
    described: dict[str, dict[str, str]] = yaml.safe_load(DESCRIBED.read_text(encoding="utf-8"))
    for name, section in sections(doc).items():
        words = described.get(name, {})
        for field, prop in section.get("properties", {}).items():
            if field in words:
                prop["description"] = words[field]
    doc["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    doc["title"] = "agent-reach config"
    return doc
