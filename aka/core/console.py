"""Logging setup and the shared rich console (STYLE G1-G2).

Owns how entry points configure logging. Library modules only call ``logging.getLogger(__name__)``;
they never call ``setup_logging``.
"""

from __future__ import annotations

import logging
from typing import Literal

from rich.console import Console

__all__ = ["err_console", "out_console", "setup_logging"]

#: stdout carries results and ``--json``; everything for people goes to stderr.
out_console = Console(soft_wrap=True)
err_console = Console(stderr=True)


def setup_logging(level: str = "INFO", fmt: Literal["rich", "plain"] = "rich") -> None:
    """Configure the root logger once, for an entry point.

    Args:
        level: A logging level name.
        fmt: ``rich`` for the CLI (colour on stderr), ``plain`` for services and workers.
    """
    handler: logging.Handler
    if fmt == "rich":
        from rich.logging import RichHandler

        handler = RichHandler(console=err_console, show_path=False, rich_tracebacks=False)
        handler.setFormatter(logging.Formatter("%(message)s"))
    else:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    # The handler filters too: libraries that set their own logger to DEBUG (bm25s does)
    # would otherwise reach it through propagation.
    handler.setLevel(level.upper())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
