"""Run one job inside its job process: write its problem to disk, run the agent or the scorer.

Owns turning a stored request into files (a suite operator copied with its shapes filtered, or an
inline problem written as one file) and calling ``aka.agent`` / ``aka.bench``; progress goes to the
job's events. Must not decide retries or talk HTTP (the dispatcher and the app do).

``run_job(settings, job, store) -> result`` is the contract the dispatcher calls (its import path
is ``ServiceConfig.runner``, so tests can put an agent with a fake evaluator behind it).
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

import yaml

from aka.core import ProgressEvent, Settings, SpecError
from aka.service.store import JobRow, JobStore

__all__ = ["check_request", "job_dir", "materialize", "run_job"]

logger = logging.getLogger(__name__)

_INLINE_NAMES = {"op.yaml": "op.yaml", "kernelbench": "problem.py"}


def job_dir(settings: Settings, job_id: str) -> Path:
    """Where a job keeps its problem and its run."""
    return settings.service.resolved_data_dir() / "jobs" / job_id


def check_request(request: dict[str, Any]) -> None:
    """Refuse, before it is queued, a suite operator or shape id that does not exist.

    Raises:
        SpecError: Unknown suite, operator or shape id (lists what exists).
    """
    if not request.get("operator"):
        return  # an inline problem is checked by its job, which loads it in a worker
    from aka.spec import load_suite

    suite = load_suite(request.get("suite") or "atrex30")
    names = [o.name for o in suite.operators]
    if request["operator"] not in names:
        raise SpecError(
            f"no operator {request['operator']!r} in suite {suite.name!r}; choose one of {names}",
            field="operator",
        )
    if request.get("shapes") is not None:
        known = [s.id for s in suite.problem(request["operator"]).shapes]
        unknown = [s for s in request["shapes"] if s not in known]
        if unknown:
            raise SpecError(
                f"shape ids {unknown} are not shapes of {request['operator']!r}; "
                f"its ids are {known[:40]}",
                field="shapes",
            )


def materialize(settings: Settings, request: dict[str, Any], into: Path) -> Path:
    """Write the request's problem under ``into``; return the path to load it from.

    Raises:
        SpecError: Unknown suite or operator, or a shape id the operator does not have.
    """
    into.mkdir(parents=True, exist_ok=True)
    inline = request.get("problem")
    if inline:
        path = into / _INLINE_NAMES[inline["format"]]
        path.write_text(inline["source"], encoding="utf-8")
        return path
    from aka.spec import load_suite

    check_request(request)  # the operator and its shape ids exist
    suite = load_suite(request.get("suite") or "atrex30")
    name = request["operator"]
    source = suite.problem(name).source_path
    if source is None:
        raise SpecError(f"operator {name!r} has no problem file", field="operator")
    target = into / name
    if not target.exists():
        shutil.copytree(Path(source).parent, target)
    op_yaml: Path = target / Path(source).name
    if request.get("shapes") is not None:
        _keep_shapes(op_yaml, [str(s) for s in request["shapes"]])
    return op_yaml


def _keep_shapes(op_yaml: Path, keep: list[str]) -> None:
    """Rewrite the problem's shapes to the ids in ``keep`` (checked) plus its smoke shapes."""
    spec = yaml.safe_load(op_yaml.read_text(encoding="utf-8"))
    shapes = spec.get("shapes") or {}
    if "path" in shapes:
        cases = yaml.safe_load((op_yaml.parent / shapes["path"]).read_text(encoding="utf-8"))
    else:
        cases = shapes.get("cases") or []
    kept = [c for c in cases if str(c.get("id")) in keep or c.get("split") == "smoke"]
    spec["shapes"] = {"cases": kept}
    op_yaml.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")


