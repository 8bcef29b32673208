"""The loop's routing, promotions, dropout and budgets, with an in-process scripted proposer.

The scorer here is ``SyntheticScorer`` (verdicts and latencies from comments), so these tests cover
the graph layer alone; the real scorer and a real LLM protocol run in test_loop_llm.py.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from aka.agent.records import Proposal, ProposalBatch, ProposalContext, TokenUsage
from aka.agent.runner import plan_run, resume_run, run_optimize
from aka.core import AgentError, Settings, load_settings
from tests.fakes.scorer import SyntheticScorer

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = ROOT / "configs" / "examples" / "rms_norm" / "op.yaml"


def kernel(latency: float | None = None, verdict: str | None = None, tag: str = "") -> str:
    lines = ["class ModelNew:", "    pass", f"# tag: {tag}"]
    if latency is not None:
        lines.append(f"# fake-latency-us: {latency}")
    if verdict is not None:
        lines.append(f"# fake-verdict: {verdict}")
    return "\n".join(lines) + "\n"


class ScriptedProposer:
    """Returns a scripted list of proposals per round; records every context it saw."""

    name = "scripted"

    def __init__(self, rounds: list[list[Proposal]], tokens: int = 0, cost: float = 0.0) -> None:
        self.rounds = rounds
        self.tokens = tokens
        self.cost = cost
        self.seen: list[ProposalContext] = []

    def propose(self, ctx: ProposalContext) -> ProposalBatch:
        self.seen.append(ctx)
        if ctx.round > len(self.rounds):
            return ProposalBatch(proposals=[])
        usage = TokenUsage(prompt_tokens=self.tokens, cost_usd=self.cost, calls=1)
        return ProposalBatch(
            proposals=self.rounds[ctx.round - 1],
            usage=usage,
            messages=[{"role": "user", "content": f"r{ctx.round}"}],
        )


def prop(family: str, source: str) -> Proposal:
    return Proposal(source=source, family=family, origin="scripted")


def settings_for(tmp_path: Path, **agent: object) -> Settings:
    settings = load_settings()
    paths = settings.paths.model_copy(update={"runs_dir": tmp_path / "runs"})
    base = {"candidates_per_round": 2, "target_sol": None, "patience": 2, **agent}
    return settings.model_copy(
        update={"paths": paths, "agent": settings.agent.model_validate(base)}
    )


def run(tmp_path: Path, proposer: ScriptedProposer, *, cpu: bool = False, **agent: object):
    settings = settings_for(tmp_path, **agent)
    options = plan_run(settings, PROBLEM, out=tmp_path / "run", use_kb=False)
    scorer = SyntheticScorer(cpu=cpu)
    events = []
    outcome = run_optimize(
        settings, options, progress=events.append, scorer=scorer,
        proposer_factory=lambda _s: proposer,
    )  # fmt: skip
    return outcome, events, scorer


def test_promotions_stall_dropout_and_max_iters(tmp_path: Path) -> None:
    proposer = ScriptedProposer(
        [
            [prop("a", kernel(50, tag="1")), prop("a", kernel(verdict="wrong_output", tag="2"))],
            [prop("b", kernel(40, tag="3"))],  # 25 % faster: promoted
            [prop("b", kernel(39.9, tag="4"))],  # inside the noise: stall 1
            [prop("c", kernel(80, tag="5"))],  # slower: stall 2 -> dropout
            [prop("d", kernel(20, tag="6"))],  # after the dropout: promoted
            [prop("d", kernel(20.1, tag="7"))],
        ]
    )
    outcome, events, scorer = run(tmp_path, proposer, max_iters=6, dropout_mask_fraction=0.5)
    rec = outcome.record
    assert rec.stop_reason == "max_iters"
    assert [d.promoted for d in rec.decisions] == [True, True, False, False, True, False]
    assert rec.incumbent_id == "c5_0"
    assert rec.decisions[1].ratio == pytest.approx(50 / 40)
    assert "does not beat" in rec.decisions[2].reason
    # one dropout, after round 4: families since the last promotion plus the incumbent's
    assert len(rec.dropouts) == 1
    drop = rec.dropouts[0]
    assert drop.round == 4 and set(drop.forbidden_families) == {"b", "c"}
    assert drop.cleared_messages == 4
    # the incumbent (c2_0) and the record with a lesson (c1_1, wrong output) are never masked
    masked = {c.id for c in rec.candidates if c.masked}
    assert masked == set(drop.masked_ids) and masked
    assert "c2_0" not in masked and "c1_1" not in masked
    # the round after the dropout saw no conversation, no masked records, the forbidden families
    ctx5 = proposer.seen[4]
    assert ctx5.conversation == [] and ctx5.forbidden_families == ["b", "c"]
    assert not masked & {r.id for r in ctx5.history}
    assert proposer.seen[5].forbidden_families == []
    assert rec.rounds[3].dropout and not rec.rounds[2].dropout
    assert [p.best_sol for p in rec.rounds][-1] == pytest.approx(10 / 20)
    # the correctness lesson reached the history
    lesson = next(c for c in rec.candidates if c.id == "c1_1")
    assert lesson.lesson and "wrong_output" in lesson.lesson
    # every node reported progress
    stages = {e.stage for e in events if e.source == "agent"}
    assert {"setup", "propose", "evaluate", "decide", "dropout", "finalize"} <= stages
    # the run directory is complete
    for name in ("kernel.py", "report.md", "report.html", "run.json", "options.json"):
        assert (outcome.run_dir / name).is_file(), name
    assert "# tag: 6" in (outcome.run_dir / "kernel.py").read_text()
    assert json.loads((outcome.run_dir / "run.json").read_text())["incumbent_id"] == "c5_0"
    assert (outcome.run_dir / "artifacts" / "candidates" / "c1_0.py").is_file()
    assert scorer.calls.count("compare") == 5
    assert scorer.calls.count("holdout") == 1
    assert rec.final_holdout is not None
    assert [s["shape_id"] for s in rec.final_holdout["shapes"]] == [
        "holdout_b128_h5120",
        "holdout_t2048_h6144",
    ]


def test_forbidden_family_is_rejected_without_scoring(tmp_path: Path) -> None:
    proposer = ScriptedProposer(
        [
            [prop("a", kernel(50, tag="1"))],
            [prop("a", kernel(60, tag="2"))],  # stall -> dropout (patience 1)
            [prop("a", kernel(10, tag="3")), prop("z", kernel(45, tag="4"))],
        ]
    )
    outcome, _, scorer = run(tmp_path, proposer, max_iters=3, patience=1)
    rec = outcome.record
    forbidden = next(c for c in rec.candidates if c.id == "c3_0")
    assert forbidden.verdict == "proposal_failed" and "forbidden" in forbidden.message
    assert rec.incumbent_id == "c3_1"
    assert scorer.calls.count("evaluate") == 3  # c3_0 never reached the scorer
    assert scorer.calls[-1] == "holdout"  # the incumbent, on the shapes the agent never saw


@pytest.mark.parametrize(
    ("agent", "proposer_kw", "reason"),
    [
        ({"max_tokens": 250}, {"tokens": 100}, "tokens"),
        ({"max_cost_usd": 0.25}, {"cost": 0.1}, "cost"),
        ({"target_sol": 0.4}, {}, "target_sol"),
    ],
)
def test_budget_stops(tmp_path: Path, agent: dict, proposer_kw: dict, reason: str) -> None:
    rounds = [[prop(f"f{i}", kernel(40 - i, tag=str(i)))] for i in range(10)]
    rounds[2] = [prop("x", kernel(20, tag="fast"))]  # SOL 0.5 at round 3
    proposer = ScriptedProposer(rounds, **proposer_kw)
    outcome, _, _ = run(tmp_path, proposer, max_iters=10, **agent)
    rec = outcome.record
    assert rec.stop_reason == reason
    assert rec.usage.iters == 3
    if reason == "tokens":
        assert rec.usage.tokens.total_tokens == 300
    if reason == "cost":
        assert rec.usage.tokens.cost_usd == pytest.approx(0.3)


def test_no_ideas_and_no_kernel(tmp_path: Path) -> None:
    proposer = ScriptedProposer([[prop("a", kernel(verdict="wrong_output"))]])
    outcome, _, _ = run(tmp_path, proposer, max_iters=5)
    assert outcome.record.stop_reason == "no_ideas"
    assert not outcome.produced_kernel
    assert not (outcome.run_dir / "kernel.py").exists()
    assert (outcome.run_dir / "report.md").is_file()


def test_cpu_stops_at_first_correct_kernel(tmp_path: Path) -> None:
    proposer = ScriptedProposer(
        [[prop("a", kernel(verdict="wrong_output"))], [prop("b", kernel(tag="ok"))]] * 3
    )
    outcome, _, scorer = run(tmp_path, proposer, cpu=True, max_iters=5)
    rec = outcome.record
    assert rec.stop_reason == "correct_kernel_cpu"
    assert rec.incumbent_id == "c2_0" and not rec.performance_measured
    assert "compare" not in scorer.calls


def test_dropout_can_be_switched_off(tmp_path: Path) -> None:
    rounds = [[prop("a", kernel(50 + i, tag=str(i)))] for i in range(5)]
    outcome, _, _ = run(tmp_path, ScriptedProposer(rounds), max_iters=5, patience=1, dropout=False)
    assert outcome.record.dropouts == []
    assert outcome.record.stop_reason == "max_iters"


def test_resume_after_a_crash_continues_from_the_checkpoint(tmp_path: Path) -> None:
    class Crash(RuntimeError):
        pass

    class CrashingProposer(ScriptedProposer):
        crash_at: int | None = 3

        def propose(self, ctx: ProposalContext) -> ProposalBatch:
            if ctx.round == self.crash_at:
                raise Crash("killed")
            return super().propose(ctx)

    rounds = [[prop(f"f{i}", kernel(50 - 5 * i, tag=str(i)))] for i in range(4)]
    proposer = CrashingProposer(rounds)
    settings = settings_for(tmp_path, max_iters=4)
    options = plan_run(settings, PROBLEM, out=tmp_path / "run", use_kb=False)
    with pytest.raises(Crash):
        run_optimize(settings, options, scorer=SyntheticScorer(),
                     proposer_factory=lambda _s: proposer)  # fmt: skip
    db = sqlite3.connect(tmp_path / "run" / "checkpoint.sqlite")
    assert db.execute("select count(*) from checkpoints").fetchone()[0] > 5
    db.close()
    proposer.crash_at = None
    scorer = SyntheticScorer()
    outcome = resume_run(settings, options.run_id, scorer=scorer,
                         proposer_factory=lambda _s: proposer)  # fmt: skip
    rec = outcome.record
    assert rec.stop_reason == "max_iters"
    assert [c.id for c in rec.candidates] == ["c1_0", "c2_0", "c3_0", "c4_0"]
    assert scorer.calls.count("evaluate") == 2  # only rounds 3 and 4 ran again
    assert [ctx.round for ctx in proposer.seen] == [1, 2, 3, 4]
    # resuming a finished run is a no-op that returns the same record
    again = resume_run(settings, str(outcome.run_dir), scorer=SyntheticScorer(),
                       proposer_factory=lambda _s: proposer)  # fmt: skip
    assert again.record.incumbent_id == rec.incumbent_id


def test_from_kernel_must_be_correct(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(kernel(verdict="wrong_output"))
    settings = settings_for(tmp_path, max_iters=2)
    options = plan_run(settings, PROBLEM, out=tmp_path / "run", use_kb=False, from_kernel=bad)
    with pytest.raises(AgentError, match="--from kernel"):
        run_optimize(settings, options, scorer=SyntheticScorer(),
                     proposer_factory=lambda _s: ScriptedProposer([]))  # fmt: skip


def test_from_kernel_is_the_first_incumbent(tmp_path: Path) -> None:
    mine = tmp_path / "mine.py"
    mine.write_text(kernel(30, tag="mine"))
    settings = settings_for(tmp_path, max_iters=2)
    options = plan_run(settings, PROBLEM, out=tmp_path / "run", use_kb=False, from_kernel=mine)
    proposer = ScriptedProposer([[prop("a", kernel(35, tag="1"))], [prop("b", kernel(20))]])
    outcome = run_optimize(settings, options, scorer=SyntheticScorer(),
                           proposer_factory=lambda _s: proposer)  # fmt: skip
    rec = outcome.record
    assert rec.candidates[0].id == "from"
    assert proposer.seen[0].incumbent is not None and proposer.seen[0].incumbent.id == "from"
    assert [d.promoted for d in rec.decisions] == [False, True]
    assert rec.incumbent_id == "c2_0"


def test_plan_run_rejects_bad_input(tmp_path: Path) -> None:
    from aka.core import SpecError

    settings = settings_for(tmp_path)
    with pytest.raises(SpecError, match="problem not found"):
        plan_run(settings, tmp_path / "nope.yaml")
    with pytest.raises(SpecError, match="--dsl cuda needs a model"):
        plan_run(settings, PROBLEM, dsl="cuda")
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "x").write_text("x")
    with pytest.raises(SpecError, match="not empty"):
        plan_run(settings, PROBLEM, out=tmp_path / "used")
