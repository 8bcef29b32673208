"""The run's heavy, non-serialisable parts and the small helpers every node shares.

``AgentRuntime`` holds the scorer, the proposer factory, the retriever and the hooks a run was
assembled with; the graph's state holds only JSON. ``ScorerLike`` is what the graph needs from
``aka.bench.Scorer`` (tests pass a fake evaluator that implements it).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from aka.agent.parallel import EvalSlot
from aka.agent.records import ProfileReport, Proposer
from aka.agent.state import AgentState, RunOptions
from aka.core import ProgressCallback, ProgressEvent, Settings, emit
from aka.spec import ProblemSpec, Split

__all__ = [
    "AgentRuntime",
    "ScorerLike",
    "atomic_write",
    "compact_ceilings",
    "now",
    "sha256",
    "write_artifact",
]


class ScorerLike(Protocol):
    """What the graph needs from ``aka.bench.Scorer`` (a fake evaluator implements it in tests)."""

    mode: Any

    @property
    def cpu(self) -> bool:
        """Whether performance cannot be measured."""
        ...

    def evaluate(
        self,
        problem: ProblemSpec,
        candidate_source: str,
        *,
        shape_ids: list[str] | None = None,
        progress: ProgressCallback | None = None,
        cold_recheck: bool = False,
    ) -> Any:
        """Score a candidate (an ``EvalResult``); ``cold_recheck`` for the final result."""
        ...

    @property
    def wants_cold_recheck(self) -> bool:
        """Whether final results are re-checked in cold workers."""
        ...

    def compare(
        self,
        problem: ProblemSpec,
        a_source: str,
        b_source: str,
        *,
        shape_ids: list[str] | None = None,
        pairs: int = 3,
        progress: ProgressCallback | None = None,
    ) -> Any:
        """Paired ABAB re-measurement (a ``PairedComparison``)."""
        ...


@dataclass
class AgentRuntime:
    """The heavy, non-serialisable parts of a run, rebuilt on resume."""

    settings: Settings
    options: RunOptions
    problem: ProblemSpec
    scorer: ScorerLike
    proposer_factory: Callable[[AgentState], Proposer]
    retriever: Any = None
    progress: ProgressCallback | None = None
    profile_fn: Callable[[str, str, Any], ProfileReport] | None = None
    setup_hook: Callable[[AgentRuntime], dict[str, Any]] | None = None
    finalize_hook: Callable[[AgentRuntime, AgentState], None] | None = None
    needs_signature: bool = False
    slots: list[EvalSlot[ScorerLike]] = field(default_factory=list)
    slot_note: str | None = None
    _proposer: Proposer | None = field(default=None, repr=False)

    def eval_slots(self) -> list[EvalSlot[ScorerLike]]:
        """Where the evaluate node scores a round: ``slots`` (one scorer per GPU), else ``scorer``.

        Slot 0's scorer is ``scorer`` itself, which also runs everything outside the evaluate
        node (the ``--from`` kernel, the paired re-measure, the profile, the holdout scoring).
        """
        return self.slots or [EvalSlot(0, None, self.scorer)]

    def proposer(self, state: AgentState) -> Proposer:
        """Return the proposer, built on first use from the state (resume-safe)."""
        if self._proposer is None:
            self._proposer = self.proposer_factory(state)
        return self._proposer

    @property
    def run_dir(self) -> Path:
        """The run directory."""
        return self.options.run_dir

    def tune_ids(self) -> list[str]:
        """Shapes the agent optimizes on: tune on a GPU, smoke in the CPU interpreter."""
        split = Split.SMOKE if self.scorer.cpu else Split.TUNE
        return [s.id for s in self.problem.shapes_in({split})]

    def holdout_problem(self) -> tuple[ProblemSpec, list[str]]:
        """The problem with its holdout shapes, and their ids, for the final scoring only.

        Holdout shapes are the problem file's own ``holdout`` cases plus, when the problem has
        ``holdout:`` rules, shapes generated from the user's private seed (``bench.holdout_seed``,
        else the cache dir's). Nothing before finalize sees them: the agent optimizes on
        ``tune_ids``. None in the CPU interpreter (nothing is timed there).
        """
        if self.scorer.cpu:
            return self.problem, []
        problem = self.problem
        if problem.holdout is not None:
            from aka.spec.holdout import holdout_seed, with_holdout

            bench = self.settings.bench
            problem = with_holdout(
                problem,
                holdout_seed(bench, self.settings.paths.cache_dir),
                count=bench.holdout_shapes,
                memory_cap_bytes=bench.holdout_memory_cap_gb * 2**30,
            )
        return problem, [s.id for s in problem.shapes_in({Split.HOLDOUT})]

    def event(self, stage: str, message: str, state: AgentState, **data: Any) -> None:
        """Emit one agent progress event."""
        emit(self.progress, self.make_event(stage, message, state, **data))

    @staticmethod
    def make_event(stage: str, message: str, state: AgentState, **data: Any) -> ProgressEvent:
        """Build one agent progress event (``event`` emits it; evaluation slots relay it)."""
        limits = state.get("limits") or {}
        return ProgressEvent(
            "agent",
            stage,
            message,
            done=state.get("round", 0),
            total=limits.get("max_iters"),
            data=data,
        )


def now() -> str:
    """Return the UTC time as an ISO string (seconds)."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def sha256(text: str) -> str:
    """Return the sha256 hex digest of ``text``."""
    return hashlib.sha256(text.encode()).hexdigest()


def atomic_write(path: Path, text: str) -> None:
    """Write ``text`` to a temporary file beside ``path``, then rename it over ``path``.

    A killed process leaves either the old file or the new one, never half of one.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; run files are meant to be read
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_artifact(run_dir: Path, name: str, text: str) -> str:
    """Write ``text`` to ``run_dir/artifacts/name`` atomically; return the relative path."""
    rel = Path("artifacts") / name
    atomic_write(run_dir / rel, text)
    return rel.as_posix()


def compact_ceilings(ceilings: dict[str, Any]) -> dict[str, Any]:
    """The prompt-sized view of a ``DeviceCeilings`` dump (no raw measurements)."""
    out: dict[str, Any] = {"source": ceilings.get("source")}
    bandwidth = ceilings.get("bandwidth_bytes_per_s")
    if bandwidth:
        out["dram_bandwidth_TB_s"] = round(bandwidth / 1e12, 2)
    for unit, rate in sorted((ceilings.get("rates_flops_per_s") or {}).items()):
        out[f"{unit}_TFLOP_s"] = round(rate / 1e12, 1)
    if ceilings.get("launch_floor_us"):
        out["launch_floor_us"] = round(ceilings["launch_floor_us"], 2)
    return out
