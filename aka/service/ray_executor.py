"""Job slots as Ray actors (``aka serve --ray ADDRESS``): the dispatcher's executor on a cluster.

Owns connecting to the cluster, starting one ``JobActor`` per GPU (``num_gpus=1``; with no GPU in
the cluster, ``ServiceConfig.workers`` CPU actors), replacing an actor that died, and turning an
actor's outcome into the dispatcher's ``RunningJob``. Claiming, attempts, cancel and recovery stay
``aka.service.worker.Dispatcher``'s, as in local mode. Must not import ray at module import: it is
an optional dependency (``pip install 'aka[ray]'``).

Inside an actor a job runs as a local slot runs it: in a child process of its own
(``start_job_process``: its own process group, pinned to the actor's GPU), which writes its events
and its end to the server's store. Candidate code still runs only in that process's sandboxed
scorer workers, and a killed or crashed job leaves the actor serving.

The store must be reachable from the actors. With SQLite (a file on this host) every actor is
pinned to this host's Ray node, and a Ray Client address (``ray://``), whose actors run on other
hosts, is refused; a cluster of several hosts needs the PostgreSQL store (``database_url``).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import socket
import threading
import time
from typing import Any

from aka.core import ConfigError, Settings, apply_offline_defaults
from aka.service.worker import RunningJob, kill_job_process, start_job_process

__all__ = ["JobActor", "RayExecutor", "check_store_reach"]

logger = logging.getLogger(__name__)

#: Seconds before a slot whose actor failed to start tries a new one.
_RESTART_BACKOFF_S = 5.0
#: Seconds to wait for an actor to stop its job before it is killed instead.
_STOP_TIMEOUT_S = 30.0


def check_store_reach(settings: Settings) -> None:
    """Refuse a Ray Client address (``ray://``) with a SQLite store, which its actors cannot reach.

    Raises:
        ConfigError: ``ray_address`` starts with ``ray://`` and no ``database_url`` is set.
    """
    address = settings.service.ray_address or ""
    if address.startswith("ray://") and settings.service.database_url is None:
        sqlite = settings.service.resolved_data_dir() / "service.sqlite"
        raise ConfigError(
            f"--ray {address} (service.ray_address) connects through Ray Client, whose actors run "
            f"on other hosts and cannot write this server's SQLite store ({sqlite}); set "
            "service.database_url (AKA_SERVICE__DATABASE_URL=postgresql://...) to a PostgreSQL "
            "store every node reaches, or give the host:port of a cluster this host is a node of"
        )


def _import_ray() -> Any:
    try:
        import ray
    except ImportError as err:
        raise ConfigError(
            f"--ray (service.ray_address) needs Ray, which is not installed ({err}); "
            "pip install 'aka[ray]'"
        ) from err
    return ray


class JobActor:
    """One slot on the cluster (made a Ray actor by ``RayExecutor``): one job at a time.

    Each job runs in a child process (``start_job_process``), pinned to the actor's GPU (from
    ``ray.get_gpu_ids()``; a CPU actor hides every GPU). The actor is threaded
    (``max_concurrency=2``) so that ``stop`` can kill the job while ``run`` waits on it.
    """

    def __init__(self, settings: Settings) -> None:
        import ray

        apply_offline_defaults()  # the actor's environment is the cluster's, not the server's
        self.settings = settings
        self.gpu = ",".join(str(g) for g in ray.get_gpu_ids())  # "" hides every GPU
        os.environ["CUDA_VISIBLE_DEVICES"] = self.gpu
        self._ctx = multiprocessing.get_context("spawn")
        self._lock = threading.Lock()
        self._procs: dict[str, Any] = {}
        self._stopped: set[str] = set()  # a stop can come before its run has started the job

    def describe(self) -> dict[str, Any]:
        """Where this actor runs: its host, its pid and its GPU ("" for none)."""
        return {"host": socket.gethostname(), "pid": os.getpid(), "gpu": self.gpu}

    def run(self, job_id: str) -> int | None:
        """Run ``job_id`` in a child process to its end; return the process's exit code.

        None when the job was stopped before its process started.
        """
        with self._lock:
            if job_id in self._stopped:
                return None
        proc = start_job_process(self._ctx, self.settings, job_id, self.gpu)
        with self._lock:
            self._procs[job_id] = proc
            stopped = job_id in self._stopped
        try:
            if stopped:
                kill_job_process(proc)
            proc.join()
        finally:
            with self._lock:
                self._procs.pop(job_id, None)
                self._stopped.discard(job_id)
        code: int | None = proc.exitcode
        return code

    def stop(self, job_id: str) -> None:
        """Kill ``job_id``'s process group (at once, or as soon as its run starts it)."""
        with self._lock:
            self._stopped.add(job_id)
            proc = self._procs.get(job_id)
        if proc is not None:
            kill_job_process(proc)


