"""Typed progress events (STYLE G4): lower layers emit them, the CLI and service render them.

Must not import ``rich.progress`` or any UI.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ProgressCallback", "ProgressEvent", "emit"]


@dataclass(frozen=True)
class ProgressEvent:
    """One step of long work.

    Attributes:
        source: The component emitting it (``bench``, ``agent``, ``kb``).
        stage: The phase (``screen``, ``reference``, ``correctness``, ``timing``...).
        message: One human line.
        done: Units completed so far, when countable.
        total: Units in all, when known.
        data: Small JSON-able details (shape id, verdict).
    """

    source: str
    stage: str
    message: str = ""
    done: int | None = None
    total: int | None = None
    data: dict[str, Any] = field(default_factory=dict)


ProgressCallback = Callable[[ProgressEvent], None]


def emit(callback: ProgressCallback | None, event: ProgressEvent) -> None:
    """Send ``event`` to ``callback`` if there is one."""
    if callback is not None:
        callback(event)
