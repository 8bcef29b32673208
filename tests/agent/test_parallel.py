"""Evaluation slots: a round's candidates over fake GPUs, one at a time per GPU, in order.

``DeviceFakeScorer`` stands for one GPU: each evaluation sleeps as long as its candidate says and
logs when and in which thread it ran, so these tests see the schedule itself (no code runs).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from aka.agent.parallel import EvalSlot, SlotOutcome, plan_slots, run_in_slots
from aka.agent.records import Proposal
from aka.agent.runner import plan_run, run_optimize
from aka.core import ProgressEvent, SandboxError
from tests.agent.test_graph import PROBLEM, ScriptedProposer, kernel, settings_for
from tests.fakes.scorer import Busy, DeviceFakeScorer

# ---------------------------------------------------------------- plan_slots


@pytest.mark.parametrize(
    ("workers", "cpu", "visible", "indices", "gpus", "noted"),
    [
        ("auto", False, ["0", "1"], [0, 1], ["0", "1"], False),
        ("auto", False, ["1"], [0], ["1"], False),
        (1, False, ["0", "1"], [0], ["0"], False),
        (4, False, ["GPU-aa", "GPU-bb"], [0, 1], ["GPU-aa", "GPU-bb"], True),
        ("auto", True, [], [0], [], False),
        (3, True, [], [0, 1, 2], [], False),
    ],
)
def test_plan_slots_one_per_visible_gpu_and_n_interpreters_on_the_cpu(
    workers: int | str, cpu: bool, visible: list[str], indices: list[int], gpus: list[str],
    noted: bool,
) -> None:  # fmt: skip
    plan = plan_slots(workers, cpu=cpu, visible=visible)  # type: ignore[arg-type]
    assert plan.indices == indices and plan.gpus == gpus
    assert (plan.note is not None) == noted
    if noted:
        assert "--workers 4" in str(plan.note) and "2 GPU(s) visible" in str(plan.note)


# ---------------------------------------------------------------- run_in_slots


def _overlap(a: Busy, b: Busy) -> bool:
    return a.start < b.end and b.start < a.end


def _work(
    slot: EvalSlot[DeviceFakeScorer], job: tuple[str, float], relay: object
) -> tuple[str, str | None]:
    tag, seconds = job
    assert callable(relay)
    relay(ProgressEvent("bench", "timing", tag))
    start = time.monotonic()
    time.sleep(seconds)
    slot.scorer.busy.append(Busy(tag, start, time.monotonic(), threading.current_thread().name))
    if tag == "bad":
        raise SandboxError("the harness broke on this one")
    return tag, slot.gpu


def test_run_in_slots_one_job_at_a_time_per_gpu_both_busy_results_in_order() -> None:
    gpus = [DeviceFakeScorer("0"), DeviceFakeScorer("1")]
    slots = [EvalSlot(i, s.gpu, s) for i, s in enumerate(gpus)]
    # the first job is the slowest, so jobs finish out of order
    jobs = [("j0", 0.30), ("j1", 0.05), ("bad", 0.05), ("j3", 0.10),
            ("j4", 0.05), ("j5", 0.15), ("j6", 0.05), ("j7", 0.05)]  # fmt: skip
    seen: list[tuple[str, str]] = []
    finished: list[int] = []

    def on_done(i: int, outcome: SlotOutcome[tuple[str, str | None]]) -> None:
        finished.append(i)
        seen.append(("done", threading.current_thread().name))

    def progress(event: ProgressEvent) -> None:
        seen.append((event.message, threading.current_thread().name))

    outcomes = run_in_slots(slots, jobs, _work, progress=progress, on_done=on_done)

    # order preserved, whatever the finish order; the failing job did not stop the others
    assert finished != sorted(finished)
    assert [o.value[0] if o.value else None for o in outcomes] == [
        "j0", "j1", None, "j3", "j4", "j5", "j6", "j7",
    ]  # fmt: skip
    assert isinstance(outcomes[2].error, SandboxError)
    assert all(o.error is None for i, o in enumerate(outcomes) if i != 2)
    assert all(o.value[1] == o.gpu for o in outcomes if o.value)
    # each GPU ran its jobs one at a time, in one thread; both were busy at once
    for gpu in gpus:
        assert gpu.busy and len({b.thread for b in gpu.busy}) == 1
        ordered = sorted(gpu.busy, key=lambda b: b.start)
        assert all(a.end <= b.start for a, b in zip(ordered, ordered[1:], strict=False))
    assert any(_overlap(a, b) for a in gpus[0].busy for b in gpus[1].busy)
    assert sum(len(g.busy) for g in gpus) == 8
    # callbacks ran in the calling thread only
    assert {thread for _, thread in seen} == {threading.current_thread().name}
    assert sorted(m for m, _ in seen if m != "done") == sorted(tag for tag, _ in jobs)


def test_run_in_slots_with_one_slot_is_a_plain_loop_in_this_thread() -> None:
    gpu = DeviceFakeScorer("0")
    outcomes = run_in_slots([EvalSlot(0, "0", gpu)], [("a", 0.0), ("b", 0.0)], _work)
    assert [o.value for o in outcomes] == [("a", "0"), ("b", "0")]
    assert {b.thread for b in gpu.busy} == {threading.current_thread().name}


# ---------------------------------------------------------------- the evaluate node


def _round_of_eight(scale: float) -> list[Proposal]:
    """Eight candidates taking 1.3 s x ``scale`` in all, the first the slowest; c1_2 is wrong."""
    seconds = [0.4, 0.1, 0.1, 0.2, 0.1, 0.1, 0.2, 0.1]
    proposals = []
    for i, s in enumerate(x * scale for x in seconds):
        source = kernel(50.0 - i, verdict="wrong_output" if i == 2 else None, tag=f"k{i}")
        proposals.append(Proposal(source=source + f"# fake-seconds: {s}\n", family=f"f{i}",
                                  origin="scripted"))  # fmt: skip
    return proposals


def _run_on(tmp_path: Path, gpus: list[DeviceFakeScorer], proposals: list[Proposal]):
    settings = settings_for(tmp_path, candidates_per_round=8, max_iters=1)
    options = plan_run(settings, PROBLEM, out=tmp_path / "run", use_kb=False)
    events: list[tuple[ProgressEvent, str]] = []
    outcome = run_optimize(
        settings, options,
        progress=lambda e: events.append((e, threading.current_thread().name)),
        proposer_factory=lambda _s: ScriptedProposer([proposals]),
        slots=[EvalSlot(i, g.gpu, g) for i, g in enumerate(gpus)],
    )  # fmt: skip
    return outcome, events


def test_a_round_of_eight_over_two_fake_gpus(tmp_path: Path) -> None:
    gpus = [DeviceFakeScorer("0"), DeviceFakeScorer("1")]
    start = time.monotonic()
    outcome, events = _run_on(tmp_path, gpus, _round_of_eight(0.5))
    wall = time.monotonic() - start
    rec = outcome.record

    # records in the proposals' order with their own verdicts; the wrong one stopped nothing
    assert [c.id for c in rec.candidates] == [f"c1_{i}" for i in range(8)]
    assert [c.verdict for c in rec.candidates] == ["accepted"] * 2 + ["wrong_output"] + [
        "accepted"
    ] * 5
    assert rec.incumbent_id == "c1_7"  # the fastest declared latency
    # which GPU scored each candidate is recorded, and matches where it really ran
    ran_on = {b.tag: g.gpu for g in gpus for b in g.busy if not b.holdout}
    assert {c.id: c.gpu for c in rec.candidates} == {f"c1_{i}": ran_on[f"k{i}"] for i in range(8)}
    assert {c.worker for c in rec.candidates} == {0, 1}
    assert rec.workers == 2 and rec.worker_gpus == ["0", "1"]
    # one at a time per GPU, both at once
    for gpu in gpus:
        evals = sorted((b for b in gpu.busy if not b.holdout), key=lambda b: b.start)
        assert all(a.end <= b.start for a, b in zip(evals, evals[1:], strict=False))
    assert any(_overlap(a, b) for a in gpus[0].busy for b in gpus[1].busy)
    # budget: 8 evaluations counted, GPU-seconds summed over both GPUs, the round's wall shorter
    usage = rec.usage
    assert usage.candidates == 8
    busy_s = sum(b.end - b.start for g in gpus for b in g.busy if not b.holdout)
    round_gpu_s = sum(c.gpu_s for c in rec.candidates)
    assert busy_s == pytest.approx(0.65, abs=0.1) and round_gpu_s == pytest.approx(busy_s, abs=0.05)
    assert usage.gpu_s >= round_gpu_s  # + the holdout scoring of finalize
    assert 0 < usage.eval_wall_s < 0.8 * round_gpu_s
    assert usage.wall_s >= usage.eval_wall_s
    # progress: every candidate's scoring and verdict events, all emitted in the calling thread
    evaluate = [e for e, _ in events if e.source == "agent" and e.stage == "evaluate"]
    assert sum("verdict" in e.data for e in evaluate) == 8
    assert sum(e.message.startswith("scoring c1_") for e in evaluate) == 8
    assert {thread for _, thread in events} == {threading.current_thread().name}
    bench = [e for e, _ in events if e.source == "bench" and "candidate" in e.data]
    gpu_of = {c.id: c.gpu for c in rec.candidates}
    assert len(bench) == 8 and all(e.data["gpu"] == gpu_of[e.data["candidate"]] for e in bench)
    assert all(e.message == e.data["gpu"] for e in bench)  # the fake names its own GPU
    assert wall < 3.0


def test_the_same_round_on_one_gpu_records_the_same_verdicts(tmp_path: Path) -> None:
    two, _ = _run_on(tmp_path / "two", [DeviceFakeScorer("0"), DeviceFakeScorer("1")],
                     _round_of_eight(0.2))  # fmt: skip
    one, _ = _run_on(tmp_path / "one", [DeviceFakeScorer("0")], _round_of_eight(0.2))

    def facts(rec):  # noqa: ANN001, ANN202 - a test helper
        return [(c.id, c.family, c.verdict, c.score) for c in rec.candidates], rec.incumbent_id

    assert facts(one.record) == facts(two.record)
    assert one.record.workers == 1 and {c.gpu for c in one.record.candidates} == {"0"}


def test_a_harness_failure_is_raised_after_the_others_were_scored(tmp_path: Path) -> None:
    proposals = _round_of_eight(0.2)
    proposals[1] = proposals[1].model_copy(
        update={"source": (proposals[1].source or "") + "# fake-harness-error\n"}
    )
    gpus = [DeviceFakeScorer("0"), DeviceFakeScorer("1")]
    with pytest.raises(SandboxError, match="could not start"):
        _run_on(tmp_path, gpus, proposals)
    assert sorted(b.tag for g in gpus for b in g.busy) == [f"k{i}" for i in range(8)]
