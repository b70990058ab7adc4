"""The proxy's own section of the config (protocol §2.2 `server`): where it listens, who may
call it, and the limits that keep one client from taking what the others need."""

from __future__ import annotations

import ipaddress
from typing import Annotated

from pydantic import Field, field_validator, model_validator

from .provider import Section


class ServerConfig(Section):
    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=0, le=65535)] = 8000
    api_keys_env: str | None = "AGENT_REACH_API_KEYS"
    max_body_bytes: Annotated[int, Field(gt=0)] = 4 * 1024 * 1024
    responses_ttl_s: Annotated[float, Field(gt=0)] = 86400.0  # stored Responses-API answers
    # ... how many of them the store keeps, in all and per client key (oldest evicted)
    responses_max_count: Annotated[int, Field(gt=0)] = 10000
    responses_max_bytes: Annotated[int, Field(gt=0)] = 256 * 2**20
    responses_key_max_count: Annotated[int, Field(gt=0)] = 1000
    responses_key_max_bytes: Annotated[int, Field(gt=0)] = 64 * 2**20
    # Client connections (protocol §14): idle keep-alive, receiving one request's head and body,
    # a streaming client that reads nothing, and how many connections are open at once.
    keepalive_timeout_s: Annotated[float, Field(gt=0)] = 75.0
    first_byte_timeout_s: Annotated[float, Field(gt=0)] = 5.0  # a new connection's first byte
    request_timeout_s: Annotated[float, Field(gt=0)] = 30.0
    client_write_timeout_s: Annotated[float, Field(gt=0)] = 60.0
    max_connections: Annotated[int, Field(gt=0)] = 10000
    # A request's line and headers together (nginx's default; an unfinished head holds this
    # much at most): past it 431. Below 1 KB no client's head fits; above 1 MiB the 128 lines
    # of 8 KB allowed come first.
    max_head_bytes: Annotated[int, Field(ge=1024, le=2**20)] = 32 * 1024
    # Request heads one client address may have unfinished at once (nginx's `limit_conn`): past
    # it 429, so that heads sent a byte at a time cannot fill `max_connections` (issue 47).
    max_pending_heads_per_ip: Annotated[int, Field(gt=0)] = 32
    # Requests under way at once per client key (with client auth off, per client address):
    # past it 429, so that one key cannot take the upstream connections every other key needs.
    max_requests_per_key: Annotated[int, Field(gt=0)] = 256
    # Exchanges with providers at once (this process's upstream client, the library's and the
    # CLI's too), and at most so many of them with one origin (scheme, host, port): one slow
    # provider cannot take the slots every other one needs. A wait for a free one is bounded by
    # the provider's connect timeout, then counts as its `timeout`.
    max_upstream_connections: Annotated[int, Field(gt=0)] = 4096
    max_upstream_per_origin: Annotated[int, Field(gt=0)] = 1024
    # A WebSocket (a route that upgrades to one): closed after this long with no frame, and
    # after this long in all (OpenAI's Responses WebSocket lives an hour); a message over
    # `websocket_max_message_bytes` is closed 1009 (OpenAI's limit: 16 MiB); one within it is a
    # request, held to `max_body_bytes` as any (an error message on the socket past it).
    websocket_idle_s: Annotated[float, Field(gt=0)] = 900.0
    websocket_max_s: Annotated[float, Field(gt=0)] = 3600.0
    websocket_max_message_bytes: Annotated[int, Field(gt=0)] = 16 * 1024 * 1024
    # The `anthropic-beta` flags a Messages client may pass to `format: anthropic` providers
    # (its only header that is forwarded); `"*"` for any.
    anthropic_betas: list[str] = [
        "claude-code-20250219",
        "interleaved-thinking-2025-05-14",
        "fine-grained-tool-streaming-2025-05-14",
        "context-management-2025-06-27",
        "token-efficient-tools-2025-02-19",
        "prompt-caching-2024-07-31",
        "output-128k-2025-02-19",
        "context-1m-2025-08-07",
        "token-counting-2024-11-01",
        # Claude Code 2.1.332's (issue 50, item 4)
        "thinking-token-count-2026-05-13",
        "advanced-tool-use-2025-11-20",
        "server-side-fallback-2026-07-01",  # with `fallbacks`, which only Anthropic's API gets
    ]
    # Hops (addresses or networks) whose X-Forwarded-Proto is believed: TLS ends there.
    trusted_proxies: list[str] = []

    @field_validator("trusted_proxies")
    @classmethod
    def _networks(cls, value: list[str]) -> list[str]:
        for item in value:
            ipaddress.ip_network(item, strict=False)  # ValueError: named in the config error
        return value

    @model_validator(mode="after")
    def _upstream_share(self) -> ServerConfig:
        if self.max_upstream_per_origin > self.max_upstream_connections:
            raise ValueError(
                f"max_upstream_per_origin ({self.max_upstream_per_origin}) is above"
                f" max_upstream_connections ({self.max_upstream_connections})"
            )
        return self