class _RayJob:
    """A job running on one of ``RayExecutor``'s actors (a ``RunningJob``)."""

    def __init__(self, executor: RayExecutor, slot: int, actor: Any, job_id: str) -> None:
        self.executor, self.slot, self.actor, self.job_id = executor, slot, actor, job_id
        self.ref = actor.run.remote(job_id)
        self.outcome: str | None = None

    def wait(self, timeout_s: float) -> bool:
        ray = self.executor.ray
        done, _ = ray.wait([self.ref], timeout=timeout_s)
        if done and self.outcome is None:
            self.outcome = self._settle()
        return bool(done)

    def _settle(self) -> str:
        """Read how the job's process ended; an actor that failed is replaced."""
        ray = self.executor.ray
        try:
            return f"exit code {ray.get(self.ref)}"
        except ray.exceptions.RayActorError as err:
            logger.warning("the Ray actor of slot %d died: %s", self.slot, err)
            self.executor.replace(self.slot)
            return f"its Ray actor died: {type(err).__name__}"
        except ray.exceptions.RayError as err:
            logger.warning("the Ray actor of slot %d failed: %s", self.slot, err)
            self.executor.replace(self.slot)
            return f"its Ray actor failed: {type(err).__name__}"

    def kill(self) -> None:
        """Ask the actor to kill the job; kill the actor (and start another) if it cannot."""
        ray = self.executor.ray
        try:
            ray.get(self.actor.stop.remote(self.job_id), timeout=_STOP_TIMEOUT_S)
            done, _ = ray.wait([self.ref], timeout=_STOP_TIMEOUT_S)
            if done:
                self.outcome = self._settle()
                return
        except ray.exceptions.RayError as err:
            logger.warning("slot %d could not stop its job on its actor: %s", self.slot, err)
        self.executor.replace(self.slot)  # a dead actor's job dies with it (its watchdog)
        ray.wait([self.ref], timeout=_STOP_TIMEOUT_S)

    def death(self) -> str:
        return self.outcome or "unknown"


