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

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aka.bench.result import Verdict
from aka.bench.stats import latency_stats
from aka.bench.suite_result import (
    EntrantOp,
    OperatorInfo,
    ShapeScore,
    Status,
    SuiteRun,
    summarize,
)
from aka.core import ProgressCallback, ProgressEvent, SpecError, emit
from aka.spec import ProblemSpec, Split

if TYPE_CHECKING:
    from aka.bench.pipeline import Scorer, _Reference
    from aka.hardware import DeviceCeilings
    from aka.spec.problem import ShapeCase
    from aka.spec.suite import SuiteSpec

__all__ = [
    "BASELINE_NAMES",
    "SuiteOptions",
    "find_candidate",
    "price_shape",
    "run_suite",
    "shape_rooflines",
]

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


def _even(cases: list[ShapeCase], limit: int | None) -> list[ShapeCase]:
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
        return _even(problem.shapes_in({Split.SMOKE}), max_shapes)
    tune = _even(problem.shapes_in({Split.TUNE}), max_shapes)
    return tune + _even(problem.shapes_in({Split.HOLDOUT}), max_shapes)


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


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
        run.holdout_seed_hash = _sha(str(options.holdout_seed))[:12]
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
                _baseline_entries(scorer, problem, shapes, options, cache, key_base, run, progress)
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
    source_hash = _sha(source)
    key = _sha(f"{key_base}|candidate|{source_hash}")
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


# ------------------------------------------------------------------------------------ baselines
def _baseline_entries(
    scorer: Scorer,
    problem: ProblemSpec,
    shapes: list[ShapeCase],
    options: SuiteOptions,
    cache: _Cache,
    key_base: str,
    run: SuiteRun,
    progress: ProgressCallback | None,
) -> list[EntrantOp]:
    wanted = [
        b
        for b in options.baselines
        if (b != "library" or problem.library_code is not None)
        and (b != "torch_compile" or not scorer.cpu)
    ]
    keys = {b: _sha(f"{key_base}|{b}|{options.compile_max_shapes}") for b in wanted}
    hits = {b: cache.get(b, problem.name, keys[b]) for b in wanted}
    todo = [b for b in wanted if hits[b] is None]
    fresh: dict[str, EntrantOp] = {}
    if todo:
        fresh = _measure_baselines(scorer, problem, shapes, todo, options, run, progress)
        for b, entry in fresh.items():
            cache.put(entry, keys[b])
    out = []
    for b in options.baselines:
        if b == "torch_compile" and scorer.cpu:
            out.append(
                EntrantOp(
                    entrant=b,
                    op=problem.name,
                    status="not_run",
                    verdict="not_run",
                    message="torch.compile is built and timed on a GPU only",
                )
            )
            continue
        if b == "library" and problem.library_code is None:
            out.append(
                EntrantOp(
                    entrant=b,
                    op=problem.name,
                    status="not_run",
                    verdict="no_library",
                    message="PyTorch has no faster library path for this operator than eager",
                )
            )
            continue
        found = hits.get(b) or fresh.get(b)
        if found is not None:
            out.append(found)
    return out


