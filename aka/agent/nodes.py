"""The graph's seven nodes: setup, propose, evaluate, profile, decide, dropout, finalize.

Each node reads the JSON state, does its one job through ``AgentRuntime`` and returns a partial
update; ``aka.agent.graph`` wires them and checkpoints after each. ``stop_reason_for`` is the one
place that decides whether the loop ends (the decide router and finalize both ask it).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from aka.agent.budget import limits_from_config, stop_reason
from aka.agent.decide import best_of_round, decide
from aka.agent.dropout import apply_dropout, stalled_families
from aka.agent.parallel import EvalSlot, SlotOutcome, run_in_slots
from aka.agent.records import (
    BudgetUsage,
    CandidateRecord,
    KBSnippet,
    ProfileReport,
    Proposal,
    ProposalContext,
    RoundPoint,
    ShapeSummary,
)
from aka.agent.runtime import (
    AgentRuntime,
    ScorerLike,
    compact_ceilings,
    now,
    sha256,
    write_artifact,
)
from aka.agent.state import AgentState
from aka.bench.stats import geomean
from aka.core import AgentError, LLMError, ProgressCallback, ProgressEvent

__all__ = [
    "node_decide",
    "node_dropout",
    "node_evaluate",
    "node_finalize",
    "node_profile",
    "node_propose",
    "node_setup",
    "stop_reason_for",
    "summarize",
]


def _records(state: AgentState) -> list[CandidateRecord]:
    return [CandidateRecord.model_validate(r) for r in state.get("records", [])]


def _usage(state: AgentState) -> BudgetUsage:
    return BudgetUsage.model_validate(state.get("usage") or {})


# ---------------------------------------------------------------- result summaries
def _geomean(values: list[float]) -> float | None:
    """Geometric mean of the positive values; None when there are none."""
    positive = [v for v in values if v is not None and v > 0]
    return geomean(positive) if positive else None


def summarize(
    result: Any, *, cid: str, round_: int, proposal: Proposal, source_path: str | None
) -> CandidateRecord:
    """Turn a scorer ``EvalResult`` into the history's ``CandidateRecord``."""
    shapes = []
    for row in result.shapes:
        lat = row.latency_us.median if row.latency_us else None
        shapes.append(
            ShapeSummary(
                shape_id=row.shape_id,
                verdict=str(row.verdict),
                latency_us=lat,
                sol_fraction=row.sol_fraction,
                speedup_eager=row.speedup_vs.get("eager"),
                speedup_compile=row.speedup_vs.get("torch_compile"),
                bound=row.bound,
                max_abs_err=row.max_abs_err,
            )
        )
    failure = result.failure
    message = ""
    lesson = None
    if failure is not None:
        message = failure.message.strip().splitlines()[0][:300] if failure.message else ""
        if failure.findings:
            message += " [" + ", ".join(f"{f.rule}@{f.line}" for f in failure.findings[:5]) + "]"
        if str(failure.kind) in {"wrong_output", "non_finite", "mutated_input", "bad_structure"}:
            lesson = f"{failure.kind}: {message}"[:400]
    return CandidateRecord(
        id=cid,
        round=round_,
        origin=proposal.origin,
        family=proposal.family,
        params=proposal.params,
        source_sha256=sha256(proposal.source or ""),
        source_path=source_path,
        verdict=str(result.verdict),
        score=result.score if result.performance_measured else None,
        speedup_eager=_geomean([s.speedup_eager for s in shapes if s.speedup_eager]),
        speedup_compile=_geomean([s.speedup_compile for s in shapes if s.speedup_compile]),
        shapes=shapes,
        message=message,
        lesson=lesson,
    )


