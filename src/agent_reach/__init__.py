"""agent-reach: a small, fast failover router for LLM chat APIs.

    from agent_reach import Router, AllProvidersFailed, ConfigError

Names are imported on first use, so that `agent-reach --help` starts without loading the HTTP
stack.

"protocol §N" in the package's docstrings and comments means §N of docs/protocol.md, the
contract agent-reach implements; docs/architecture.md maps the package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .version import __version__

if TYPE_CHECKING:
    from .config import Config
    from .core.errors import (
        AgentReachError,
        AllProvidersFailed,
        ConfigError,
        RequestError,
        StreamInterrupted,
    )
    from .core.trace import Attempt, Reason, Result
    from .engine.stream import ChatStream
    from .router import Router

__all__ = [
    "AgentReachError",
    "AllProvidersFailed",
    "Attempt",
    "ChatStream",
    "Config",
    "ConfigError",
    "Reason",
    "RequestError",
    "Result",
    "Router",
    "StreamInterrupted",
    "__version__",
]

_HOMES = {
    "Router": "router",
    "ChatStream": "engine.stream",
    "Config": "config",
    "Attempt": "core.trace",
    "Reason": "core.trace",
    "Result": "core.trace",
    "AgentReachError": "core.errors",
    "AllProvidersFailed": "core.errors",
    "ConfigError": "core.errors",
    "RequestError": "core.errors",
    "StreamInterrupted": "core.errors",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'agent_reach' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f".{home}", __name__), name)
