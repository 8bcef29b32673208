"""``aka bench run``: score candidates and baselines over a suite's operators, resumably.

Owns the orchestration of a suite run: per operator, pick the shapes (smoke on the CPU; tune and
generated holdout shapes on a GPU, at most ``max_shapes`` per split), evaluate the user's candidate
with the full scorer pipeline, and score the baselines (eager, torch.compile, the problem's
library path) against the same ``T_sol``: a reference worker gives the reference outputs and the
counted costs, a ``baselines`` worker (``aka.bench.worker_baselines``) gives the other baselines'
outputs, checked here under the scorer's tolerance policy, and on a GPU their timed samples.
Every (entrant, operator) result is cached under ``out_dir/cache`` by the problem's hash, the
shapes, the candidate's hash, the device and the library versions, so an interrupted run resumes
where it stopped. Results are ``aka.bench.suite_result`` models; reports are
``aka.bench.suite_report``'s.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from aka.bench.pipeline import _sha256
from aka.bench.result import Verdict
from aka.bench.suite_baselines import baseline_entries
from aka.bench.suite_result import (
    EntrantOp,
    OperatorInfo,
    ShapeScore,
    SuiteRun,
    summarize,
)
from aka.core import ProgressCallback, ProgressEvent, SpecError, emit
from aka.spec import ProblemSpec, Split

if TYPE_CHECKING:
    from aka.bench.pipeline import Scorer
    from aka.spec.problem import ShapeCase
    from aka.spec.suite import SuiteSpec

__all__ = ["BASELINE_NAMES", "SuiteOptions", "find_candidate", "run_suite", "select_suite_shapes"]

BASELINE_NAMES = ("eager", "torch_compile", "library")


@dataclass
class SuiteOptions:
    """What ``aka bench run`` was asked to do."""

    out_dir: Path
    candidates: Path | None = None
    baselines: list[str] = field(default_factory=list)
    ops: list[str] | None = None
    max_shapes: int | None = None
    compile_max_shapes: int | None = None
    holdout_seed: int | None = None
    holdout_count: int = 8
    holdout_memory_cap_bytes: float = 16 * 2**30


def find_candidate(directory: Path, op: str) -> Path | None:
    """The candidate for ``op``: ``DIR/<op>.py``, ``DIR/<op>/candidate.py`` or ``kernel.py``."""
    for path in (
        directory / f"{op}.py",
        directory / op / "candidate.py",
        directory / op / "kernel.py",
    ):
        if path.is_file():
            return path
    return None


def spread(cases: list[ShapeCase], limit: int | None) -> list[ShapeCase]:
    """At most ``limit`` cases, evenly spread over the list (small to large shapes alike)."""
    if limit is None or len(cases) <= limit:
        return cases
    if limit == 1:
        return cases[:1]
    step = (len(cases) - 1) / (limit - 1)
    return [cases[round(i * step)] for i in range(limit)]


def select_suite_shapes(
    problem: ProblemSpec, *, cpu: bool, max_shapes: int | None
) -> list[ShapeCase]:
    """Smoke shapes on the CPU; tune and holdout shapes on a GPU, each split capped."""
    if cpu:
        return spread(problem.shapes_in({Split.SMOKE}), max_shapes)
    tune = spread(problem.shapes_in({Split.TUNE}), max_shapes)
    return tune + spread(problem.shapes_in({Split.HOLDOUT}), max_shapes)


class _Cache:
    """One JSON file per (entrant, operator) result, keyed by everything that defines it."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def path(self, entrant: str, op: str, key: str) -> Path:
        return self.directory / f"{op}__{entrant}__{key[:20]}.json"

    def get(self, entrant: str, op: str, key: str) -> EntrantOp | None:
        path = self.path(entrant, op, key)
        if not path.is_file():
            return None
        try:
            return EntrantOp.model_validate_json(path.read_text()).model_copy(
                update={"cached": True}
            )
        except ValueError:
            return None  # a torn or outdated file is re-measured

    def put(self, result: EntrantOp, key: str) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.path(result.entrant, result.op, key)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(result.model_dump_json())
        tmp.replace(path)


def _environment_key(scorer: Scorer) -> str:
    from aka.hardware import detect_device, library_versions

    info = detect_device() if not scorer.cpu else None
    return json.dumps(
        {
            "mode": scorer.mode,
            "device": info.name if info else "cpu",
            "driver": info.driver_version if info else None,
            "versions": library_versions(),
            "seeds": scorer.config.seeds,
            "samples": [scorer.config.min_samples, scorer.config.max_samples],
        },
        sort_keys=True,
    )


