"""aka.cli: the Typer command line; argument handling and rendering only."""

from aka.cli.main import app, main

__all__ = ["app", "main"]
