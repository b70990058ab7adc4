"""The `agent-reach` command line (protocol §11).

Start-up stays light: this module imports only click; each command imports what it needs when
it runs. Exit codes: 0 ok, 1 all providers failed (or none usable), 2 usage or config error.
With `--json`, stdout carries JSON only, failures included (`{"error": {...}}`).
"""

from __future__ import annotations

import click

from ..version import PROTOCOL_VERSION, __version__


def _set_config(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value is not None:
        ctx.ensure_object(dict)["config_path"] = value


def _with_config_option(command: click.Command) -> None:
    """Let `--config` follow the subcommand too (`agent-reach chat --config x.yaml`)."""
    if not any("--config" in p.opts for p in command.params):
        command.params.append(
            click.Option(
                ["--config"],
                type=click.Path(dir_okay=False),
                expose_value=False,
                callback=_set_config,
                help="Config file (also accepted before the command).",
            )
        )
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            _with_config_option(sub)


class _Main(click.Group):
    """The root group: its global options are accepted after any subcommand as well."""

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        _with_config_option(cmd)
        super().add_command(cmd, name)


@click.group(cls=_Main, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(
    __version__,
    "-V",
    "--version",
    prog_name="agent-reach",
    message=f"%(prog)s %(version)s (protocol {PROTOCOL_VERSION})",
)
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    envvar=None,
    help="Config file (default: $AGENT_REACH_CONFIG, then ~/.agent-reach/config.yaml).",
)
@click.pass_context
def main(ctx: click.Context, config_path: str | None) -> None:
    """agent-reach: when one LLM provider fails, the next one answers."""
    ctx.obj = {"config_path": config_path}


def _register() -> None:
    from . import (
        chat,
        check,
        config_cmd,
        demo,
        drill,
        embed,
        init_cmd,
        probe,
        providers,
        report,
        run,
        serve,
        setup,
    )

    for command in (
        chat.chat,
        check.check,
        config_cmd.config,
        demo.demo,
        drill.drill,
        embed.embed,
        init_cmd.init,
        probe.probe,
        providers.providers,
        serve.serve,
        report.report,
        report.status,
        report.caps,
        run.run,
        setup.setup,
    ):
        main.add_command(command)


_register()
