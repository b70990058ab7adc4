"""`agent-reach embed`: texts to vectors through the providers of one embedding space."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from .exits import expected_errors, fail
from .render import print_json

if TYPE_CHECKING:
    from ..router import Router


@click.command()
@click.argument("texts", nargs=-1)
@click.option("--model", "-m", help="The embedding space, or an alias (default: the only one).")
@click.option("--json", "as_json", is_flag=True, help="Print the whole response and trace as JSON.")
@click.option("--verbose", "-v", is_flag=True, help="Print each attempt to stderr as it happens.")
@click.pass_obj
@expected_errors
def embed(
    obj: dict[str, Any], texts: tuple[str, ...], model: str | None, as_json: bool, verbose: bool
) -> None:
    """Embed TEXTS (default: each non-empty line of stdin); print one vector per line as a JSON
    array, in input order (exit 0), or every failed attempt (exit 1)."""
    inputs = list(texts)
    if not inputs:
        if sys.stdin is None or sys.stdin.isatty():
            fail("give texts as arguments or one per line on standard input", 2)
        inputs = [line for line in sys.stdin.read().splitlines() if line.strip()]
    if not inputs:
        fail("there is nothing to embed", 2)
    from ..router import Router

    router = Router.from_config(obj["config_path"])
    if model is None:
        from ..config.embeddings import known_spaces

        spaces = router.config.embeddings.spaces
        if len(spaces) != 1:
            fail(f"name the embedding space with --model (spaces: {known_spaces(spaces)})", 2)
        model = next(iter(spaces))
    if verbose:
        from .chat import Narrator

        router.subscribe(Narrator(router, False))
    import asyncio

    asyncio.run(_embed(router, {"model": model, "input": inputs}, as_json, verbose))


async def _embed(router: Router, request: dict[str, Any], as_json: bool, verbose: bool) -> None:
    try:
        result = await router.aembed(request)
    finally:
        await router.aclose()
    answer = result.response
    if as_json:
        trace = [a.to_dict() for a in result.trace]
        print_json({"response": answer, "provider": result.provider, "trace": trace})
        return
    import orjson

    out = sys.stdout.buffer
    for item in answer["data"]:
        out.write(orjson.dumps(item["embedding"]) + b"\n")
    out.flush()
    if verbose:
        width = len(answer["data"][0]["embedding"])
        click.echo(
            f"{len(answer['data'])} vector(s) of {width} from {result.provider} "
            f"(space {answer['model']})",
            err=True,
        )
