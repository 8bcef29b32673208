"""``aka mcp`` (aka's tools as an MCP server on stdio) and ``aka tools openai-schema``.

Both are adapters over a running ``aka serve`` (see ``aka.tools``); this module only handles
arguments. Exit codes: ``aka mcp`` 0 when the MCP client closes stdin, 2 without a token or with
bad settings; ``aka tools openai-schema`` 0.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer

from aka.cli.state import settings_from

__all__ = ["app", "mcp"]

app = typer.Typer(help="aka's tools for other agent frameworks.", no_args_is_help=True)


@app.command("openai-schema")
def openai_schema() -> None:
    """Print the tools as OpenAI function tools (the JSON list for `tools=`)."""
    from aka.tools import openai_tools

    typer.echo(json.dumps(openai_tools(), indent=2))


def mcp(
    ctx: typer.Context,
    url: Annotated[
        str | None,
        typer.Option("--url", help="The aka service's base URL (default: AKA_TOOLS__URL)."),
    ] = None,
    token: Annotated[
        str | None,
        typer.Option(
            "--token",
            help="Bearer token (default: AKA_TOOLS__TOKEN, which keeps it out of `ps`).",
        ),
    ] = None,
) -> None:
    """Serve aka's tools to an MCP client over stdio (aka_optimize, aka_evaluate, aka_kb_search)."""
    from aka.tools import run_mcp_stdio

    config = settings_from(ctx).tools
    update: dict[str, object] = {}
    if url is not None:
        update["url"] = url
    if token is not None:
        update["token"] = token
    run_mcp_stdio(config.model_validate(config.model_dump() | update))