# ---------------------------------------------------------------- nodes
def node_setup(rt: AgentRuntime, state: AgentState) -> dict[str, Any]:
    """Load the problem facts, the knowledge-base context and the ``--from`` incumbent."""
    rt.event("setup", f"setting up {rt.problem.name}", state)
    update: dict[str, Any] = {"round": 0, "records": [], "notes": list(state.get("notes", []))}
    if rt.setup_hook is not None:
        update.update(rt.setup_hook(rt))
    update.setdefault("kb", [])
    update["mode"] = "cpu_interpreter" if rt.scorer.cpu else "gpu"
    update["performance_measured"] = not rt.scorer.cpu
    if rt.scorer.cpu:
        update["notes"].append(
            "No CUDA device: candidates ran in Triton's CPU interpreter; correctness was checked, "
            "performance was not measured."
        )
    if rt.slot_note:
        update["notes"].append(rt.slot_note)
    slots = rt.eval_slots()
    if len(slots) > 1:
        where = "GPUs " + ", ".join(str(s.gpu) for s in slots) if not rt.scorer.cpu else "the CPU"
        rt.event("setup", f"scoring {len(slots)} candidates at once on {where}", state,
                 workers=len(slots), gpus=[s.gpu for s in slots])  # fmt: skip
    if rt.options.from_kernel:
        source = Path(rt.options.from_kernel).read_text()
        proposal = Proposal(source=source, family="from", origin=f"from:{rt.options.from_kernel}")
        rt.event("setup", "scoring the --from kernel", state)
        result = rt.scorer.evaluate(
            rt.problem, source, shape_ids=rt.tune_ids(), progress=rt.progress
        )
        rel = write_artifact(rt.run_dir, "candidates/from.py", source)
        record = summarize(result, cid="from", round_=0, proposal=proposal, source_path=rel)
        if not record.correct:
            raise AgentError(
                f"the --from kernel {rt.options.from_kernel} was rejected by the scorer "
                f"({record.verdict}: {record.message}); fix it or start without --from"
            )
        update["records"] = [record.model_dump(mode="json")]
        update["incumbent_id"] = "from"
        update["incumbent_source"] = source
        update["incumbent_result"] = result.model_dump(mode="json")
    rt.event("setup", "ready", state, op_family=update.get("op_family"))
    return update


def _context(rt: AgentRuntime, state: AgentState) -> ProposalContext:
    records = _records(state)
    incumbent = next((r for r in records if r.id == state.get("incumbent_id")), None)
    profile = state.get("incumbent_profile")
    problem = rt.problem
    return ProposalContext(
        problem_name=problem.name,
        problem_path=rt.options.problem_path,
        op_family=state.get("op_family"),
        description=problem.description or "",
        reference_source=problem.reference_code,
        forward_signature=f"forward(self, {', '.join(problem.forward_params)})",
        init_signature=f"__init__(self{''.join(', ' + p for p in problem.init_params)})",
        dsl=rt.options.dsl,
        hardware=state.get("hardware") or {},
        performance_measured=bool(state.get("performance_measured")),
        round=state.get("round", 0) + 1,
        n=rt.settings.agent.candidates_per_round,
        seed=rt.settings.agent.seed,
        incumbent=incumbent,
        incumbent_source=state.get("incumbent_source"),
        history=[r for r in records if not r.masked][-rt.settings.agent.max_history_prompt * 4 :],
        profile=ProfileReport.model_validate(profile) if profile else None,
        kb=[KBSnippet.model_validate(k) for k in state.get("kb", [])],
        conversation=list(state.get("conversation", [])),
        forbidden_families=list(state.get("forbidden_families", [])),
        tried_sources=[r.source_sha256 for r in records if r.source_sha256],
    )


def node_propose(rt: AgentRuntime, state: AgentState) -> dict[str, Any]:
    """Ask the proposer for this round's candidates."""
    ctx = _context(rt, state)
    proposer = rt.proposer(state)
    rt.event("propose", f"round {ctx.round}: asking {proposer.name} for {ctx.n}", state)
    usage = _usage(state)
    try:
        batch = proposer.propose(ctx)
    except LLMError as err:
        rt.event("propose", f"the model failed: {err}", state)
        return {"pending": [], "exhausted": True, "stop_reason": "llm_error", "round": ctx.round,
                "notes": [*state.get("notes", []), f"round {ctx.round}: {err}"]}  # fmt: skip
    usage.tokens = usage.tokens + batch.usage
    notes = list(state.get("notes", []))
    notes.extend(n for n in batch.notes if n not in notes)
    pending = []
    for proposal in batch.proposals[: ctx.n]:
        if proposal.source is not None and proposal.family in ctx.forbidden_families:
            proposal = proposal.model_copy(
                update={
                    "error": f"family '{proposal.family}' is forbidden after the dropout "
                    f"(forbidden: {', '.join(ctx.forbidden_families)})",
                    "source": None,
                }
            )
        pending.append(proposal.model_dump(mode="json"))
    update: dict[str, Any] = {
        "round": ctx.round,
        "pending": pending,
        "usage": usage.model_dump(mode="json"),
        "conversation": [*state.get("conversation", []), *batch.messages],
        "forbidden_families": [],  # applies to one proposal round only
        "exhausted": not batch.proposals,
        "notes": notes,
    }
    rt.event("propose", f"round {ctx.round}: {len(pending)} candidate(s)", state)
    return update


