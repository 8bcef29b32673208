"""Evaluation slots: a round's candidates scored at once, one at a time per GPU.

A slot is one scorer pinned to one visible GPU (``Scorer(gpu_index=i)``, whose workers see that GPU
alone), or one CPU-interpreter scorer. ``plan_slots`` turns ``AgentConfig.workers`` into the visible
GPU indices to use; ``run_in_slots`` runs a list of jobs over the slots, each slot taking the next
job as soon as its last one ends, and returns the outcomes in the jobs' own order, so what a round
records does not depend on which evaluation finished first.

Progress events raised while a job runs (the scorer's, the agent's "scoring ..." line) are queued
and handed to the progress callback by the calling thread only: callbacks written for one thread
(the CLI's live view, the service's job store) stay correct.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

from aka.core import ProgressCallback, ProgressEvent, emit

__all__ = ["EvalSlot", "SlotOutcome", "SlotPlan", "plan_slots", "run_in_slots"]

logger = logging.getLogger(__name__)

S = TypeVar("S")
T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class EvalSlot(Generic[S]):
    """One evaluation slot: a scorer and the GPU its workers are pinned to.

    Attributes:
        index: The slot's number (0 is the run's primary scorer).
        gpu: The ``CUDA_VISIBLE_DEVICES`` entry its workers get (an ordinal or a UUID; None on the
            CPU interpreter).
        scorer: The scorer this slot evaluates with (used by one thread at a time).
    """

    index: int
    gpu: str | None
    scorer: S


@dataclass(frozen=True)
class SlotOutcome(Generic[R]):
    """How one job ended: its value, or the exception it raised, and where and how long it ran."""

    slot: int
    gpu: str | None
    value: R | None
    error: Exception | None
    seconds: float


@dataclass(frozen=True)
class SlotPlan:
    """What ``plan_slots`` chose.

    Attributes:
        indices: Visible GPU indices (``Scorer(gpu_index=...)``), one per slot; on the CPU, the
            slot numbers.
        gpus: The ``CUDA_VISIBLE_DEVICES`` entry of each slot (empty on the CPU).
        note: Why fewer slots than asked for run, when that happened.
    """

    indices: list[int]
    gpus: list[str]
    note: str | None = None


def plan_slots(workers: int | Literal["auto"], *, cpu: bool, visible: Sequence[str]) -> SlotPlan:
    """Decide how many candidates are scored at once, and on which visible GPUs.

    Args:
        workers: ``AgentConfig.workers``: ``auto`` or a count.
        cpu: Whether the scorer runs Triton's interpreter (no GPU is timed).
        visible: The visible GPUs (``aka.hardware.visible_gpus()``).

    Returns:
        On a GPU, one slot per visible GPU (``auto``) or the first ``workers`` of them: never two
        slots on one GPU, whose timings would disturb each other. On the CPU, 1 for ``auto`` and
        ``workers`` interpreter slots otherwise (worth it on a many-core host).
    """
    if cpu:
        count = 1 if workers == "auto" else workers
        return SlotPlan(indices=list(range(count)), gpus=[])
    available = max(1, len(visible))  # a GPU scorer sees at least its own device
    count = available if workers == "auto" else min(workers, available)
    note = None
    if workers != "auto" and workers > available:
        note = (
            f"--workers {workers} asked for, {available} GPU(s) visible: {count} worker(s), one "
            "per GPU (two timed evaluations on one GPU would disturb each other)"
        )
    gpus = list(visible[:count]) if visible else ["0"]
    return SlotPlan(indices=list(range(count)), gpus=gpus, note=note)


def run_in_slots(
    slots: Sequence[EvalSlot[S]],
    jobs: Sequence[T],
    work: Callable[[EvalSlot[S], T, ProgressCallback], R],
    *,
    progress: ProgressCallback | None = None,
    on_done: Callable[[int, SlotOutcome[R]], None] | None = None,
) -> list[SlotOutcome[R]]:
    """Run every job on the slots, each slot one job at a time; return outcomes in job order.

    Args:
        slots: Where jobs run; a slot takes the next job (in order) as soon as its last one ends.
        jobs: The jobs.
        work: Runs one job on one slot; its third argument relays progress events.
        progress: Receives the relayed events, in the calling thread.
        on_done: Called in the calling thread as each job ends (in finish order) with its index.

    Returns:
        One outcome per job, in the jobs' order. A job that raised has ``error`` set; the others
        still run (the caller decides what an error means).

    With one slot (or one job) everything runs in the calling thread, as a plain loop. If the
    calling thread is interrupted, no new job starts and the running ones finish first, so their
    workers are cleaned up.
    """
    if not jobs:
        return []
    if not slots:
        raise ValueError("run_in_slots needs at least one slot")
    if len(slots) == 1 or len(jobs) == 1:
        outcomes = []
        for i, job in enumerate(jobs):
            relay = progress if progress is not None else _drop
            outcome = _run_one(slots[0], job, work, relay)
            outcomes.append(outcome)
            if on_done is not None:
                on_done(i, outcome)
        return outcomes
    return _run_threaded(slots[: len(jobs)], jobs, work, progress, on_done)


def _drop(event: ProgressEvent) -> None:
    del event


def _run_one(
    slot: EvalSlot[S],
    job: T,
    work: Callable[[EvalSlot[S], T, ProgressCallback], R],
    relay: ProgressCallback,
) -> SlotOutcome[R]:
    start = time.monotonic()
    try:
        value, error = work(slot, job, relay), None
    except Exception as err:  # noqa: BLE001 - boundary: the caller decides what a failure means
        value, error = None, err
    return SlotOutcome(slot.index, slot.gpu, value, error, time.monotonic() - start)


def _run_threaded(
    slots: Sequence[EvalSlot[S]],
    jobs: Sequence[T],
    work: Callable[[EvalSlot[S], T, ProgressCallback], R],
    progress: ProgressCallback | None,
    on_done: Callable[[int, SlotOutcome[R]], None] | None,
) -> list[SlotOutcome[R]]:
    inbox: queue.Queue[tuple[int, ProgressEvent | SlotOutcome[R]]] = queue.Queue()
    lock = threading.Lock()
    stop = threading.Event()
    next_job = iter(range(len(jobs)))

    def take() -> int | None:
        with lock:
            return None if stop.is_set() else next(next_job, None)

    def loop(slot: EvalSlot[S]) -> None:
        def relay(event: ProgressEvent) -> None:
            inbox.put((-1, event))

        while (i := take()) is not None:
            inbox.put((i, _run_one(slot, jobs[i], work, relay)))

    threads = [
        threading.Thread(target=loop, args=(s,), name=f"aka-eval-slot{s.index}", daemon=True)
        for s in slots
    ]
    for t in threads:
        t.start()
    outcomes: list[SlotOutcome[R] | None] = [None] * len(jobs)
    try:
        remaining = len(jobs)
        while remaining:
            i, item = inbox.get()
            if isinstance(item, ProgressEvent):
                emit(progress, item)
                continue
            outcomes[i] = item
            remaining -= 1
            if on_done is not None:
                on_done(i, item)
    except BaseException:
        stop.set()  # interrupted: start nothing new, let running evaluations clean up
        logger.warning("interrupted: waiting for the evaluations in flight to end")
        for t in threads:
            t.join()
        raise
    for t in threads:
        t.join()
    return [o for o in outcomes if o is not None]
