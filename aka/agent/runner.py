"""Start, run and resume optimization runs: the one entry point the CLI and the service call.

A run lives in its own directory: ``kernel.py``, ``report.md``, ``report.html`` and ``run.json`` at
its top once it finishes; ``options.json`` (how it was asked for, no secrets), ``checkpoint.sqlite``
(the graph state after every node) and ``artifacts/`` (every candidate, prompt and reply) from the
first node on. ``resume_run`` continues a run whose process died, from its last checkpoint.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from aka.agent.graph import (
    AgentRuntime,
    ScorerLike,
    build_graph,
    compact_ceilings,
    initial_state,
)
from aka.agent.parallel import EvalSlot, plan_slots
from aka.agent.records import (
    BudgetLimits,
    BudgetUsage,
    CandidateRecord,
    Decision,
    DropoutEvent,
    KBSnippet,
    ProfileReport,
    Proposer,
    RoundPoint,
    RunRecord,
)
from aka.agent.runtime import atomic_write
from aka.agent.state import AgentState, RunOptions
from aka.core import AgentError, NotFoundError, ProgressCallback, Settings, SpecError

__all__ = ["RunOutcome", "new_run_id", "plan_run", "resume_run", "run_optimize"]

_OPTIONS = "options.json"
_CHECKPOINT = "checkpoint.sqlite"


@dataclass(frozen=True)
class RunOutcome:
    """A finished run."""

    run_id: str
    run_dir: Path
    record: RunRecord

    @property
    def produced_kernel(self) -> bool:
        """Whether a correct kernel was produced (the CLI's exit code 0)."""
        return self.record.incumbent_id is not None


def new_run_id() -> str:
    """Return a sortable, unique run id such as ``20261202-235959-3fa2c1``."""
    return datetime.now(UTC).strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(3)


def plan_run(
    settings: Settings,
    problem_path: Path,
    *,
    out: Path | None = None,
    model: str | None = None,
    api_base: str | None = None,
    dsl: str = "triton",
    from_kernel: Path | None = None,
    device: str = "auto",
    use_kb: bool = True,
    run_id: str | None = None,
) -> RunOptions:
    """Validate the request and return the options of a new run (nothing runs yet).

    Raises:
        SpecError: A path does not exist or an option is invalid (says which and how to fix it).
    """
    if not problem_path.exists():
        raise SpecError("problem not found; check the path", file=str(problem_path))
    if from_kernel is not None and not from_kernel.is_file():
        raise SpecError("--from kernel not found; check the path", file=str(from_kernel))
    if dsl not in ("triton", "cuda"):
        raise SpecError(f"--dsl must be triton or cuda, not {dsl!r}", field="--dsl")
    if dsl == "cuda" and not (model or settings.llm.model):
        raise SpecError(
            "--dsl cuda needs a model (--model): the offline search only has Triton kernels",
            field="--dsl",
        )
    if device not in ("auto", "cpu", "cuda"):
        raise SpecError(f"--device must be auto, cpu or cuda, not {device!r}", field="--device")
    rid = run_id or new_run_id()
    run_dir = (out if out is not None else settings.paths.runs_dir / rid).resolve()
    if run_dir.exists() and any(run_dir.iterdir()):
        raise SpecError(
            "the run directory already exists and is not empty; pick another --out, or "
            "continue it with --resume",
            file=str(run_dir),
        )
    return RunOptions(
        run_id=rid,
        problem_path=str(problem_path.resolve()),
        out_dir=str(run_dir),
        model=model or settings.llm.model,
        api_base=api_base or settings.llm.api_base,
        dsl=dsl,
        from_kernel=str(from_kernel.resolve()) if from_kernel else None,
        device=device,
        use_kb=use_kb,
        agent=settings.agent.model_dump(mode="json"),
    )


# ---------------------------------------------------------------- default parts
def _retriever(settings: Settings, progress: ProgressCallback | None) -> Any:
    """Open the KB index, building it first when it is missing (works on a fresh clone)."""
    from aka.core import IndexNotBuiltError
    from aka.kb.build import build_index, open_retriever

    try:
        return open_retriever(settings)
    except IndexNotBuiltError:
        build_index(settings, progress=progress)
        return open_retriever(settings)


def _kb_context(rt: AgentRuntime, op_family: str | None) -> list[dict[str, Any]]:
    if rt.retriever is None:
        return []
    problem = rt.problem
    query = " ".join(
        p for p in (problem.name, problem.description or "", op_family or "", "kernel") if p
    )
    hits = rt.retriever.search(query, k=rt.settings.kb.top_k)
    return [
        KBSnippet(id=h.id, title=h.title, kind=h.kind, text=h.text[:1200]).model_dump()
        for h in hits
    ]


def _default_setup(rt: AgentRuntime) -> dict[str, Any]:
    """Op family (spec, else inferred), the input signature (search) and KB context."""
    update: dict[str, Any] = {"notes": []}
    family = rt.problem.op_family.value if rt.problem.op_family else None
    inferred = False
    if family is None:
        from aka.agent.search import infer_op_family

        family, evidence = infer_op_family(rt.problem.reference_code, rt.retriever)
        inferred = True
        update["notes"].append(f"op family inferred from the reference: {family} ({evidence})")
    update["op_family"] = family
    update["op_family_inferred"] = inferred
    if rt.needs_signature:
        signature = rt.scorer.input_signature(rt.problem)  # type: ignore[attr-defined]
        update["signature"] = signature.model_dump(mode="json")
    update["kb"] = _kb_context(rt, family)
    update["hardware"] = _hardware_facts(rt)
    return update


def _hardware_facts(rt: AgentRuntime) -> dict[str, Any]:
    """Datasheet facts for the first prompt; the first evaluation replaces them with measured ones.

    The name comes from ``nvidia-smi``, so the agent process never opens a CUDA context.
    """
    if rt.scorer.cpu:
        return {"mode": "cpu_interpreter", "note": "no CUDA device: nothing is timed"}
    from aka.hardware import gpu_name
    from aka.hardware.ceilings import datasheet_ceilings

    name = gpu_name(rt.scorer.gpu_index if hasattr(rt.scorer, "gpu_index") else 0)
    if name is None:
        return {}
    sheet = datasheet_ceilings(name)
    facts: dict[str, Any] = {"device": name, "mode": "gpu"}
    if sheet is not None:
        facts["ceilings"] = compact_ceilings(sheet.model_dump(mode="json"))
    return facts


def _default_proposer(
    settings: Settings, options: RunOptions, retriever: Any
) -> Callable[[AgentState], Proposer]:
    def factory(state: AgentState) -> Proposer:
        if options.model:
            from aka.agent.llm import LLMProposer, PromptLimits

            llm = settings.llm.model_copy(update={"model": options.model})
            if options.api_base:
                llm = llm.model_copy(update={"api_base": options.api_base})
            limits = PromptLimits(history_lines=settings.agent.max_history_prompt)
            return LLMProposer(llm, limits=limits, seed=settings.agent.seed)
        from aka.agent.search import SearchProposer
        from aka.bench.signature import InputSignature

        if not state.get("signature"):
            raise AgentError("the search proposer needs the problem's input signature (setup)")
        return SearchProposer(
            settings.paths.root / "reference_kernels",
            InputSignature.model_validate(state["signature"]),
            retriever=retriever,
            seed=settings.agent.seed,
            op_family=state.get("op_family"),
        )

    return factory


def _default_profile(rt: AgentRuntime) -> Callable[[str, str, Any], ProfileReport]:
    def profile(cid: str, source: str, result_json: dict[str, Any]) -> ProfileReport:
        from aka.agent.profile import diagnose
        from aka.bench import EvalResult

        result = EvalResult.model_validate(result_json)
        data = None
        profile_data = getattr(rt.scorer, "profile", None)
        if not rt.scorer.cpu and profile_data is not None:
            timed = [r for r in result.shapes if r.latency_us is not None]
            slowest = max(
                timed, key=lambda r: r.latency_us.median if r.latency_us else 0.0, default=None
            )
            data = profile_data(
                rt.problem,
                source,
                shape_id=slowest.shape_id if slowest else None,
                ncu=None if rt.settings.agent.ncu else False,
            )
        return diagnose(cid, result, data, result.manifest.ceilings or None)

    return profile


def _record(rt: AgentRuntime, state: AgentState) -> RunRecord:
    from aka import __version__

    final_tune = state.get("incumbent_result")
    device = None
    if final_tune:
        device = (final_tune.get("manifest") or {}).get("device")
    return RunRecord(
        run_id=rt.options.run_id,
        aka_version=__version__,
        problem_name=rt.problem.name,
        problem_path=rt.options.problem_path,
        problem_sha256=rt.problem.problem_hash(),
        op_family=state.get("op_family"),
        op_family_inferred=bool(state.get("op_family_inferred")),
        proposer=f"llm:{rt.options.model}" if rt.options.model else "search",
        dsl=rt.options.dsl,
        mode="cpu_interpreter" if rt.scorer.cpu else "gpu",
        performance_measured=not rt.scorer.cpu,
        device=device,
        workers=len(rt.eval_slots()),
        worker_gpus=[s.gpu for s in rt.eval_slots() if s.gpu is not None],
        started_at=state.get("started_at", ""),
        finished_at=state.get("finished_at"),
        stop_reason=state.get("stop_reason") or "unknown",
        limits=BudgetLimits.model_validate(state.get("limits") or {"max_iters": 0}),
        usage=BudgetUsage.model_validate(state.get("usage") or {}),
        seed=rt.settings.agent.seed,
        incumbent_id=state.get("incumbent_id"),
        candidates=[CandidateRecord.model_validate(r) for r in state.get("records", [])],
        decisions=[Decision.model_validate(d) for d in state.get("decisions", [])],
        dropouts=[DropoutEvent.model_validate(d) for d in state.get("dropouts", [])],
        rounds=[RoundPoint.model_validate(p) for p in state.get("rounds", [])],
        profiles=[ProfileReport.model_validate(p) for p in state.get("profiles", [])],
        final_tune=final_tune,
        final_holdout=state.get("final_holdout"),
        notes=list(state.get("notes", [])),
    )


def _write_outputs(rt: AgentRuntime, state: AgentState) -> None:
    from aka.agent.report import problem_dtypes, write_run_dir

    write_run_dir(
        rt.run_dir,
        _record(rt, state),
        kernel_source=state.get("incumbent_source"),
        dtypes=problem_dtypes(rt.problem),
    )


def _scorer_gpu(scorer: ScorerLike) -> str | None:
    """The GPU a given scorer's workers are pinned to (None on the CPU or for a fake)."""
    index = getattr(scorer, "gpu_index", None)
    if scorer.cpu or not isinstance(index, int):
        return None
    from aka.core import HardwareError
    from aka.hardware import worker_device

    try:
        return worker_device(index)
    except HardwareError:
        return None


def _build_slots(
    settings: Settings, options: RunOptions
) -> tuple[list[EvalSlot[ScorerLike]], str | None]:
    """One real scorer per evaluation slot (``AgentConfig.workers``), slot 0 on visible GPU 0."""
    from aka.bench import Scorer
    from aka.hardware import visible_gpus

    bench, cache = settings.bench, settings.paths.cache_dir
    first = Scorer(bench, cache, device=options.device)
    device: Literal["cpu", "cuda"] = "cpu" if first.cpu else "cuda"
    visible = [] if first.cpu else visible_gpus()
    plan = plan_slots(settings.agent.workers, cpu=first.cpu, visible=visible)
    slots: list[EvalSlot[ScorerLike]] = []
    for n, index in enumerate(plan.indices):
        scorer = first if n == 0 else Scorer(bench, cache, device=device, gpu_index=index)
        slots.append(EvalSlot(n, plan.gpus[n] if plan.gpus else None, scorer))
    return slots, plan.note


# ---------------------------------------------------------------- run / resume
def build_runtime(
    settings: Settings,
    options: RunOptions,
    *,
    progress: ProgressCallback | None = None,
    scorer: ScorerLike | None = None,
    proposer_factory: Callable[[AgentState], Proposer] | None = None,
    retriever: Any = None,
    slots: Sequence[EvalSlot[ScorerLike]] | None = None,
) -> AgentRuntime:
    """Assemble the runtime of a run: problem, scorers, retriever, proposer, hooks.

    Without ``scorer`` and ``slots`` it builds one real scorer per evaluation slot
    (``AgentConfig.workers``: one per visible GPU). ``slots`` (tests: fake scorers on fake GPUs)
    replaces them; slot 0's scorer is the run's ``scorer`` unless one is given.
    """
    from aka.spec import load_problem

    settings = settings.model_copy(
        update={"agent": settings.agent.model_validate(options.agent or {})}
    )
    problem = load_problem(Path(options.problem_path))
    note = None
    if slots:
        slot_list = list(slots)
        scorer = scorer if scorer is not None else slot_list[0].scorer
    elif scorer is not None:
        slot_list = [EvalSlot(0, _scorer_gpu(scorer), scorer)]
    else:
        slot_list, note = _build_slots(settings, options)
        scorer = slot_list[0].scorer
    if retriever is None and options.use_kb:
        retriever = _retriever(settings, progress)
    rt = AgentRuntime(
        settings=settings,
        options=options,
        problem=problem,
        scorer=scorer,
        proposer_factory=proposer_factory or _default_proposer(settings, options, retriever),
        retriever=retriever,
        progress=progress,
        setup_hook=_default_setup,
        finalize_hook=_write_outputs,
        needs_signature=proposer_factory is None and not options.model,
        slots=slot_list,
        slot_note=note,
    )
    rt.profile_fn = _default_profile(rt)
    return rt


def _registry(settings: Settings) -> Path:
    return settings.paths.runs_dir / ".index"


def _invoke(rt: AgentRuntime, *, resume: bool) -> RunOutcome:
    from langgraph.checkpoint.sqlite import SqliteSaver

    rt.run_dir.mkdir(parents=True, exist_ok=True)
    config: dict[str, Any] = {
        "configurable": {"thread_id": rt.options.run_id},
        "recursion_limit": 10 * rt.settings.agent.max_iters + 50,
    }
    conn = sqlite3.connect(rt.run_dir / _CHECKPOINT, check_same_thread=False)
    try:
        app = build_graph(rt, SqliteSaver(conn))
        if resume:
            snapshot = app.get_state(config)
            if not snapshot.values:
                raise AgentError(
                    f"run {rt.options.run_id} has no checkpoint yet; start it again instead"
                )
            if snapshot.next:
                app.invoke(None, config, durability="sync")
        else:
            # "sync": a node's checkpoint is on disk before the next node starts, so a kill at
            # any point loses at most the node that was running.
            app.invoke(initial_state(rt), config, durability="sync")
        values: AgentState = app.get_state(config).values
    finally:
        conn.close()
    record = _record(rt, values)
    return RunOutcome(rt.options.run_id, rt.run_dir, record)


def run_optimize(
    settings: Settings,
    options: RunOptions,
    *,
    progress: ProgressCallback | None = None,
    scorer: ScorerLike | None = None,
    proposer_factory: Callable[[AgentState], Proposer] | None = None,
    retriever: Any = None,
    slots: Sequence[EvalSlot[ScorerLike]] | None = None,
) -> RunOutcome:
    """Run a new optimization to the end and write its run directory.

    Raises:
        SpecError: The problem is invalid.
        AgentError: The ``--from`` kernel was rejected, or the loop failed.
        BenchError: The scorer's harness failed.
    """
    run_dir = options.run_dir
    atomic_write(run_dir / _OPTIONS, options.model_dump_json(indent=2))
    atomic_write(_registry(settings) / options.run_id, str(run_dir))
    rt = build_runtime(
        settings,
        options,
        progress=progress,
        scorer=scorer,
        proposer_factory=proposer_factory,
        retriever=retriever,
        slots=slots,
    )
    return _invoke(rt, resume=False)


def find_run(settings: Settings, run_ref: str) -> Path:
    """Return the directory of a run given its id or its directory.

    Raises:
        NotFoundError: No such run.
    """
    as_path = Path(run_ref)
    if (as_path / _OPTIONS).is_file():
        return as_path.resolve()
    pointer = _registry(settings) / run_ref
    if pointer.is_file():
        return Path(pointer.read_text().strip())
    default = settings.paths.runs_dir / run_ref
    if (default / _OPTIONS).is_file():
        return default
    raise NotFoundError(
        f"no run {run_ref!r}: not a run directory and not a run id under "
        f"{settings.paths.runs_dir}; pass the run directory itself"
    )


def load_options(run_dir: Path) -> RunOptions:
    """Read a run's ``options.json``."""
    return RunOptions.model_validate(json.loads((run_dir / _OPTIONS).read_text()))


def resume_run(
    settings: Settings,
    run_ref: str,
    *,
    progress: ProgressCallback | None = None,
    scorer: ScorerLike | None = None,
    proposer_factory: Callable[[AgentState], Proposer] | None = None,
    retriever: Any = None,
    slots: Sequence[EvalSlot[ScorerLike]] | None = None,
) -> RunOutcome:
    """Continue a run from its last checkpoint (a finished run just returns its outcome).

    Raises:
        NotFoundError: No such run.
        AgentError: The run never reached its first checkpoint.
    """
    options = load_options(find_run(settings, run_ref))
    rt = build_runtime(
        settings,
        options,
        progress=progress,
        scorer=scorer,
        proposer_factory=proposer_factory,
        retriever=retriever,
        slots=slots,
    )
    return _invoke(rt, resume=True)
