"""The REST service: FastAPI app, SQLite job store, job slots (one per GPU), bearer-token auth.

Public API: ``create_app`` (the ASGI app), ``JobStore``, ``Dispatcher`` (runs queued jobs on an
``Executor``'s slots: ``LocalExecutor`` processes here, or ``RayExecutor`` actors on a Ray
cluster), ``create_token`` and ``serve`` (app and dispatcher together under uvicorn). Must not
contain optimization logic: jobs call ``aka.agent`` and ``aka.bench`` in their own processes.
"""

from __future__ import annotations

from aka.service.app import create_app
from aka.service.auth import SCOPES, create_token, parse_scopes
from aka.service.ray_executor import RayExecutor
from aka.service.serve import serve, store_path
from aka.service.store import JobStatus, JobStore, open_store
from aka.service.worker import Dispatcher, Executor, LocalExecutor, gpu_slots, make_executor

__all__ = [
    "SCOPES",
    "Dispatcher",
    "Executor",
    "JobStatus",
    "JobStore",
    "LocalExecutor",
    "RayExecutor",
    "create_app",
    "create_token",
    "gpu_slots",
    "make_executor",
    "open_store",
    "parse_scopes",
    "serve",
    "store_path",
]
