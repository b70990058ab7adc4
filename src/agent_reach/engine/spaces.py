"""Embeddings across spaces (protocol §10.3): a request is walked among the providers of its
space; only when every one has failed, and only where the space lists `fallback_spaces`, among
those of the next space, whose answer says which space it is (its `model`). Vectors of a space
that is `normalized` are returned unit-length."""

from __future__ import annotations

from dataclasses import replace

from ..chat.embedding import EmbeddingAsk
from ..chat.request import ChatRequest
from ..config import Config
from ..config.embeddings import known_spaces
from ..core.errors import AllProvidersFailed, RequestError
from ..core.trace import Attempt, Result
from ..dialects.embeddings import unit
from .loop import Engine


def request_of(config: Config, ask: EmbeddingAsk) -> ChatRequest:
    """The engine's request for `ask`: in the space its model names, at that space's width
    (`RequestError`: no such space, or another width asked for)."""
    space = config.space_of(ask.model)
    if space is None:
        known = known_spaces(config.embeddings.spaces)
        raise RequestError(
            f"model {ask.model!r} is no embedding space of this proxy (spaces: {known})",
            status=404,
            param="model",
        )
    width = config.embeddings.spaces[space].dimensions
    _check_size(config, space, ask)
    if ask.tokens and not config.takes_tokens(space):
        raise RequestError(
            f"'input' holds token ids, and no provider of space {space!r} takes them: send "
            "the text (a provider takes token ids with embeddings.token_input)",
            param="input",
        )
    if ask.dimensions not in (None, width):
        raise RequestError(
            f"space {space!r} is {width} dimensions wide: 'dimensions' may only be {width} "
            "(vectors of another width are another space)",
            param="dimensions",
        )
    return ask.request(space, width)


def _check_size(config: Config, space: str, ask: EmbeddingAsk) -> None:
    """`RequestError` unless `ask` is within `embeddings.max_inputs` and its answer within
    `embeddings.max_values` numbers in the widest space it may be answered in."""
    limits, count = config.embeddings, len(ask.inputs)
    if count > limits.max_inputs:
        raise RequestError(
            f"'input' holds {count} items: at most {limits.max_inputs} go in one request "
            "(embeddings.max_inputs); send them in several",
            param="input",
        )
    spaces = limits.spaces
    widths = [spaces[s].dimensions for s in (space, *spaces[space].fallback_spaces)]
    if count * max(widths) > limits.max_values:
        raise RequestError(
            f"'input' holds {count} items of up to {max(widths)} dimensions: an answer holds "
            f"at most {limits.max_values} numbers (embeddings.max_values); send fewer items",
            param="input",
        )


async def embed(engine: Engine, config: Config, req: ChatRequest) -> Result:
    """The vectors of `req` from its space, else from its fallback spaces in order."""
    spaces = config.embeddings.spaces
    first = req.model or ""
    tried: list[Attempt] = []
    # Token ids are the first space's model's: another model would read other text from them.
    others = () if req.body.get("tokens") else spaces[first].fallback_spaces
    for space in [first, *others]:
        width = spaces[space].dimensions
        asked = (
            req
            if space == first
            else replace(req, model=space, body={**req.body, "dimensions": width})
        )
        try:
            result = await engine.embed(asked)
        except AllProvidersFailed as exc:
            tried += exc.attempts
            continue
        if spaces[space].normalized:
            for item in result.response["data"]:
                item["embedding"] = unit(item["embedding"])
        return replace(result, trace=[*tried, *result.trace])
    raise AllProvidersFailed(tried, model=first)
