"""The ``aka`` command line (Typer): top-level options and the one place errors become exit codes.

Owns argument handling and rendering only (STYLE E6): an ``AkaError`` is printed as one red line
(tracebacks with ``--debug``); exit codes are part of the interface and listed per command.
"""

from __future__ import annotations

import logging
import sys
from typing import Annotated

import typer

from aka.cli import bench as bench_cmd
from aka.cli import config as config_cmd
from aka.cli import hardware as hardware_cmd
from aka.cli import kb as kb_cmd
from aka.cli import optimize as optimize_cmd
from aka.cli import serve as serve_cmd
from aka.cli import tools as tools_cmd
from aka.cli import trace as trace_cmd
from aka.cli.state import CliState
from aka.core import (
    AkaError,
    BenchError,
    ConfigError,
    IndexNotBuiltError,
    SpecError,
    apply_offline_defaults,
)

__all__ = ["app", "main"]

logger = logging.getLogger(__name__)

EXIT_USAGE = 2
EXIT_HARNESS = 3

app = typer.Typer(
    name="aka",
    help="aka: optimize GPU kernels and score them with a harness they cannot fool.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.add_typer(bench_cmd.app, name="bench")
app.add_typer(hardware_cmd.app, name="hardware")
app.add_typer(kb_cmd.app, name="kb")
app.add_typer(config_cmd.app, name="config")
app.add_typer(trace_cmd.app, name="trace")
app.command("optimize")(optimize_cmd.optimize)
app.command("serve")(serve_cmd.serve)
app.add_typer(serve_cmd.token_app, name="token")
app.add_typer(tools_cmd.app, name="tools")
app.command("mcp")(tools_cmd.mcp)


def _version(value: bool) -> None:
    if value:
        from aka import __version__

        typer.echo(f"aka {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    ctx: typer.Context,
    config: Annotated[
        str | None,
        typer.Option("--config", help="Settings profile: a YAML path or a name in configs/."),
    ] = None,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks and debug logs.")] = False,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")
    ] = False,
) -> None:
    """aka: optimize GPU kernels and score them with a harness they cannot fool."""
    from aka.core.console import setup_logging

    setup_logging("DEBUG" if debug else "WARNING")
    ctx.obj = CliState(config_path=config, debug=debug)


def _exit_code(err: AkaError) -> int:
    if isinstance(err, SpecError | ConfigError):
        return EXIT_USAGE
    if isinstance(err, BenchError | IndexNotBuiltError):
        return EXIT_HARNESS
    return 1


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns (and, as a console script, exits with) the exit code."""
    apply_offline_defaults()
    from aka.core.console import err_console

    args = sys.argv[1:] if argv is None else argv
    debug = "--debug" in args
    try:
        result = app(args=args, standalone_mode=False)
    except AkaError as err:
        if debug:
            err_console.print_exception()
        from rich.markup import escape

        err_console.print(
            f"[red]error[/red] {escape(f'[{err.code}] {err.message}')}", highlight=False
        )
        return _exit_code(err)
    except typer.Exit as done:
        return int(done.exit_code or 0)
    except typer.Abort:
        err_console.print("[red]aborted[/red]")
        return 130
    except (
        Exception
    ) as err:  # click's usage errors (typer may vendor click) and anything unexpected
        if callable(getattr(err, "show", None)) and isinstance(
            getattr(err, "exit_code", None), int
        ):
            err.show()  # type: ignore[attr-defined]
            return int(err.exit_code)  # type: ignore[attr-defined]
        logger.exception("unexpected error")
        err_console.print(
            f"[red]internal error[/red]: {type(err).__name__}: {err} (rerun with --debug)"
        )
        return EXIT_HARNESS
    return int(result or 0)
