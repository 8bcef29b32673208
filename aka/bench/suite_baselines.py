"""The baselines of a suite run: eager, torch.compile and the library path, checked and priced.

Owns the baseline half of ``aka bench run`` (``aka.bench.suite_run``): a reference worker gives
the reference outputs and counted costs; a ``baselines`` worker (``aka.bench.worker_baselines``)
gives the other baselines' outputs per shape and seed, which are checked here under the scorer's
tolerance policy before their times count, and on a GPU their timed samples; every time is
priced against the same ``T_sol`` as a candidate's (``aka.bench.suite_roofline``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aka.bench.pipeline import _sha256
from aka.bench.stats import latency_stats
from aka.bench.suite_result import EntrantOp, ShapeScore, Status, SuiteRun
from aka.bench.suite_roofline import ceilings_json, price_shape
from aka.core import BaselineError, ProgressCallback

if TYPE_CHECKING:
    from aka.bench.pipeline import Scorer
    from aka.bench.run_state import _Reference
    from aka.bench.suite_run import SuiteOptions, _Cache
    from aka.spec import ProblemSpec
    from aka.spec.problem import ShapeCase

__all__ = ["baseline_entries"]


def baseline_entries(
    scorer: Scorer,
    problem: ProblemSpec,
    shapes: list[ShapeCase],
    options: SuiteOptions,
    cache: _Cache,
    key_base: str,
    run: SuiteRun,
    progress: ProgressCallback | None,
) -> list[EntrantOp]:
    """Each requested baseline on one operator: from the cache, else measured now.

    ``library`` is ``not_run`` for an operator without a library module, ``torch_compile`` on the
    CPU (it is built and timed on a GPU only).
    """
    wanted = [
        b
        for b in options.baselines
        if (b != "library" or problem.library_code is not None)
        and (b != "torch_compile" or not scorer.cpu)
    ]
    keys = {b: _sha256(f"{key_base}|{b}|{options.compile_max_shapes}") for b in wanted}
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
    ref = scorer._reference(problem, shapes, progress)
    check = [n for n in names if n in ("library", "torch_compile")]
    timing = None
    if not scorer.cpu:
        compiled = [s.id for s in shapes]
        if options.compile_max_shapes is not None:
            from aka.bench.suite_run import spread

            compiled = [s.id for s in spread(shapes, options.compile_max_shapes)]
        timing = scorer.timing_config(names) | {
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
    try:
        with scorer.trusted_worker(task, "the baselines", progress, len(shapes)) as (
            result,
            outcome,
        ):
            verdicts, priced = _judge_baselines(
                scorer, problem, shapes, ref, check, result, outcome, run
            )
    except BaselineError as err:
        return {
            n: EntrantOp(
                entrant=n, op=problem.name, status="failed", verdict="harness", message=str(err)
            )
            for n in names
        }
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


def _judge_baselines(
    scorer: Scorer,
    problem: ProblemSpec,
    shapes: list[ShapeCase],
    ref: _Reference,
    check: list[str],
    result: dict[str, Any],
    outcome: Any,
    run: SuiteRun,
) -> tuple[dict[tuple[str, str], tuple[str, str | None]], dict[str, Any]]:
    """Check each baseline's outputs per shape against the reference; price the shapes."""
    from aka.bench.run_state import _load_tensors, _Run

    fake = _Run(problem=problem, source="", shapes=shapes, skipped=[], mode=scorer.mode)
    override = scorer._override(fake)
    verdicts: dict[tuple[str, str], tuple[str, str | None]] = {}
    for row in result["shapes"]:
        sid = row["shape_id"]
        for name in check:
            error = result["errors"].get(f"{sid}/{name}")
            if name == "torch_compile" and not row["files"].get(name) and error is None:
                continue  # past --compile-max-shapes: neither checked nor timed
            verdicts[(name, sid)] = _check_outputs(
                scorer,
                fake,
                ref,
                sid,
                row["files"].get(name, {}),
                override,
                outcome.workdir,
                _load_tensors,
                error,
            )
    return verdicts, _price(scorer, problem, shapes, ref, result.get("timing"), run)


def _baseline_row(
    name: str,
    shape: ShapeCase,
    verdicts: dict[tuple[str, str], tuple[str, str | None]],
    priced: dict[str, Any],
    *,
    cpu: bool,
) -> ShapeScore:
    verdict, message = verdicts.get((name, shape.id), ("accepted", None))
    t_sol_us, bound, flops, nbytes, unit = priced["sol"].get(shape.id, (None,) * 5)
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
        compute_unit=unit,
        latency_us=latency,
        s=min(1.0, t_sol_us / latency) if ok and latency and t_sol_us else None,
        correct=ok,
        verdict=verdict,
        message=message,
    )


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
        run.ceilings = ceilings_json(ceilings)
        run.device = {"name": info.name, "arch": info.arch, "driver": info.driver_version}
        run.versions = {k: str(v) for k, v in ref.versions.items()}
    for s in shapes:
        sol, unit = price_shape(problem, s, ref.rows[s.id]["costs"], ceilings)
        out["sol"][s.id] = (sol.t_sol_s * 1e6, sol.bound, sol.flops_total, sol.bytes_total, unit)
    for item in timing["shapes"]:
        for name, samples in item["baselines"].items():
            out["latency"][(name, item["shape_id"])] = latency_stats(samples["stream_us"]).median
    out["errors"] = dict(timing.get("baseline_errors") or {})
    return out
