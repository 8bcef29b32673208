"""Job runners for the service tests: the real ``aka.service.runner`` and agent, fake evaluator.

``run_job`` drives the real agent graph with a scripted proposer and ``SyntheticScorer`` (fast,
no GPU). The others misbehave on purpose: ``crash_once`` kills its process on a job's first
attempt, ``crash_always`` on every attempt, ``slow`` sleeps until it is cancelled or killed.
``gated`` (the job page's browser test) emits an event whose message is markup, waits for the
test to create the job's ``go`` file, then runs like ``run_job`` (in CPU-interpreter mode, with
no timings, when the request says ``device: cpu``).
``by_model`` (the Ray tests: one server, every case) picks by the request's ``model``: ``crash``
like ``crash_always``, ``slow`` like ``slow`` (its event carries the job process's pid), else
``run_job``.
``pinned`` (multi-GPU slots) returns the job process's ``CUDA_VISIBLE_DEVICES`` and multicast
settings and the interval it held its slot.
Selected with ``AKA_SERVICE__RUNNER=tests.fakes.service_runner:<name>``.
"""

from __future__ import annotations

import os
import time
from typing import Any

from aka.agent.records import Proposal, ProposalBatch, ProposalContext
from aka.core import Settings
from aka.service.runner import job_dir
from aka.service.runner import run_job as real_run_job
from aka.service.store import JobRow, JobStore
from tests.fakes.scorer import SyntheticScorer

ROUND_DELAY_S = float(os.environ.get("AKA_TEST_ROUND_DELAY_S", "0"))
MARKUP = '<script>window.pwned = 1</script><img src=x onerror="window.pwned = 2"> & <b>bold</b>'


def _kernel(latency_us: float, tag: str) -> str:
    return f"class ModelNew:\n    pass\n# tag: {tag}\n# fake-latency-us: {latency_us}\n"


class _Faster:
    """Each round proposes one kernel 10 % faster than the last."""

    name = "scripted"

    def propose(self, ctx: ProposalContext) -> ProposalBatch:
        time.sleep(ROUND_DELAY_S)
        latency = 100.0 * 0.9**ctx.round
        source = _kernel(latency, f"r{ctx.round}")
        return ProposalBatch(proposals=[Proposal(source=source, family=f"f{ctx.round}",
                                                 origin="scripted")])  # fmt: skip


def run_job(settings: Settings, job: JobRow, store: JobStore) -> dict[str, Any]:
    return real_run_job(
        settings, job, store, scorer=SyntheticScorer(), proposer_factory=lambda _s: _Faster(),
        use_kb=False,
    )  # fmt: skip


def crash_once(settings: Settings, job: JobRow, store: JobStore) -> dict[str, Any]:
    if job.attempts == 1:
        os._exit(7)  # a hard crash: no exception, no cleanup
    return run_job(settings, job, store)


def crash_always(settings: Settings, job: JobRow, store: JobStore) -> dict[str, Any]:
    os._exit(9)


def slow(settings: Settings, job: JobRow, store: JobStore) -> dict[str, Any]:
    store.add_event(job.id, "progress", {"stage": "sleeping"})
    time.sleep(600)
    return {}


def gated(settings: Settings, job: JobRow, store: JobStore) -> dict[str, Any]:
    store.add_event(job.id, "progress", {"source": "test", "stage": "gate", "message": MARKUP})
    go = job_dir(settings, job.id) / "go"
    deadline = time.monotonic() + 120
    while not go.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"nobody created {go}")
        time.sleep(0.05)
    cpu = job.request.get("device") == "cpu"
    return real_run_job(
        settings, job, store, scorer=SyntheticScorer(cpu=cpu),
        proposer_factory=lambda _s: _Faster(), use_kb=False,
    )  # fmt: skip


def by_model(settings: Settings, job: JobRow, store: JobStore) -> dict[str, Any]:
    """Misbehave as the request's ``model`` says: ``crash`` (every attempt), ``slow``, else run."""
    model = job.request.get("model")
    if model == "crash":
        os._exit(9)
    if model == "slow":
        store.add_event(job.id, "progress", {"stage": "sleeping", "pid": os.getpid()})
        time.sleep(600)
        return {}
    return run_job(settings, job, store)


def pinned(settings: Settings, job: JobRow, store: JobStore) -> dict[str, Any]:
    """Report the job process's GPU pinning and multicast settings; hold the slot for a second."""
    started = time.time()
    time.sleep(1.0)
    return {
        "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "nvls": os.environ.get("NCCL_NVLS_ENABLE"),
        "symm_multicast_off": os.environ.get("TORCH_SYMM_MEM_DISABLE_MULTICAST"),
        "interval": [started, time.time()],
    }