def _measure_baselines(
    scorer: Scorer,
    problem: ProblemSpec,
    shapes: list[ShapeCase],
    names: list[str],
    options: SuiteOptions,
    run: SuiteRun,
    progress: ProgressCallback | None,
) -> dict[str, EntrantOp]:
    from aka.bench.pipeline import _load_tensors, _Run

    ref = scorer._reference(problem, shapes, progress)
    check = [n for n in names if n in ("library", "torch_compile")]
    timing = None
    if not scorer.cpu:
        compiled = [s.id for s in shapes]
        if options.compile_max_shapes is not None:
            compiled = [s.id for s in _even(shapes, options.compile_max_shapes)]
        timing = _timing_config(scorer, names) | {
            "skip_compile": [s.id for s in shapes if s.id not in compiled]
        }
    if not check and timing is None:  # eager on the CPU: the reference ran; nothing else to do
        return {
            name: EntrantOp(
                entrant=name,
                op=problem.name,
                status="ok",
                verdict="accepted",
                shapes=[
                    ShapeScore(
                        shape_id=s.id,
                        split=s.split.value,
                        phase=s.phase.value if s.phase else None,
                        correct=True,
                        verdict="accepted",
                    )
                    for s in shapes
                ],
            )
            for name in names
        }
    task = scorer._task("baselines", problem, shapes) | {"check": check, "timing": timing}
    handle = scorer._start(task, {}, scorer.config.worker_timeout_s, progress, len(shapes))
    try:
        outcome = handle.finish()
        result = outcome.result or {}
        if not result.get("ok"):
            err = result.get("error") or {}
            message = f"the baselines worker failed: {err.get('message', 'no result')}"
            return {
                n: EntrantOp(
                    entrant=n, op=problem.name, status="failed", verdict="harness", message=message
                )
                for n in names
            }
        fake = _Run(problem=problem, source="", shapes=shapes, skipped=[], mode=scorer.mode)
        override = scorer._override(fake)
        verdicts: dict[tuple[str, str], tuple[str, str | None]] = {}
        for row in result["shapes"]:
            sid = row["shape_id"]
            for name in check:
                verdicts[(name, sid)] = _check_outputs(
                    scorer,
                    fake,
                    ref,
                    sid,
                    row["files"].get(name, {}),
                    override,
                    outcome.workdir,
                    _load_tensors,
                    result["errors"].get(f"{sid}/{name}"),
                )
        priced = _price(scorer, problem, shapes, ref, result.get("timing"), run)
    finally:
        handle.cleanup()
    entries = {}
    for name in names:
        rows = [_baseline_row(name, s, verdicts, priced, cpu=scorer.cpu) for s in shapes]
        if name == "torch_compile" and not scorer.cpu:
            # Shapes past --compile-max-shapes were not timed: score the operator on the others.
            rows = [r for r in rows if r.s is not None or r.correct is False] or rows
        bad = next((r for r in rows if r.correct is False), None)
        untimed = next((r for r in rows if r.s is None), None) if not scorer.cpu else None
        status: Status = "ok"
        said: tuple[str, str | None] = ("accepted", None)
        if bad is not None:
            status, said = "failed", (bad.verdict, bad.message)
        elif untimed is not None:
            status, said = "failed", ("not_timed", untimed.message)
        entries[name] = EntrantOp(
            entrant=name,
            op=problem.name,
            status=status,
            verdict=said[0],
            message=said[1],
            shapes=rows,
        )
    return entries


def _baseline_row(
    name: str,
    shape: ShapeCase,
    verdicts: dict[tuple[str, str], tuple[str, str | None]],
    priced: dict[str, Any],
    *,
    cpu: bool,
) -> ShapeScore:
    verdict, message = verdicts.get((name, shape.id), ("accepted", None))
    t_sol_us, bound, flops, nbytes = priced["sol"].get(shape.id, (None, None, None, None))
    latency = priced["latency"].get((name, shape.id))
    ok = verdict == "accepted"
    if ok and latency is None and not cpu:
        message = priced["errors"].get(f"{shape.id}/{name}") or "not timed"
    return ShapeScore(
        shape_id=shape.id,
        split=shape.split.value,
        phase=shape.phase.value if shape.phase else None,
        t_sol_us=t_sol_us,
        bound=bound,
        flops=flops,
        bytes=nbytes,
        latency_us=latency,
        s=min(1.0, t_sol_us / latency) if ok and latency and t_sol_us else None,
        correct=ok,
        verdict=verdict,
        message=message,
    )


def _timing_config(scorer: Scorer, names: list[str]) -> dict[str, Any]:
    c = scorer.config
    return {
        "enabled": True,
        "warmup_ms": c.warmup_ms,
        "min_samples": c.min_samples,
        "max_samples": c.max_samples,
        "sample_budget_s": c.sample_budget_s,
        "l2_flush_factor": c.l2_flush_factor,
        "rotating_sets": c.rotating_sets,
        "baselines": list(names),
        "host_lead_us": c.host_lead_us,
        "l2_flush_mode": c.l2_flush_mode,
    }


def _check_outputs(
    scorer: Scorer,
    run: Any,
    ref: _Reference,
    shape_id: str,
    files: dict[str, str],
    override: Any,
    workdir: Path,
    load: Callable[[Path], dict[str, Any]],
    error: str | None,
) -> tuple[str, str | None]:
    """The baseline's verdict at one shape: its outputs against the reference's, every seed."""
    if error is not None:
        return "runtime_error", error
    if not files:
        return "runtime_error", "no outputs were saved"
    for seed, name in files.items():
        outcome = scorer._compare(run, ref, shape_id, int(seed), load(workdir / name), override)
        if not outcome.ok:
            return outcome.verdict.value, f"seed {seed}: {outcome.message}"
    return "accepted", None


