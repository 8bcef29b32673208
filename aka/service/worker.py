"""Job slots: one per GPU, each running its jobs one at a time, each job in a fresh process.

Owns pulling jobs from the store, starting the job process (its own process group, pinned to the
slot's GPU with ``CUDA_VISIBLE_DEVICES``), cancelling it, and deciding what a dead job process
means: another attempt while the job has attempts left, else ``failed``. Must not contain
optimization logic (the job process calls ``ServiceConfig.runner``).

A job process that raises an ``AkaError`` (bad problem, harness failure) fails its job at once: a
retry would fail the same way. A process that dies (a crash, a kill, out of memory) is retried.
"""

from __future__ import annotations

import importlib
import logging
import multiprocessing
import os
import signal
import socket
import threading
import traceback
from collections.abc import Callable
from typing import Any

from aka.core import AkaError, Settings
from aka.service.store import JobStatus, JobStore, open_store

__all__ = ["Dispatcher", "gpu_slots"]

logger = logging.getLogger(__name__)


def gpu_slots(workers: int | str) -> list[str | None]:
    """The GPU each slot pins (None: the CPU), from ``ServiceConfig.workers``.

    ``auto`` counts the GPUs named by ``CUDA_VISIBLE_DEVICES`` when it is set, else asks torch;
    no GPU gives one CPU slot.
    """
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        gpus = [g.strip() for g in visible.split(",") if g.strip() and g.strip() != "-1"]
    else:
        gpus = _torch_gpus()
    if workers == "auto":
        return list(gpus) if gpus else [None]
    count = int(workers)
    if not gpus:
        return [None] * count
    return [gpus[i % len(gpus)] for i in range(count)]


def _torch_gpus() -> list[str]:
    try:
        import torch

        return [str(i) for i in range(torch.cuda.device_count())]
    except Exception:  # no torch or no driver: CPU slots
        return []


def _resolve(path: str) -> Callable[..., dict[str, Any]]:
    module, _, name = path.partition(":")
    fn: Callable[..., dict[str, Any]] = getattr(importlib.import_module(module), name)
    return fn


def _job_main(settings: Settings, job_id: str, gpu: str | None) -> None:
    """The job process: pin the GPU, run the job, record its end (a crash records nothing)."""
    os.setsid()  # its own process group: a cancel kills the scorer's workers with it
    _die_with_parent()
    if gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    store = open_store(settings.service)
    job = store.get(job_id)
    try:
        result = _resolve(settings.service.runner)(settings, job, store)
    except AkaError as err:
        store.finish(job_id, JobStatus.FAILED, error=f"{err.code}: {err.message}")
        return
    except Exception as err:  # boundary: the job failed in a way aka did not foresee
        logger.error("job %s failed:\n%s", job_id, traceback.format_exc())
        store.finish(job_id, JobStatus.FAILED, error=f"internal: {type(err).__name__}: {err}")
        return
    store.finish(job_id, JobStatus.SUCCEEDED, result=result)


def _die_with_parent() -> None:
    """Kill this job's process group when the server that started it is gone.

    Otherwise a killed server leaves the job running unsupervised while the restarted server
    queues it again: two processes on one job.
    """
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            threading.Event().wait(0.5)
        os.killpg(0, signal.SIGKILL)

    threading.Thread(target=watch, name="aka-job-watchdog", daemon=True).start()


class Dispatcher:
    """Runs queued jobs on its slots until ``stop``; safe to start beside the app's server."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.slots = gpu_slots(settings.service.workers)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._ctx = multiprocessing.get_context("spawn")

    def start(self) -> None:
        """Recover jobs a stopped server left running, then start one thread per slot."""
        recovered = open_store(self.settings.service).recover()
        if recovered:
            logger.info("re-queued %d job(s) left running: %s", len(recovered), recovered)
        for i, gpu in enumerate(self.slots):
            t = threading.Thread(target=self._loop, args=(i, gpu), name=f"aka-slot-{i}")
            t.daemon = True
            t.start()
            self._threads.append(t)

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop taking jobs; running ones are stopped and re-queued (no attempt counted)."""
        self._stop.set()
        for t in self._threads:
            t.join(timeout_s)

    def _loop(self, index: int, gpu: str | None) -> None:
        store = open_store(self.settings.service)
        name = f"{socket.gethostname()}:{os.getpid()}:slot{index}" + (f":gpu{gpu}" if gpu else "")
        poll = self.settings.service.poll_interval_s
        while not self._stop.is_set():
            try:
                job = store.claim(name, self.settings.service.max_attempts)
            except Exception:  # boundary: a store hiccup must not kill the slot
                logger.exception("slot %s could not claim a job", name)
                self._stop.wait(poll * 10)
                continue
            if job is None:
                self._stop.wait(poll)
                continue
            self._supervise(store, job.id, gpu)

    def _supervise(self, store: JobStore, job_id: str, gpu: str | None) -> None:
        proc = self._ctx.Process(
            # the Settings object itself (pickled over spawn's pipe): a JSON dump would mask
            # its secrets (the LLM key, the database URL)
            target=_job_main,
            args=(self.settings, job_id, gpu),
            daemon=False,
        )
        proc.start()
        poll = self.settings.service.poll_interval_s
        while proc.is_alive():
            proc.join(poll)
            if not proc.is_alive():
                break
            if self._stop.is_set():
                _kill(proc)
                store.recover_one(job_id)
                return
            if store.get(job_id).cancel_requested:
                _kill(proc)
                store.finish(job_id, JobStatus.CANCELLED, error="cancelled on request")
                return
        job = store.get(job_id)
        if job.status is not JobStatus.RUNNING:
            return  # the job process recorded its end
        code = proc.exitcode
        if job.attempts >= self.settings.service.max_attempts:
            store.finish(
                job_id,
                JobStatus.FAILED,
                error=f"the job process died (exit code {code}) on each of {job.attempts} "
                f"attempts; see the server log",
            )
        else:
            store.finish(
                job_id,
                JobStatus.QUEUED,
                error=f"attempt {job.attempts} died (exit code {code}); retrying",
            )


def _kill(proc: Any) -> None:
    """Kill a job process and its process group (the scorer's workers)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    proc.join(5.0)
