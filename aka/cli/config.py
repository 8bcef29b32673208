"""``aka config show``: print the effective settings, secrets masked."""

from __future__ import annotations

from typing import Annotated

import typer

from aka.cli.state import settings_from

__all__ = ["app"]

app = typer.Typer(help="Inspect settings.", no_args_is_help=True)


@app.command("show")
def show(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON on stdout.")] = False,
) -> None:
    """Show the effective settings (defaults < profile < .env < environment)."""
    from aka.core.console import out_console

    settings = settings_from(ctx)
    data = settings.model_dump(mode="json")  # SecretStr dumps as '**********'
    if as_json:
        out_console.print_json(data=data)
        return
    for section, values in data.items():
        out_console.print(f"[bold]{section}[/bold]")
        for key, value in values.items():
            out_console.print(f"  {key} = {value}", highlight=False)