def _price(
    scorer: Scorer,
    problem: ProblemSpec,
    shapes: list[ShapeCase],
    ref: _Reference,
    timing: dict[str, Any] | None,
    run: SuiteRun,
) -> dict[str, Any]:
    """T_sol per shape on the run's ceilings, and each baseline's median time per shape."""
    out: dict[str, Any] = {"sol": {}, "latency": {}, "errors": {}}
    if timing is None or ref.device is None:
        return out
    from aka.bench.performance import scorer_ceilings
    from aka.hardware import DeviceInfo

    info = DeviceInfo.model_validate(ref.device)
    floor = latency_stats(timing["launch_floor"]["stream_us"])
    ceilings = scorer_ceilings(scorer, info).model_copy(
        update={"launch_floor_us": floor.median, "launch_floor_iqr_us": floor.iqr}
    )
    if run.ceilings is None:
        run.ceilings = _ceilings_json(ceilings)
        run.device = {"name": info.name, "arch": info.arch, "driver": info.driver_version}
        run.versions = {k: str(v) for k, v in ref.versions.items()}
    for s in shapes:
        sol = price_shape(problem, s, ref.rows[s.id]["costs"], ceilings)
        out["sol"][s.id] = (sol.t_sol_s * 1e6, sol.bound, sol.flops_total, sol.bytes_total)
    for item in timing["shapes"]:
        for name, samples in item["baselines"].items():
            out["latency"][(name, item["shape_id"])] = latency_stats(samples["stream_us"]).median
    out["errors"] = dict(timing.get("baseline_errors") or {})
    return out


def _costs(problem: ProblemSpec, shape: ShapeCase, costs: dict[str, Any] | None) -> Any:
    from aka.hardware import CostCounts, apply_overrides

    counted = CostCounts.model_validate(costs) if costs else CostCounts()
    return apply_overrides(
        counted,
        problem.roofline_overrides_for(shape.id),
        {**shape.init_kwargs, **shape.input_kwargs},
        shape_id=shape.id,
    )


def price_shape(
    problem: ProblemSpec, shape: ShapeCase, costs: dict[str, Any] | None, ceilings: DeviceCeilings
) -> Any:
    """T_sol of one shape: counted costs (or none) with the problem's overrides, on ``ceilings``."""
    from aka.hardware import t_sol

    return t_sol(_costs(problem, shape, costs), ceilings)


def _fully_overridden(problem: ProblemSpec, shape: ShapeCase) -> bool:
    """Whether the overrides state FLOPs, bytes read and bytes written: no counting needed."""
    fields = set()
    for o in problem.roofline_overrides_for(shape.id):
        fields |= {
            f for f in ("flops_by_unit", "bytes_read", "bytes_written") if getattr(o, f) is not None
        }
    return len(fields) == 3


def shape_rooflines(
    scorer: Scorer,
    problem: ProblemSpec,
    shapes: list[ShapeCase],
    ceilings: DeviceCeilings,
    progress: ProgressCallback | None = None,
) -> list[dict[str, Any]]:
    """Per shape: FLOPs (per unit), bytes read and written, T_sol and its bound on ``ceilings``.

    Costs are counted by running the reference in a worker (on this machine's device) for the
    shapes whose overrides do not state all three quantities.

    Raises:
        BaselineError: The reference failed while being counted.
    """
    from aka.core import BaselineError
    from aka.hardware import t_sol

    need = [s for s in shapes if not _fully_overridden(problem, s)]
    counted: dict[str, Any] = {}
    if need:
        task = scorer._task("reference", problem, need) | {"count_costs": True, "costs_only": True}
        handle = scorer._start(task, {}, scorer.config.worker_timeout_s, progress, len(need))
        try:
            outcome = handle.finish()
            result = outcome.result or {}
            if not result.get("ok"):
                err = result.get("error") or {}
                raise BaselineError(
                    f"counting the reference of '{problem.name}' failed: "
                    f"{err.get('message', 'no result')}"
                )
            counted = {r["shape_id"]: r["costs"] for r in result["shapes"]}
        finally:
            handle.cleanup()
    rows = []
    for s in shapes:
        costs = _costs(problem, s, counted.get(s.id))
        sol = t_sol(costs, ceilings)
        rows.append(
            {
                "shape_id": s.id,
                "split": s.split.value,
                "flops": costs.flops_total,
                "flops_by_unit": {str(u.value): f for u, f in costs.flops_by_unit.items()},
                "bytes_read": costs.bytes_read,
                "bytes_written": costs.bytes_written,
                "t_sol_s": sol.t_sol_s,
                "bound": sol.bound,
                "counted": s.id in counted,
            }
        )
    return rows


def _ceilings_json(ceilings: DeviceCeilings) -> dict[str, object]:
    return {
        "source": ceilings.source,
        "bandwidth_bytes_per_s": ceilings.bandwidth_bytes_per_s,
        "rates_flops_per_s": {str(k.value): v for k, v in ceilings.rates_flops_per_s.items()},
        "launch_floor_us": ceilings.launch_floor_us,
    }
