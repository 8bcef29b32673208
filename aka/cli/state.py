"""Per-invocation CLI state shared by command groups (the parsed global options)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, cast

import typer

from aka.core import Settings, SpecError, load_settings

__all__ = ["CliState", "device_choice", "settings_from"]


@dataclass
class CliState:
    """Global options of one ``aka`` invocation."""

    config_path: str | None = None
    debug: bool = False


def settings_from(ctx: typer.Context) -> Settings:
    """Load settings honouring ``--config``."""
    state = ctx.find_object(CliState) or CliState()
    return load_settings(state.config_path)


def device_choice(device: str) -> Literal["auto", "cpu", "cuda"]:
    """Check a ``--device`` value: auto, cpu (Triton interpreter) or cuda."""
    if device not in ("auto", "cpu", "cuda"):
        raise SpecError(f"--device must be auto, cpu or cuda, not {device!r}", field="--device")
    return cast(Literal["auto", "cpu", "cuda"], device)
