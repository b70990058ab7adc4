from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from .fakes.embeddings import EmbeddingServer
from .fakes.upstream import Upstream
from .services import RedisServer

DATA = Path(__file__).parent / "data"
E2E = Path(__file__).parent / "e2e"
# What a test needs, by the fixtures it asks for (the rest say it with a `pytestmark`).
NEEDS = {"redis_server": "redis", "redis_url": "redis"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test by what it needs beyond Python (pyproject's markers): `make check` runs
    those that need none of it."""
    for item in items:
        if E2E in item.path.parents:
            item.add_marker(pytest.mark.e2e)
        for name in {NEEDS[f] for f in getattr(item, "fixturenames", ()) if f in NEEDS}:
            item.add_marker(getattr(pytest.mark, name))


SCHEMAS = json.loads((DATA / "openai-chat-schemas.json").read_text())
RESPONSES_SCHEMAS = json.loads((DATA / "openai-responses-schemas.json").read_text())


def _validator(name: str, schemas: dict[str, Any] = SCHEMAS) -> Draft202012Validator:
    return Draft202012Validator({"$ref": f"#/$defs/{name}", "$defs": schemas["$defs"]})


COMPLETION = _validator("CreateChatCompletionResponse")
CHUNK = _validator("CreateChatCompletionStreamResponse")
ERROR = _validator("ErrorResponse")
RESPONSE = _validator("Response", RESPONSES_SCHEMAS)
RESPONSE_EVENT = _validator("ResponseStreamEvent", RESPONSES_SCHEMAS)
RESPONSE_ERROR = _validator("ErrorResponse", RESPONSES_SCHEMAS)
FUNCTION_TOOL = _validator("FunctionTool", RESPONSES_SCHEMAS)


def _event_validators() -> dict[str, Draft202012Validator]:
    """A validator per Responses stream event type (the union's errors say little)."""
    defs = RESPONSES_SCHEMAS["$defs"]
    out = {}
    for ref in defs["ResponseStreamEvent"]["anyOf"]:
        name = ref["$ref"].rsplit("/", 1)[1]
        for kind in defs[name].get("properties", {}).get("type", {}).get("enum", []):
            out[kind] = _validator(name, RESPONSES_SCHEMAS)
    return out


EVENT_TYPES = _event_validators()


def assert_valid_event(event: dict[str, Any]) -> None:
    """A Responses stream event valid against the official schema of its type."""
    assert event.get("type") in EVENT_TYPES, event.get("type")
    assert_valid(EVENT_TYPES[event["type"]], event)
    assert_valid(RESPONSE_EVENT, event)


def assert_valid(validator: Draft202012Validator, body: Any) -> None:
    errors = sorted(validator.iter_errors(body), key=str)
    assert not errors, [f"{list(e.path)}: {e.message}" for e in errors]


@pytest.fixture(scope="session")
def upstream() -> Iterator[Upstream]:
    server = Upstream()
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def embedding_fakes() -> Iterator[EmbeddingServer]:
    """The embedding fakes of every format (tests/fakes/embeddings.py), one server."""
    server = EmbeddingServer()
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
