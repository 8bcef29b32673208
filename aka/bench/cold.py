"""The cold re-check of a final result (ARCHITECTURE.md §4, runtime guards).

A result that is about to be reported is evaluated once more in a cold process: fresh workers
with empty compiler caches (Triton, Inductor, the CUDA JIT cache off), and correctness seeds drawn
at random now, so nothing a candidate could have stored from an earlier run (a file, an
autotuning cache, outputs keyed on known seeds) applies. The re-check must accept the candidate
again, and on a GPU each shape's median may be at most ``cold_max_slowdown`` x the original.

Owns the comparison of the two results; the evaluation itself is the scorer's.
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING

from aka.bench.result import EvalResult, Failure, Verdict
from aka.core import ProgressCallback

if TYPE_CHECKING:
    from aka.bench.pipeline import Scorer
    from aka.spec import ProblemSpec

__all__ = ["cold_seeds", "judge_cold", "recheck_cold"]

#: Environment of a cold worker on top of the sandbox's (its caches already live in its own
#: fresh directory; this also turns NVIDIA's JIT cache of PTX off).
COLD_ENV = {"CUDA_CACHE_DISABLE": "1"}


def cold_seeds(n: int) -> list[int]:
    """``n`` distinct random seeds (never the configured ones a candidate could anticipate)."""
    seeds: set[int] = set()
    while len(seeds) < n:
        seeds.add(1_000_000 + secrets.randbelow(1 << 30))
    return sorted(seeds)


def judge_cold(cold: EvalResult, original: EvalResult, max_slowdown: float) -> EvalResult:
    """Merge the cold re-check into the original result.

    Args:
        cold: The re-check (fresh seeds, empty caches).
        original: The accepted result being re-checked.
        max_slowdown: The largest cold/original median ratio per shape still counted as the same.

    Returns:
        ``original`` with a note when the re-check reproduced it; otherwise ``original`` with the
        verdict ``not_reproduced``, score 0 and a failure saying what differed.
    """
    seeds = cold.manifest.seeds
    if not cold.accepted:
        why = cold.failure.message if cold.failure else cold.verdict.value
        return _not_reproduced(
            original,
            f"in a cold process (fresh seeds {seeds}, empty caches) the verdict was "
            f"{cold.verdict.value}: {why}",
        )
    ratios: dict[str, float] = {}
    if original.performance_measured and cold.performance_measured:
        before = {r.shape_id: r.latency_us.median for r in original.shapes if r.latency_us}
        for row in cold.shapes:
            if row.latency_us and row.shape_id in before and before[row.shape_id] > 0:
                ratios[row.shape_id] = row.latency_us.median / before[row.shape_id]
        slow = {k: round(v, 2) for k, v in ratios.items() if v > max_slowdown}
        if slow:
            return _not_reproduced(
                original,
                f"in a cold process (fresh seeds, empty caches) shapes ran slower by {slow} "
                f"(cold / first median; at most {max_slowdown:g} is allowed)",
            )
    worst = f"; slowest cold/first median ratio {max(ratios.values()):.2f}" if ratios else ""
    note = f"cold re-check (fresh seeds {seeds}, empty compiler caches): reproduced{worst}"
    return original.model_copy(update={"notes": [*original.notes, note]})


def _not_reproduced(original: EvalResult, message: str) -> EvalResult:
    failure = Failure(kind=Verdict.NOT_REPRODUCED, message=message)
    return original.model_copy(
        update={
            "verdict": Verdict.NOT_REPRODUCED,
            "failure": failure,
            "score": 0.0,
            "notes": [*original.notes, message],
        }
    )


def recheck_cold(
    scorer: Scorer,
    problem: ProblemSpec,
    source: str,
    original: EvalResult,
    progress: ProgressCallback | None = None,
) -> EvalResult:
    """Evaluate ``source`` again in cold workers on ``original``'s shapes and judge the two.

    Raises:
        SpecError, BaselineError, SandboxError: As ``Scorer.evaluate``.
    """
    from aka.bench.pipeline import Scorer

    config = scorer.config.model_copy(update={"seeds": cold_seeds(len(scorer.config.seeds))})
    cold_scorer = Scorer(
        config,
        scorer.cache_dir,
        device="cpu" if scorer.cpu else "cuda",
        gpu_index=scorer.gpu_index,
        static_screen=scorer.static_screen,
        extra_env=COLD_ENV,
    )
    ids = [r.shape_id for r in original.shapes] or None
    cold = cold_scorer.evaluate(problem, source, shape_ids=ids, progress=progress)
    return judge_cold(cold, original, scorer.config.cold_max_slowdown)