def _unscored(cid: str, round_: int, proposal: Proposal) -> CandidateRecord:
    """The record of a proposal that never reached the scorer (no source, or a repeat)."""
    why = proposal.error or "the same source was evaluated before"
    return CandidateRecord(
        id=cid,
        round=round_,
        origin=proposal.origin,
        family=proposal.family,
        params=proposal.params,
        source_sha256=sha256(proposal.source) if proposal.source else None,
        verdict="proposal_failed" if proposal.source is None else "duplicate",
        message=why[:300],
    )


def _hardware_from(result: Any, hardware: dict[str, Any]) -> dict[str, Any]:
    """Replace datasheet facts with the scorer's measured ceilings once they exist."""
    measured = (hardware.get("ceilings") or {}).get("source") == "measured"
    if measured or not (result.manifest.device and result.manifest.ceilings):
        return hardware
    return {
        "device": result.manifest.device,
        "ceilings": compact_ceilings(result.manifest.ceilings),
        "mode": result.manifest.mode,
    }


@dataclass(frozen=True)
class _Job:
    """One proposal of the round that goes to the scorer."""

    cid: str
    proposal: Proposal
    source_path: str


def _score_one(
    rt: AgentRuntime,
    state: AgentState,
    slot: EvalSlot[ScorerLike],
    job: _Job,
    relay: ProgressCallback,
) -> tuple[CandidateRecord, Any]:
    """Score one proposal on the tune shapes in ``slot``; return its record and ``EvalResult``.

    Runs in the slot's thread: events go through ``relay`` (the calling thread emits them).
    """
    where = f" on GPU {slot.gpu}" if slot.gpu is not None and len(rt.eval_slots()) > 1 else ""
    relay(
        rt.make_event(
            "evaluate",
            f"scoring {job.cid} ({job.proposal.family}){where}",
            state,
            candidate=job.cid,
            worker=slot.index,
            gpu=slot.gpu,
        )
    )
    tag = {"candidate": job.cid, "worker": slot.index, "gpu": slot.gpu}

    def tagged(event: ProgressEvent) -> None:  # scorer events say whose they are
        relay(replace(event, data={**event.data, **tag}))

    start = time.monotonic()
    result = slot.scorer.evaluate(
        rt.problem, job.proposal.source or "", shape_ids=rt.tune_ids(), progress=tagged
    )
    round_ = state.get("round", 0)
    record = summarize(
        result, cid=job.cid, round_=round_, proposal=job.proposal, source_path=job.source_path
    )
    record.worker, record.gpu = slot.index, slot.gpu
    if not rt.scorer.cpu:
        record.gpu_s = time.monotonic() - start
    return record, result


def _verdict_event(rt: AgentRuntime, state: AgentState, record: CandidateRecord) -> None:
    score = f" S={record.score:.3f}" if record.score else ""
    rt.event("evaluate", f"{record.id}: {record.verdict}{score}", state, candidate=record.id,
             verdict=record.verdict, score=record.score, worker=record.worker,
             gpu=record.gpu)  # fmt: skip


def node_evaluate(rt: AgentRuntime, state: AgentState) -> dict[str, Any]:
    """Score every pending candidate on the tune shapes (each in fresh sandboxed workers).

    The candidates are spread over the evaluation slots (one per GPU, ``AgentConfig.workers``),
    each slot scoring one at a time; records come back in the proposals' order whatever order the
    evaluations finish in. A harness failure (an exception, not a verdict) is raised once every
    other candidate of the round has been scored.
    """
    round_ = state.get("round", 0)
    records = list(state.get("records", []))
    tried = {r.get("source_sha256") for r in records}
    usage = _usage(state)
    hardware = dict(state.get("hardware") or {})
    plan: list[tuple[str, Proposal, _Job | None]] = []
    for i, raw in enumerate(state.get("pending", [])):
        proposal = Proposal.model_validate(raw)
        cid = f"c{round_}_{i}"
        for kind, text in (("prompts", proposal.prompt), ("replies", proposal.reply)):
            if text:
                write_artifact(rt.run_dir, f"{kind}/{cid}.md", text)
        job = None
        if proposal.source is not None and sha256(proposal.source) not in tried:
            tried.add(sha256(proposal.source))  # a repeat later in the same round is a duplicate
            rel = write_artifact(rt.run_dir, f"candidates/{cid}.py", proposal.source)
            job = _Job(cid, proposal, rel)
        plan.append((cid, proposal, job))
    jobs = [job for _, _, job in plan if job is not None]

    def done(_i: int, outcome: SlotOutcome[tuple[CandidateRecord, Any]]) -> None:
        if outcome.value is not None:
            _verdict_event(rt, state, outcome.value[0])

    start = time.monotonic()
    outcomes = run_in_slots(
        rt.eval_slots(),
        jobs,
        lambda slot, job, relay: _score_one(rt, state, slot, job, relay),
        progress=rt.progress,
        on_done=done,
    )
    usage.eval_wall_s += time.monotonic() - start
    failed = next((o for o in outcomes if o.error is not None), None)
    if failed is not None and failed.error is not None:
        raise failed.error
    scored = {job.cid: o.value for job, o in zip(jobs, outcomes, strict=True) if o.value}
    ids: list[str] = []
    results: dict[str, dict[str, Any]] = {}
    for cid, proposal, job in plan:
        if job is None:
            record = _unscored(cid, round_, proposal)
            _verdict_event(rt, state, record)
        else:
            record, result = scored[cid]
            hardware = _hardware_from(result, hardware)
            usage.gpu_s += record.gpu_s
            results[cid] = {"result": result.model_dump(mode="json"), "source": proposal.source}
        usage.candidates += 1
        records.append(record.model_dump(mode="json"))
        ids.append(cid)
    return {
        "records": records,
        "round_ids": ids,
        "round_results": results,
        "pending": [],
        "usage": usage.model_dump(mode="json"),
        "hardware": hardware,
    }


