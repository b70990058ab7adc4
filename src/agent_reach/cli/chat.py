"""`agent-reach chat`: one request through the failover chain."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from .exits import expected_errors, fail
from .render import NDJSON, print_json

if TYPE_CHECKING:
    from ..core.events import Event
    from ..router import Router


@click.command()
@click.option("--model", "-m", help="Model to ask for (default: each provider's first model).")
@click.option("--prompt", "-p", help="The user message (default: read from stdin).")
@click.option("--route", "-r", help="A route name, or a provider to try first.")
@click.option("--system", "-s", "system_prompt", help="A system message.")
@click.option("--max-tokens", type=click.IntRange(min=1), help="Output token cap.")
@click.option("--temperature", type=click.FloatRange(min=0, max=2), help="Sampling temperature.")
@click.option("--stream", is_flag=True, help="Print the answer as it arrives.")
@click.option("--json", "as_json", is_flag=True, help="Print the whole response and trace as JSON.")
@click.option("--verbose", "-v", is_flag=True, help="Print each attempt to stderr as it happens.")
@click.option("--debug", is_flag=True, help="Also dump failed raw answers and provider configs.")
@click.pass_obj
@expected_errors
def chat(
    obj: dict[str, Any],
    model: str | None,
    prompt: str | None,
    route: str | None,
    system_prompt: str | None,
    max_tokens: int | None,
    temperature: float | None,
    stream: bool,
    as_json: bool,
    verbose: bool,
    debug: bool,
) -> None:
    """Send one chat request; print the answer (exit 0), or every failed attempt (exit 1)."""
    if prompt is None:
        if sys.stdin is None or sys.stdin.isatty():
            fail("give a prompt with --prompt or on standard input", 2)
        prompt = sys.stdin.read().strip()
    if not prompt:
        fail("the prompt is empty", 2)
    from ..router import Router

    router = Router.from_config(obj["config_path"])
    if verbose or debug:
        router.subscribe(Narrator(router, debug))
    messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
    messages.append({"role": "user", "content": prompt})
    request: dict[str, Any] = {"messages": messages}
    for key, value in (("model", model), ("max_tokens", max_tokens), ("temperature", temperature)):
        if value is not None:
            request[key] = value
    if route:
        request["agent_reach"] = {"provider_route": route}
    import asyncio

    if stream and as_json:
        click.get_current_context().meta[NDJSON] = True
    asyncio.run((_stream if stream else _once)(router, request, as_json))


async def _once(router: Router, request: dict[str, Any], as_json: bool) -> None:
    try:
        result = await router.achat(request)
    finally:
        await router.aclose()
    if as_json:
        print_json(
            {
                "response": result.response,
                "provider": result.provider,
                "trace": [a.to_dict() for a in result.trace],
            }
        )
        return
    msg = result.response["choices"][0]["message"]
    content = msg.get("content")
    if content:
        click.echo(content)
    else:
        print_json(msg.get("tool_calls"))


async def _stream(router: Router, request: dict[str, Any], as_json: bool) -> None:
    try:
        stream = await router.open_stream(request)
        out = sys.stdout
        async for chunk in stream:
            if as_json:  # one chunk per line (NDJSON)
                print_json(chunk)
                continue
            for choice in chunk["choices"]:
                text = choice["delta"].get("content")
                if text:
                    out.write(text)
                    out.flush()
        if not as_json:
            out.write("\n")
    finally:
        await router.aclose()


class Narrator:
    """`--verbose` / `--debug`: each attempt to stderr as it ends; with `--debug` (or a
    provider's `schema_compatibility.debug_mode`, for its `debug_reasons`) a failed one's raw
    answer and, once, the provider's config."""

    def __init__(self, router: Router, debug: bool) -> None:
        from .render import TraceLines

        self.router = router
        self.debug = debug
        self.lines = TraceLines()
        self.dumped: set[str] = set()

    def __call__(self, event: Event) -> None:
        from ..core.events import AttemptEvent

        if not isinstance(event, AttemptEvent):
            return
        a = event.attempt
        click.echo(self.lines.line(a), err=True)
        if not a.ok and (self.debug or self.router.debugged(a)):
            if event.raw:
                click.echo(f"  raw answer from {a.provider}:\n{_indent(event.raw)}", err=True)
            if a.provider not in self.dumped:
                self.dumped.add(a.provider)
                click.echo(
                    f"  config of {a.provider}:\n{_indent(self._config(a.provider))}", err=True
                )

    def _config(self, name: str) -> str:
        import orjson

        data = self.router.describe(name)
        return orjson.dumps(data, option=orjson.OPT_INDENT_2).decode()


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines())
