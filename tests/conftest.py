from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from .services import RedisServer
from .upstream import Upstream

SCHEMAS = json.loads((Path(__file__).parent / "data" / "openai-chat-schemas.json").read_text())


def _validator(name: str) -> Draft202012Validator:
    return Draft202012Validator({"$ref": f"#/$defs/{name}", "$defs": SCHEMAS["$defs"]})


COMPLETION = _validator("CreateChatCompletionResponse")
CHUNK = _validator("CreateChatCompletionStreamResponse")
ERROR = _validator("ErrorResponse")


def assert_valid(validator: Draft202012Validator, body: Any) -> None:
    errors = sorted(validator.iter_errors(body), key=str)
    assert not errors, [f"{list(e.path)}: {e.message}" for e in errors]


@pytest.fixture(scope="session")
def upstream() -> Iterator[Upstream]:
    server = Upstream()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def up(upstream: Upstream) -> Upstream:
    upstream.clear()
    return upstream


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.kill()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """A running, empty Redis."""
    if redis_server.proc is None:  # a test killed it
        redis_server.start()
    redis_server.flush()
    return redis_server.url