def node_profile(rt: AgentRuntime, state: AgentState) -> dict[str, Any]:
    """Diagnose the round's best correct candidate (roofline position, compiler, ncu)."""
    round_ids = set(state.get("round_ids", []))
    best = best_of_round([r for r in _records(state) if r.id in round_ids])
    if best is None or rt.profile_fn is None:
        return {}
    entry = state.get("round_results", {}).get(best.id)
    if entry is None:
        return {}
    rt.event("profile", f"profiling {best.id}", state, candidate=best.id)
    report = rt.profile_fn(best.id, entry["source"], entry["result"])
    rt.event("profile", report.summary.splitlines()[0] if report.summary else "", state)
    return {"profiles": [*state.get("profiles", []), report.model_dump(mode="json")]}


def _remeasure(
    rt: AgentRuntime, state: AgentState, incumbent: CandidateRecord, candidate: CandidateRecord
) -> tuple[Any, float]:
    """Run the paired ABAB re-measurement (GPU only); return the comparison and its seconds."""
    if rt.scorer.cpu or not state.get("incumbent_source"):
        return None, 0.0
    entry = state.get("round_results", {}).get(candidate.id, {})
    rt.event("decide", f"re-measuring {incumbent.id} vs {candidate.id} (ABAB)", state)
    start = time.monotonic()
    comparison = rt.scorer.compare(
        rt.problem,
        state.get("incumbent_source") or "",
        entry.get("source", ""),
        shape_ids=rt.tune_ids(),
        pairs=rt.settings.agent.pairs,
        progress=rt.progress,
    )
    return comparison, time.monotonic() - start


def _promote(state: AgentState, candidate: CandidateRecord, round_: int) -> dict[str, Any]:
    """The state update that makes ``candidate`` the incumbent."""
    entry = state["round_results"][candidate.id]
    update: dict[str, Any] = {
        "incumbent_id": candidate.id,
        "incumbent_source": entry["source"],
        "incumbent_result": entry["result"],
        "stall": 0,
        "last_promotion_round": round_,
    }
    profiles = state.get("profiles", [])
    if profiles and profiles[-1].get("candidate_id") == candidate.id:
        update["incumbent_profile"] = profiles[-1]
    return update


def node_decide(rt: AgentRuntime, state: AgentState) -> dict[str, Any]:
    """Promote the round's best candidate only if an interleaved re-measure says it is faster."""
    round_ = state.get("round", 0)
    records = _records(state)
    round_ids = set(state.get("round_ids", []))
    candidate = best_of_round([r for r in records if r.id in round_ids])
    incumbent = next((r for r in records if r.id == state.get("incumbent_id")), None)
    usage = _usage(state)
    comparison = None
    if candidate is not None and incumbent is not None:
        comparison, spent = _remeasure(rt, state, incumbent, candidate)
        usage.gpu_s += spent
    pairs = [s.model_dump(mode="json") for s in getattr(comparison, "shapes", [])]
    decision = decide(round_, candidate, incumbent, comparison,
                      noise_floor=rt.settings.agent.noise_floor, pairs=pairs)  # fmt: skip
    update: dict[str, Any] = {"decisions": [*state.get("decisions", []), decision.model_dump()]}
    if decision.promoted and candidate is not None:
        update.update(_promote(state, candidate, round_))
        incumbent = candidate
    else:
        update["stall"] = state.get("stall", 0) + 1
    usage.iters = round_
    update["usage"] = usage.model_dump(mode="json")
    point = RoundPoint(
        round=round_,
        best_sol=incumbent.score if incumbent else None,
        best_speedup_eager=incumbent.speedup_eager if incumbent else None,
        incumbent_id=incumbent.id if incumbent else None,
        promoted=decision.promoted,
    )
    update["rounds"] = [*state.get("rounds", []), point.model_dump()]
    verb = "promoted " if decision.promoted else "kept incumbent: "
    rt.event("decide", verb + decision.reason, state, promoted=decision.promoted,
             incumbent=point.incumbent_id, best_sol=point.best_sol,
             speedup_eager=point.best_speedup_eager, stall=update.get("stall", 0))  # fmt: skip
    return update