def run_suite(
    scorer: Scorer,
    suite: SuiteSpec,
    options: SuiteOptions,
    progress: ProgressCallback | None = None,
) -> SuiteRun:
    """Score the candidates and baselines over the suite's operators; write nothing but the cache.

    Raises:
        SpecError: Unknown operators or baselines, or a candidates directory that does not exist.
    """
    unknown = [b for b in options.baselines if b not in BASELINE_NAMES]
    if unknown:
        raise SpecError(
            f"unknown baselines {unknown}; choose from {list(BASELINE_NAMES)}", field="--baselines"
        )
    if options.candidates is not None and not options.candidates.is_dir():
        raise SpecError(
            "the candidates directory does not exist",
            file=str(options.candidates),
            field="--candidates",
        )
    names = options.ops or [o.name for o in suite.operators]
    for name in names:
        suite.operator(name)  # raises with the list of operators
    entrants = (["candidate"] if options.candidates is not None else []) + list(options.baselines)
    if not entrants:
        raise SpecError("nothing to run: give --candidates DIR or --baselines", field="--baselines")
    cache = _Cache(options.out_dir / "cache")
    env = _environment_key(scorer)
    run = SuiteRun(
        suite=suite.name,
        date=datetime.now(UTC).isoformat(timespec="seconds"),
        performance_measured=not scorer.cpu,
        splits=["smoke"] if scorer.cpu else ["tune", "holdout"],
        max_shapes=options.max_shapes,
        operators=[],
        entrants=entrants,
    )
    if options.holdout_seed is not None and not scorer.cpu:
        run.holdout_seed_hash = _sha256(str(options.holdout_seed))[:12]
    if scorer.cpu:
        run.notes.append(
            "CPU (Triton interpreter): smoke shapes only, correctness checked, nothing timed."
        )
    for i, name in enumerate(names):
        op = suite.operator(name)
        emit(progress, ProgressEvent("suite", "operator", name, i, len(names)))
        problem = _problem(suite, name, scorer, options)
        shapes = select_suite_shapes(problem, cpu=scorer.cpu, max_shapes=options.max_shapes)
        splits: dict[str, int] = {}
        for s in shapes:
            splits[s.split.value] = splits.get(s.split.value, 0) + 1
        run.operators.append(
            OperatorInfo(name=name, weight=op.weight, phase=op.phase, shapes=splits)
        )
        key_base = f"{env}|{problem.problem_hash()}|{[s.id for s in shapes]}"
        if options.candidates is not None:
            run.results.append(
                _candidate_entry(scorer, problem, shapes, options.candidates, cache, key_base)
            )
        if options.baselines:
            run.results.extend(
                baseline_entries(scorer, problem, shapes, options, cache, key_base, run, progress)
            )
    emit(progress, ProgressEvent("suite", "done", suite.name, len(names), len(names)))
    run.summary = summarize(run)
    return run


def _problem(suite: SuiteSpec, name: str, scorer: Scorer, options: SuiteOptions) -> ProblemSpec:
    problem = suite.problem(name)
    if scorer.cpu or options.holdout_seed is None or problem.holdout is None:
        return problem
    from aka.spec.holdout import with_holdout

    return with_holdout(
        problem,
        options.holdout_seed,
        count=options.holdout_count,
        memory_cap_bytes=options.holdout_memory_cap_bytes,
    )


# ------------------------------------------------------------------------------------ candidate
def _candidate_entry(
    scorer: Scorer,
    problem: ProblemSpec,
    shapes: list[ShapeCase],
    directory: Path,
    cache: _Cache,
    key_base: str,
) -> EntrantOp:
    path = find_candidate(directory, problem.name)
    if path is None:
        return EntrantOp(
            entrant="candidate",
            op=problem.name,
            status="missing",
            verdict="missing",
            message=f"no {problem.name}.py or {problem.name}/candidate.py in {directory}",
        )
    source = path.read_text(encoding="utf-8")
    source_hash = _sha256(source)
    key = _sha256(f"{key_base}|candidate|{source_hash}")
    hit = cache.get("candidate", problem.name, key)
    if hit is not None:
        return hit
    result = scorer.evaluate(
        problem, source, shape_ids=[s.id for s in shapes], cold_recheck=scorer.wants_cold_recheck
    )
    by_id = {r.shape_id: r for r in result.shapes}
    rows = []
    for s in shapes:
        r = by_id.get(s.id)
        if r is None:
            rows.append(
                ShapeScore(
                    shape_id=s.id,
                    split=s.split.value,
                    phase=s.phase.value if s.phase else None,
                    verdict=result.verdict.value,
                    correct=None,
                )
            )
            continue
        ok = r.verdict is Verdict.ACCEPTED
        rows.append(
            ShapeScore(
                shape_id=s.id,
                split=s.split.value,
                phase=s.phase.value if s.phase else None,
                t_sol_us=r.t_sol_us,
                bound=r.bound,
                flops=r.flops,
                bytes=r.bytes,
                compute_unit=r.compute_unit.value if r.compute_unit else None,
                latency_us=r.latency_us.median if r.latency_us else None,
                s=r.sol_fraction if ok else None,
                correct=ok,
                verdict=r.verdict.value,
                message=r.failure.message if r.failure else None,
            )
        )
    accepted = result.verdict is Verdict.ACCEPTED
    entry = EntrantOp(
        entrant="candidate",
        op=problem.name,
        status="ok" if accepted else ("not_run" if result.verdict is Verdict.NOT_RUN else "failed"),
        verdict=result.verdict.value,
        message=result.failure.message if result.failure else None,
        source_hash=source_hash,
        fallback_ratio=result.fallback_ratio,
        shapes=rows,
    )
    if result.verdict is not Verdict.NOT_RUN:
        cache.put(entry, key)
    return entry
