"""Embeddings in the config file (protocol §2.4): the embedding spaces, and what each provider
serves of them. A space is one model's vectors at one width; failover stays inside one, since
two models' vectors are not comparable even at the same width (PROVIDERS.md).

    embeddings:
      spaces:
        bge-m3: {dimensions: 1024, aliases: ["BAAI/bge-m3"]}
    providers:
      - name: siliconflow
        endpoint: https://api.siliconflow.cn/v1/chat/completions
        embeddings: {models: {bge-m3: "BAAI/bge-m3"}}
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Annotated

from pydantic import Field

from .describe import did_you_mean
from .provider import Name, Provider, Section, Width


class Space(Section):
    """One embedding space: its width, the other names a request may call it by, whether its
    vectors are returned unit-length, and the spaces a request may fall back to (opt-in: an
    answer from one of them says so)."""

    dimensions: Width
    aliases: list[Annotated[str, Field(min_length=1)]] = []
    normalized: bool = False
    fallback_spaces: list[Name] = []


class EmbeddingsConfig(Section):
    """The top-level `embeddings:` section: the spaces, and how much one request may ask for
    (inputs, and numbers in its answer: inputs × the widest space it may be answered in)."""

    spaces: dict[Name, Space] = {}
    max_inputs: Annotated[int, Field(gt=0)] = 2048  # OpenAI's own limit
    max_values: Annotated[int, Field(gt=0)] = 2048 * 4096


# What a config with no embedding space is told, where a space is asked for (the chat hint,
# `model_map`, does not apply: a space is one model's vectors, never mapped to another's).
NO_SPACES = (
    "none is configured: add `embeddings: {spaces: {NAME: {dimensions: WIDTH}}}` and, to a "
    "provider that serves it, `embeddings: {models: {NAME: <its model>}}` "
    '(docs/providers.md, "Embeddings endpoints")'
)


def known_spaces(spaces: Mapping[str, Space]) -> str:
    """The configured spaces' names, or how to configure one."""
    return ", ".join(sorted(spaces)) or NO_SPACES


def names_of(spaces: Mapping[str, Space], providers: Iterable[Provider]) -> dict[str, str]:
    """Each name a request may give a space (its own and its aliases) and that space;
    ValueError when a name names two, a fallback or a provider's space is no space, or a
    space is served by no provider."""
    names: dict[str, str] = {}
    for name, space in spaces.items():
        for other in [name, *space.aliases]:
            taken = names.setdefault(other, name)
            if taken != name:
                raise ValueError(f"embeddings.spaces.{name}: {other!r} names space {taken!r} too")
        for fallback in space.fallback_spaces:
            if fallback not in spaces or fallback == name:
                raise ValueError(
                    f"embeddings.spaces.{name}.fallback_spaces: no other space named "
                    f"{fallback!r}{did_you_mean(fallback, set(spaces) - {name})}"
                )
    served: set[str] = set()
    for i, p in enumerate(providers):
        for given in p.embeddings.models if p.embeddings else ():
            if given not in spaces:
                raise ValueError(
                    f"providers[{i}] ({p.name}): embeddings.models: no space named "
                    f"{given!r} in embeddings.spaces{did_you_mean(given, set(spaces))}"
                )
            served.add(given)
    for name in spaces.keys() - served:
        raise ValueError(
            f"embeddings.spaces.{name}: no provider serves it (name it in a provider's "
            "embeddings.models)"
        )
    return names


def token_spaces(providers: Iterable[Provider]) -> frozenset[str]:
    """The spaces one of whose providers takes inputs as token ids (`token_input`)."""
    return frozenset(
        space
        for p in providers
        if p.embeddings and p.embeddings.token_input
        for space in p.embeddings.models
    )