class RayExecutor:
    """Slots as Ray actors: one per GPU of the cluster (this host's node only with SQLite).

    Connects in ``open`` (``ray.init``); ``close`` kills the actors and disconnects. Each slot
    is touched only by its own dispatcher thread.
    """

    def __init__(self, settings: Settings) -> None:
        check_store_reach(settings)
        self.settings = settings
        self.address = settings.service.ray_address or "auto"
        self.ray: Any = None
        self._actor_class: Any = None
        self._options: dict[str, Any] = {}
        self._actors: list[Any] = []
        self._ready: list[Any] = []
        self._names: list[str | None] = []
        self._retry_at: list[float] = []

    def open(self) -> int:
        """Connect to the cluster and start the actors; return how many slots there are.

        Raises:
            ConfigError: Ray is not installed, or the cluster cannot be reached.
        """
        ray = self.ray = _import_ray()
        _check_answers(self.address)
        try:
            ray.init(address=self.address, namespace="aka", logging_level=logging.WARNING)
        except Exception as err:  # boundary: ray raises ConnectionError, ValueError, ...
            raise ConfigError(
                f"could not connect to the Ray cluster at {self.address!r} "
                f"(service.ray_address): {err}; start one with `ray start --head` or fix the "
                "address"
            ) from err
        gpus, strategy = self._placement()
        workers = self.settings.service.workers
        count = (gpus if workers == "auto" else int(workers)) if gpus else _count(workers)
        self._options = {
            "num_cpus": 1,
            "num_gpus": 1 if gpus else 0,
            "max_concurrency": 2,  # run and stop
            "max_restarts": 0,  # a dead actor is replaced by the dispatcher's slot, not by Ray
        }
        if strategy is not None:
            self._options["scheduling_strategy"] = strategy
        self._actor_class = ray.remote(JobActor)
        self._actors, self._ready = [None] * count, [None] * count
        self._names, self._retry_at = [None] * count, [0.0] * count
        for slot in range(count):
            self._start(slot)
        return count

    def _placement(self) -> tuple[int, Any]:
        """How many GPUs the slots may use, and where actors go (this node only with SQLite)."""
        ray = self.ray
        if self.settings.service.database_url is not None:
            return int(ray.cluster_resources().get("GPU", 0)), None
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        node_id = ray.get_runtime_context().get_node_id()
        node = next(n for n in ray.nodes() if n["NodeID"] == node_id)
        strategy = NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)
        return int(node["Resources"].get("GPU", 0)), strategy

    def _start(self, slot: int) -> None:
        actor = self._actor_class.options(**self._options).remote(self.settings)
        self._actors[slot], self._ready[slot] = actor, actor.describe.remote()
        self._names[slot] = None

    def replace(self, slot: int) -> None:
        """Kill the slot's actor (its running job dies with it) and start a new one."""
        self._kill(slot)
        self._start(slot)

    def _kill(self, slot: int) -> None:
        actor, self._actors[slot], self._names[slot] = self._actors[slot], None, None
        if actor is not None:
            try:
                self.ray.kill(actor, no_restart=True)
            except Exception:  # boundary: already gone
                logger.debug("slot %d: its actor was already gone", slot, exc_info=True)

    def describe(self) -> str:
        """The cluster address and the actors' kind."""
        kind = "gpu" if self._options.get("num_gpus") else "cpu"
        return f"{len(self._actors)} Ray actor(s) ({kind}) on the cluster at {self.address}"

    def is_ready(self, slot: int) -> bool:
        """Whether the slot's actor has started (a failed start is retried after a pause)."""
        if self._names[slot] is not None:
            return True
        if self._actors[slot] is None:
            if time.monotonic() < self._retry_at[slot]:
                return False
            self._start(slot)
        done, _ = self.ray.wait([self._ready[slot]], timeout=0)
        if not done:
            return False
        try:
            info = self.ray.get(done[0])
        except self.ray.exceptions.RayError:
            logger.exception("slot %d: its Ray actor did not start; retrying", slot)
            self._kill(slot)
            self._retry_at[slot] = time.monotonic() + _RESTART_BACKOFF_S
            return False
        gpu = f":gpu{info['gpu']}" if info["gpu"] else ""
        self._names[slot] = f"ray:{info['host']}:{info['pid']}:slot{slot}{gpu}"
        return True

    def worker_name(self, slot: int) -> str:
        """``ray:host:pid:slotN`` and the actor's GPU (once ``is_ready``)."""
        return self._names[slot] or f"ray:starting:slot{slot}"

    def launch(self, slot: int, job_id: str) -> RunningJob:
        """Run the job on the slot's actor."""
        actor = self._actors[slot]
        return _RayJob(self, slot, actor, job_id)

    def close(self) -> None:
        """Kill the actors and disconnect from the cluster."""
        if self.ray is None:
            return
        for slot in range(len(self._actors)):
            self._kill(slot)
        self.ray.shutdown()


def _check_answers(address: str) -> None:
    """Refuse a ``host:port`` where nothing listens (``ray.init`` would retry for minutes).

    Raises:
        ConfigError: The address is malformed or its port does not accept a connection.
    """
    if address in ("auto", "local") or address.startswith("ray://"):
        return  # ray finds (or refuses) these itself, quickly
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=5.0):
            pass
    except (OSError, ValueError) as err:
        raise ConfigError(
            f"no Ray cluster answers at {address!r} (service.ray_address): {err}; give the "
            "host:port of its head (`ray start --head --port PORT`), 'auto' for the cluster this "
            "host runs, or ray://host:port"
        ) from err


def _count(workers: int | str) -> int:
    return 1 if workers == "auto" else int(workers)
