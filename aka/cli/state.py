"""Per-invocation CLI state shared by command groups (the parsed global options)."""

from __future__ import annotations

from dataclasses import dataclass

import typer

from aka.core import Settings, load_settings

__all__ = ["CliState", "settings_from"]


@dataclass
class CliState:
    """Global options of one ``aka`` invocation."""

    config_path: str | None = None
    debug: bool = False


def settings_from(ctx: typer.Context) -> Settings:
    """Load settings honouring ``--config``."""
    state = ctx.find_object(CliState) or CliState()
    return load_settings(state.config_path)