def node_dropout(rt: AgentRuntime, state: AgentState) -> dict[str, Any]:
    """Drop the conversation, mask a seeded share of the history, forbid the stalled families."""
    round_ = state.get("round", 0)
    records = _records(state)
    incumbent = next((r for r in records if r.id == state.get("incumbent_id")), None)
    since = state.get("last_promotion_round", 0) + 1
    forbidden = stalled_families(records, since, incumbent)
    conversation = state.get("conversation", [])
    updated, event = apply_dropout(
        records,
        incumbent_id=state.get("incumbent_id"),
        round_=round_,
        fraction=rt.settings.agent.dropout_mask_fraction,
        seed=rt.settings.agent.seed,
        forbidden=forbidden,
        cleared_messages=len(conversation),
    )
    rounds = list(state.get("rounds", []))
    if rounds:
        rounds[-1] = {**rounds[-1], "dropout": True}
    rt.event(
        "dropout",
        f"stalled {state.get('stall', 0)} rounds: masked {len(event.masked_ids)} records, "
        f"forbidding {', '.join(forbidden) or 'nothing'}",
        state,
        masked=event.masked_ids,
        forbidden=forbidden,
    )
    return {
        "records": [r.model_dump(mode="json") for r in updated],
        "dropouts": [*state.get("dropouts", []), event.model_dump()],
        "conversation": [],
        "forbidden_families": forbidden,
        "stall": 0,
        "rounds": rounds,
    }


def node_finalize(rt: AgentRuntime, state: AgentState) -> dict[str, Any]:
    """Score the incumbent on the holdout shapes and write the run directory."""
    reason = state.get("stop_reason") or stop_reason_for(rt, state) or "done"
    update: dict[str, Any] = {"stop_reason": reason, "finished_at": now()}
    rt.event("finalize", f"stopping: {reason}", state, stop_reason=reason)
    problem, holdout = rt.holdout_problem()
    source = state.get("incumbent_source")
    notes = list(state.get("notes", []))
    if source and holdout:
        rt.event("finalize", f"scoring the incumbent on {len(holdout)} holdout shapes", state)
        start = time.monotonic()
        result = rt.scorer.evaluate(
            problem,
            source,
            shape_ids=holdout,
            progress=rt.progress,
            cold_recheck=rt.scorer.wants_cold_recheck,
        )
        usage = _usage(state)
        usage.gpu_s += time.monotonic() - start
        update["usage"] = usage.model_dump(mode="json")
        update["final_holdout"] = result.model_dump(mode="json")
    elif source:
        notes.append("No holdout shapes were scored (none defined, or the CPU interpreter).")
    if not source:
        notes.append("No correct kernel was found.")
    update["notes"] = notes
    if rt.finalize_hook is not None:
        rt.finalize_hook(rt, {**state, **update})  # type: ignore[typeddict-item]
    return update


# ---------------------------------------------------------------- routing
def _incumbent_sol(state: AgentState) -> float | None:
    inc = next(
        (r for r in state.get("records", []) if r.get("id") == state.get("incumbent_id")), None
    )
    return inc.get("score") if inc else None


def stop_reason_for(rt: AgentRuntime, state: AgentState) -> str | None:
    """Return why the run stops now (a budget, the target SOL, no ideas, CPU done), or None."""
    if state.get("stop_reason"):
        return state["stop_reason"]
    reason = stop_reason(
        limits_from_config(rt.settings.agent), _usage(state), _incumbent_sol(state)
    )
    if reason:
        return reason
    if state.get("exhausted"):
        return "no_ideas"
    if rt.scorer.cpu and state.get("incumbent_id") and rt.settings.agent.cpu_stop_when_correct:
        return "correct_kernel_cpu"
    return None