def _progress_to_events(store: JobStore, job_id: str) -> Any:
    def on_event(event: ProgressEvent) -> None:
        data: dict[str, Any] = {"source": event.source, "stage": event.stage}
        if event.message:
            data["message"] = event.message
        if event.done is not None:
            data["done"] = event.done
        if event.total is not None:
            data["total"] = event.total
        if event.data:
            data["data"] = event.data
        store.add_event(job_id, "progress", data)

    return on_event


def run_job(
    settings: Settings,
    job: JobRow,
    store: JobStore,
    *,
    scorer: Any = None,
    proposer_factory: Any = None,
    use_kb: bool | None = None,
) -> dict[str, Any]:
    """Run ``job`` to the end in this process; return its result summary.

    ``scorer`` and ``proposer_factory`` replace the real scorer and proposer (a test's fake
    evaluator behind the real agent); ``use_kb`` overrides ``ServiceConfig.use_kb``.

    Raises:
        AkaError: The problem is invalid or the harness failed (the job fails with the message).
    """
    base = job_dir(settings, job.id)
    problem_path = materialize(settings, job.request, base / "problem")
    progress = _progress_to_events(store, job.id)
    if job.kind == "evaluate":
        return _evaluate(settings, job, problem_path, progress, scorer)
    parts = {"scorer": scorer, "proposer_factory": proposer_factory, "progress": progress}
    kb = settings.service.use_kb if use_kb is None else use_kb
    return _optimize(settings, job, problem_path, base / "run", parts, kb)


def _optimize(
    settings: Settings,
    job: JobRow,
    problem_path: Path,
    run_dir: Path,
    parts: dict[str, Any],
    use_kb: bool,
) -> dict[str, Any]:
    from aka.agent.runner import plan_run, resume_run, run_optimize

    request = job.request
    settings = settings.model_copy(
        update={
            "agent": settings.agent.model_copy(
                update={"max_iters": int(request.get("budget", {}).get("max_iters", 3))}
            )
        }
    )
    if (run_dir / "checkpoint.sqlite").is_file():  # an earlier attempt got this far
        parts["progress"](ProgressEvent("service", "resume", "resuming from the last checkpoint"))
        outcome = resume_run(settings, str(run_dir), **parts)
    else:
        if run_dir.exists():
            shutil.rmtree(run_dir)  # an attempt that died before its first checkpoint
        options = plan_run(
            settings,
            problem_path,
            out=run_dir,
            model=request.get("model"),
            dsl=request.get("dsl", "triton"),
            device=request.get("device", "auto"),
            use_kb=use_kb,
            run_id=job.id,
        )
        outcome = run_optimize(settings, options, **parts)
    record = outcome.record
    final = record.final_tune or {}
    return {
        "run_dir": str(outcome.run_dir),
        "produced_kernel": outcome.produced_kernel,
        "stop_reason": record.stop_reason,
        "mode": record.mode,
        "performance_measured": record.performance_measured,
        "device": record.device,
        "candidates": len(record.candidates),
        "score": final.get("score"),
        "holdout_score": (record.final_holdout or {}).get("score"),
    }


def _evaluate(
    settings: Settings, job: JobRow, problem_path: Path, progress: Any, scorer: Any
) -> dict[str, Any]:
    from aka.bench import Scorer
    from aka.spec import load_problem

    problem = load_problem(problem_path)
    if scorer is None:
        device = job.request.get("device", "auto")
        scorer = Scorer(settings.bench, settings.paths.cache_dir, device=device)
    result = scorer.evaluate(problem, job.request["candidate"], progress=progress)
    out = job_dir(settings, job.id) / "result.json"
    out.write_text(result.model_dump_json(indent=1), encoding="utf-8")
    return {
        "verdict": result.verdict.value,
        "accepted": result.accepted,
        "score": result.score,
        "performance_measured": result.performance_measured,
        "message": result.failure.message if result.failure else None,
        "shapes": [
            {"shape": s.shape_id, "verdict": s.verdict.value, "sol_fraction": s.sol_fraction}
            for s in result.shapes
        ],
    }
