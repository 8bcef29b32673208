"""Job slots: one per GPU, each running its jobs one at a time, each job in a fresh process.

Owns pulling jobs from the store, starting the job process (its own process group, pinned to the
slot's GPU with ``CUDA_VISIBLE_DEVICES``), cancelling it, and deciding what a dead job process
means: another attempt while the job has attempts left, else ``failed``. Must not contain
optimization logic (the job process calls ``ServiceConfig.runner``).

Where a slot's job process runs is its ``Executor``'s business: ``LocalExecutor`` starts it here,
one slot per visible GPU; ``aka.service.ray_executor.RayExecutor`` (``ServiceConfig.ray_address``)
starts it inside a Ray actor, one per GPU of a cluster. Claiming, attempts, cancel and recovery
are the ``Dispatcher``'s, the same for both.

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
from typing import Any, Protocol

from aka.core import MULTICAST_OFF_ENV, AkaError, Settings
from aka.service.store import JobStatus, JobStore, open_store

__all__ = [
    "Dispatcher",
    "Executor",
    "LocalExecutor",
    "RunningJob",
    "gpu_slots",
    "kill_job_process",
    "make_executor",
    "start_job_process",
]

logger = logging.getLogger(__name__)


def gpu_slots(workers: int | str) -> list[str | None]:
    """The GPU each slot pins (None: the CPU), from ``ServiceConfig.workers``.

    ``auto`` gives one slot per visible GPU (``aka.hardware.visible_gpus``: the entries of
    ``CUDA_VISIBLE_DEVICES`` as CUDA reads them, else the GPUs torch counts); no GPU gives one CPU
    slot. A number N gives N slots spread round-robin over the visible GPUs.
    """
    from aka.hardware import visible_gpus

    gpus = visible_gpus()
    if workers == "auto":
        return list(gpus) if gpus else [None]
    count = int(workers)
    if not gpus:
        return [None] * count
    return [gpus[i % len(gpus)] for i in range(count)]


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
    os.environ.update(MULTICAST_OFF_ENV)  # forced, as in every scorer worker
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


def start_job_process(ctx: Any, settings: Settings, job_id: str, gpu: str | None) -> Any:
    """Start ``job_id``'s process (its own process group, pinned to ``gpu``); return it.

    The one way a job process starts, here or inside a Ray actor. ``ctx`` is a ``spawn``
    multiprocessing context: the job process imports aka afresh, with no state of its parent.
    """
    proc = ctx.Process(
        # the Settings object itself (pickled over spawn's pipe): a JSON dump would mask its
        # secrets (the LLM key, the database URL)
        target=_job_main,
        args=(settings, job_id, gpu),
        daemon=False,
    )
    proc.start()
    return proc


def kill_job_process(proc: Any) -> None:
    """Kill a job process and its process group (the scorer's workers); wait for it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    proc.join(5.0)


class RunningJob(Protocol):
    """One job's process as its slot supervises it."""

    def wait(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for the job's process to end; return whether it has."""
        ...

    def kill(self) -> None:
        """Kill the job's process and its process group; return once they are gone."""
        ...

    def death(self) -> str:
        """How the ended process ended, for the job's error (``exit code 9``)."""
        ...


class Executor(Protocol):
    """Where a dispatcher's slots run their jobs' processes (local processes or Ray actors)."""

    def open(self) -> int:
        """Make the slots ready to take jobs (start actors...); return how many there are.

        Raises:
            ConfigError: The slots cannot be set up as configured (a missing extra, no cluster).
        """
        ...

    def describe(self) -> str:
        """The slots in a few words, for the log."""
        ...

    def is_ready(self, slot: int) -> bool:
        """Whether ``slot`` can take a job now (an actor still starting cannot)."""
        ...

    def worker_name(self, slot: int) -> str:
        """The worker a job claimed by ``slot`` records (``host:pid:slot0:gpu0``)."""
        ...

    def launch(self, slot: int, job_id: str) -> RunningJob:
        """Start ``job_id``'s process on ``slot``."""
        ...

    def close(self) -> None:
        """Release the slots, once no job runs on them."""
        ...


class _LocalJob:
    """A job process started by this process."""

    def __init__(self, proc: Any) -> None:
        self.proc = proc

    def wait(self, timeout_s: float) -> bool:
        self.proc.join(timeout_s)
        return not self.proc.is_alive()

    def kill(self) -> None:
        kill_job_process(self.proc)

    def death(self) -> str:
        return f"exit code {self.proc.exitcode}"


class LocalExecutor:
    """Slots on this host: one per visible GPU (``gpu_slots``), each job a child process here."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.gpus = gpu_slots(settings.service.workers)
        self._ctx = multiprocessing.get_context("spawn")

    def open(self) -> int:
        """Nothing to start: return the slot count."""
        return len(self.gpus)

    def describe(self) -> str:
        """The slots' GPUs (``gpu 0, gpu 1``) or ``cpu``."""
        return ", ".join(f"gpu {g}" if g is not None else "cpu" for g in self.gpus)

    def is_ready(self, slot: int) -> bool:
        """Always: a local slot needs no start."""
        return True

    def worker_name(self, slot: int) -> str:
        """``host:pid:slotN`` and the slot's GPU."""
        gpu = self.gpus[slot]
        return f"{socket.gethostname()}:{os.getpid()}:slot{slot}" + (f":gpu{gpu}" if gpu else "")

    def launch(self, slot: int, job_id: str) -> RunningJob:
        """Start the job's process here, pinned to the slot's GPU."""
        return _LocalJob(start_job_process(self._ctx, self.settings, job_id, self.gpus[slot]))

    def close(self) -> None:
        """Nothing to release."""


def make_executor(settings: Settings) -> Executor:
    """The executor ``settings`` asks for: Ray actors with ``ray_address``, else local processes.

    Raises:
        ConfigError: ``ray_address`` is a Ray Client address (``ray://``) and the store is SQLite.
    """
    if settings.service.ray_address:
        from aka.service.ray_executor import RayExecutor

        return RayExecutor(settings)
    return LocalExecutor(settings)


class Dispatcher:
    """Runs queued jobs on its executor's slots until ``stop``; safe to start beside the app."""

    def __init__(self, settings: Settings, executor: Executor | None = None) -> None:
        self.settings = settings
        self.executor = executor if executor is not None else make_executor(settings)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        """Recover jobs a stopped server left running, open the slots, start a thread per slot.

        Raises:
            ConfigError: The executor cannot open its slots.
        """
        recovered = open_store(self.settings.service).recover()
        if recovered:
            logger.info("re-queued %d job(s) left running: %s", len(recovered), recovered)
        for i in range(self.executor.open()):
            t = threading.Thread(target=self._loop, args=(i,), name=f"aka-slot-{i}")
            t.daemon = True
            t.start()
            self._threads.append(t)

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop taking jobs; running ones are stopped and re-queued (no attempt counted)."""
        self._stop.set()
        for t in self._threads:
            t.join(timeout_s)
        self.executor.close()

    def _loop(self, slot: int) -> None:
        store = open_store(self.settings.service)
        poll = self.settings.service.poll_interval_s
        while not self._stop.is_set():
            try:
                if not self.executor.is_ready(slot):
                    self._stop.wait(poll)
                    continue
                name = self.executor.worker_name(slot)
                job = store.claim(name, self.settings.service.max_attempts)
            except Exception:  # boundary: a store or cluster hiccup must not kill the slot
                logger.exception("slot %d could not claim a job", slot)
                self._stop.wait(poll * 10)
                continue
            if job is None:
                self._stop.wait(poll)
                continue
            try:
                running = self.executor.launch(slot, job.id)
            except Exception:  # boundary: the job did not start; not the job's fault
                logger.exception("slot %d could not start job %s", slot, job.id)
                store.recover_one(job.id)
                self._stop.wait(poll * 10)
                continue
            self._supervise(store, job.id, running)

    def _supervise(self, store: JobStore, job_id: str, running: RunningJob) -> None:
        poll = self.settings.service.poll_interval_s
        while not running.wait(poll):
            if self._stop.is_set():
                running.kill()
                store.recover_one(job_id)
                return
            if store.get(job_id).cancel_requested:
                running.kill()
                store.finish(job_id, JobStatus.CANCELLED, error="cancelled on request")
                return
        job = store.get(job_id)
        if job.status is not JobStatus.RUNNING:
            return  # the job process recorded its end
        how = running.death()
        if job.attempts >= self.settings.service.max_attempts:
            store.finish(
                job_id,
                JobStatus.FAILED,
                error=f"the job process died ({how}) on each of {job.attempts} "
                f"attempts; see the server log",
            )
        else:
            store.finish(
                job_id,
                JobStatus.QUEUED,
                error=f"attempt {job.attempts} died ({how}); retrying",
            )
