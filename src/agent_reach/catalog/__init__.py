"""The catalog of known provider endpoints (`entries`), and how `probe` recognises one that is
not in it (`recognize`)."""

from .entries import (
    LEVEL_MEANING,
    LEVELS,
    Entry,
    Level,
    embedding_space,
    get,
    load,
    parse,
    spaces,
)
from .recognize import (
    content_paths,
    endpoint_of_base,
    extracts,
    formats_for_answer,
    formats_for_url,
    level_of,
    ollama_base,
)

__all__ = [
    "LEVELS",
    "LEVEL_MEANING",
    "Entry",
    "Level",
    "content_paths",
    "embedding_space",
    "endpoint_of_base",
    "extracts",
    "formats_for_answer",
    "formats_for_url",
    "get",
    "level_of",
    "load",
    "ollama_base",
    "parse",
    "spaces",
]
