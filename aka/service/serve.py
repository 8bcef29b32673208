"""Run the service: the app under uvicorn with the dispatcher's job slots beside it.

Owns process wiring only (start the slots, serve, stop the slots on shutdown). Must not hold
routes or job logic.
"""

from __future__ import annotations

import logging
from pathlib import Path

from aka.core import Settings
from aka.service.app import create_app
from aka.service.store import open_store
from aka.service.worker import Dispatcher

__all__ = ["serve", "store_path"]

logger = logging.getLogger(__name__)


def store_path(settings: Settings) -> Path:
    """The job store's SQLite file (when no ``database_url`` is set)."""
    return settings.service.resolved_data_dir() / "service.sqlite"


def serve(settings: Settings, *, run_jobs: bool = True) -> None:
    """Serve on ``settings.service.host:port`` until interrupted; run jobs unless told not to."""
    import uvicorn

    store = open_store(settings.service)
    dispatcher = Dispatcher(settings) if run_jobs else None
    if dispatcher is not None:
        dispatcher.start()
        logger.info("job slots: %s", dispatcher.executor.describe())
    try:
        uvicorn.run(
            create_app(settings, store),
            host=settings.service.host,
            port=settings.service.port,
            log_level="info",
        )
    finally:
        if dispatcher is not None:
            dispatcher.stop()
