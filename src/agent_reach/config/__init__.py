"""The config file (protocol §2), one job a module.

- `provider`: one provider's model, and the defaults its `format` fills;
- `model`: the whole file's model (`Config`) and its other sections;
- `load`: finding, reading, expanding and validating a file (`load_config`);
- `describe`: pydantic's errors as lines that name the file, provider and field;
- `write`: writing config files (`init`, `probe --write`, the catalog's entries).

The names below are the package's public ones: `from agent_reach.config import Config, …`.
"""

from __future__ import annotations

from .load import (
    DEFAULT_PATH,
    ENV_PATH,
    config_from_data,
    find_config_path,
    load_config,
    parse_text,
)
from .model import (
    Alert,
    AlertEvent,
    CircuitConfig,
    Config,
    EmailAlert,
    HealthConfig,
    LogAlert,
    RouteConfig,
    TracingConfig,
    WebhookAlert,
    zone_of,
)
from .provider import Provider, SchemaCompatibility, Timeout
from .server import ServerConfig

__all__ = [
    "DEFAULT_PATH",
    "ENV_PATH",
    "Alert",
    "AlertEvent",
    "CircuitConfig",
    "Config",
    "EmailAlert",
    "HealthConfig",
    "LogAlert",
    "Provider",
    "RouteConfig",
    "SchemaCompatibility",
    "ServerConfig",
    "Timeout",
    "TracingConfig",
    "WebhookAlert",
    "config_from_data",
    "find_config_path",
    "load_config",
    "parse_text",
    "zone_of",
]
