"""The REST service: FastAPI app, SQLite job store, job slots (one per GPU), bearer-token auth.

Public API: ``create_app`` (the ASGI app), ``JobStore``, ``Dispatcher`` (runs queued jobs),
``create_token`` and ``serve`` (app and dispatcher together under uvicorn). Must not contain
optimization logic: jobs call ``aka.agent`` and ``aka.bench`` in their own processes.
"""

from __future__ import annotations

from aka.service.app import create_app
from aka.service.auth import SCOPES, create_token, parse_scopes
from aka.service.serve import serve, store_path
from aka.service.store import JobStatus, JobStore, open_store
from aka.service.worker import Dispatcher, gpu_slots

__all__ = [
    "SCOPES",
    "Dispatcher",
    "JobStatus",
    "JobStore",
    "create_app",
    "create_token",
    "gpu_slots",
    "open_store",
    "parse_scopes",
    "serve",
    "store_path",
]
