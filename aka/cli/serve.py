"""``aka serve`` (the REST service) and ``aka token create`` (its bearer tokens).

Exit codes: ``aka serve`` 0 after Ctrl-C, 2 bad settings (also ``--ray`` without Ray installed,
with an unreachable cluster, or with a ``ray://`` address and the SQLite store); ``aka token
create`` 0 with the token as the last word of its last line, 2 unknown scopes.
"""

from __future__ import annotations

from typing import Annotated

import typer

from aka.cli.state import settings_from

__all__ = ["serve", "token_app"]

token_app = typer.Typer(help="Manage the service's bearer tokens.", no_args_is_help=True)


def serve(
    ctx: typer.Context,
    host: Annotated[str | None, typer.Option("--host", help="Listen address.")] = None,
    port: Annotated[int | None, typer.Option("--port", help="Listen port.")] = None,
    workers: Annotated[
        str | None, typer.Option("--workers", help="Job slots: 'auto' (one per GPU) or a count.")
    ] = None,
    no_jobs: Annotated[
        bool, typer.Option("--no-jobs", help="Serve the API only; another process runs jobs.")
    ] = False,
    ray: Annotated[
        str | None,
        typer.Option(
            "--ray",
            metavar="ADDRESS",
            help="Run the job slots as Ray actors, one per GPU of this cluster: 'auto', "
            "'host:port' or 'ray://host:port' (pip install 'aka[ray]').",
        ),
    ] = None,
) -> None:
    """Serve the REST API (FastAPI on uvicorn) and run its jobs, one slot per GPU (or Ray actor)."""
    from aka.core.console import setup_logging
    from aka.service import serve as run_service

    settings = settings_from(ctx)
    update: dict[str, object] = {}
    if host is not None:
        update["host"] = host
    if port is not None:
        update["port"] = port
    if workers is not None:
        update["workers"] = workers if workers == "auto" else int(workers)
    if ray is not None:
        update["ray_address"] = ray
    service = settings.service.model_validate(settings.service.model_dump() | update)
    setup_logging("INFO")
    run_service(settings.model_copy(update={"service": service}), run_jobs=not no_jobs)


@token_app.command("create")
def create(
    ctx: typer.Context,
    scopes: Annotated[
        str, typer.Option("--scopes", help="Comma-separated: read, submit, custom-code, admin.")
    ] = "read,submit",
    name: Annotated[str, typer.Option("--name", help="A label to recognise it by.")] = "cli",
) -> None:
    """Create a bearer token; it is shown once (only its hash is stored)."""
    from aka.service import create_token, open_store, parse_scopes

    settings = settings_from(ctx)
    token, row = create_token(open_store(settings.service), name, parse_scopes(scopes))
    typer.echo(f"token {row.id} ({name}) with scopes {','.join(sorted(row.scopes))}:")
    typer.echo(token)
