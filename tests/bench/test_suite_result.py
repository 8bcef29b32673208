"""Suite scoring (aka.bench.suite_result): geomean, failures, weights, phases, P(holdout|tune).

Every expected number is worked out by hand in the comments from the shapes built here.
"""

from __future__ import annotations

import pytest

from aka.bench.suite_result import (
    EntrantOp,
    OperatorInfo,
    ShapeScore,
    SuiteRun,
    geomean,
    summarize,
)


def _shape(
    shape_id: str,
    s: float | None,
    *,
    split: str = "tune",
    phase: str = "prefill",
    correct: bool | None = True,
    verdict: str = "accepted",
) -> ShapeScore:
    return ShapeScore.model_validate(
        {
            "shape_id": shape_id,
            "split": split,
            "phase": phase,
            "s": s,
            "correct": correct,
            "verdict": verdict,
        }
    )


def _wrong(shape_id: str, *, split: str = "tune", phase: str = "prefill") -> ShapeScore:
    return _shape(shape_id, None, split=split, phase=phase, correct=False, verdict="wrong_output")


def _result(
    entrant: str,
    op: str,
    shapes: list[ShapeScore],
    *,
    status: str = "ok",
    verdict: str = "accepted",
) -> EntrantOp:
    return EntrantOp.model_validate(
        {"entrant": entrant, "op": op, "status": status, "verdict": verdict, "shapes": shapes}
    )


def _run(
    results: list[EntrantOp],
    *,
    entrants: tuple[str, ...] = ("candidate",),
    measured: bool = True,
    weights: tuple[float, ...] = (0.5, 0.3, 0.2),
) -> SuiteRun:
    operators = [
        OperatorInfo(name=name, weight=w, phase="prefill/decode")
        for name, w in zip(("a", "b", "c", "d"), weights, strict=False)
    ]
    return SuiteRun(
        suite="t",
        date="2026-12-02",
        performance_measured=measured,
        operators=operators,
        entrants=list(entrants),
        results=results,
    )


def test_geomean_hand_values() -> None:
    assert geomean([0.25, 1.0]) == pytest.approx(0.5)  # sqrt(0.25)
    assert geomean([0.64, 0.25]) == pytest.approx(0.4)  # sqrt(0.16)
    assert geomean([1.0, 1.0, 0.125]) == pytest.approx(0.5)  # cube root of 1/8
    assert geomean([0.9, 0.0, 1.0]) == 0.0
    with pytest.raises(ValueError, match="no values"):
        geomean([])


def test_operator_score_failures_count_zero() -> None:
    ok = _result("candidate", "a", [_shape("0", 0.25), _shape("1", 1.0)])
    one_wrong = _result("candidate", "a", [_shape("0", 0.9), _wrong("1")])
    failed = _result("candidate", "a", [_shape("0", 0.9)], status="failed", verdict="fallback")
    shape_verdict = _result("candidate", "a", [_shape("0", 0.9, verdict="timing_mismatch")])

    assert ok.score("tune") == pytest.approx(0.5)
    assert ok.score("holdout") is None  # no holdout shapes
    assert one_wrong.score("tune") == 0.0
    assert failed.score("tune") == 0.0
    assert shape_verdict.score("tune") == 0.0


def test_summarize_suite_phase_and_holdout_scores() -> None:
    # a (w 0.5): tune prefill 1.0, 1.0 and decode 0.125 -> S = (1/8)^(1/3) = 0.5;
    #            prefill alone 1.0, decode alone 0.125; holdout 0.81.
    # b (w 0.3): tune prefill 0.64, 0.25 -> 0.4; holdout 0.49 and 1.0 -> 0.7.
    # c (w 0.2): no result -> counts 0 in the suite score.
    results = [
        _result(
            "candidate",
            "a",
            [
                _shape("0", 1.0),
                _shape("1", 1.0),
                _shape("2", 0.125, phase="decode"),
                _shape("h0", 0.81, split="holdout"),
            ],
        ),
        _result(
            "candidate",
            "b",
            [
                _shape("0", 0.64),
                _shape("1", 0.25),
                _shape("h0", 0.49, split="holdout"),
                _shape("h1", 1.0, split="holdout"),
            ],
        ),
    ]
    (summary,) = summarize(_run(results))

    assert summary.suite_score == pytest.approx(0.5 * 0.5 + 0.3 * 0.4)  # 0.37
    # prefill: a and b have prefill shapes, weights renormalised over 0.8
    assert summary.phase_scores["prefill"] == pytest.approx((0.5 * 1.0 + 0.3 * 0.4) / 0.8)
    # decode: only a has decode shapes, so its weight is all of it
    assert summary.phase_scores["decode"] == pytest.approx(0.125)
    assert summary.holdout_score == pytest.approx(0.5 * 0.81 + 0.3 * 0.7)  # 0.615
    assert (summary.ops_ok, summary.ops_failed, summary.ops_not_run) == (2, 0, 1)


def test_holdout_score_needs_every_timed_operator_measured_on_holdout() -> None:
    # a has holdout shapes, b (ok on tune) was not timed on holdout (a budget cap): a holdout
    # "suite score" of a alone would read as a near-zero score, so there is none.
    a = _result("candidate", "a", [_shape("0", 1.0), _shape("h0", 0.81, split="holdout")])
    b_tune_only = _result("candidate", "b", [_shape("0", 0.64)])
    (summary,) = summarize(_run([a, b_tune_only]))
    assert summary.suite_score == pytest.approx(0.5 * 1.0 + 0.3 * 0.64)
    assert summary.holdout_score is None
    # A failed operator without holdout shapes does not block it: it counts 0.
    b_failed = _result("candidate", "b", [_wrong("0")], status="failed", verdict="wrong_output")
    (summary,) = summarize(_run([a, b_failed]))
    assert summary.holdout_score == pytest.approx(0.5 * 0.81)


def test_summarize_failed_operator_counts_zero_in_suite_and_phase() -> None:
    # a 0.5 (w 0.5), b failed (w 0.3), c 0.9 (w 0.2) -> 0.25 + 0 + 0.18
    results = [
        _result("eager", "a", [_shape("0", 0.5)]),
        _result("eager", "b", [_wrong("0")], status="failed", verdict="wrong_output"),
        _result("eager", "c", [_shape("0", 0.9)]),
    ]
    (summary,) = summarize(_run(results, entrants=("eager",)))

    assert summary.suite_score == pytest.approx(0.43)
    # every shape is prefill: weights sum to 1 and b's 0 stays in
    assert summary.phase_scores == {"prefill": pytest.approx(0.43)}
    assert (summary.ops_ok, summary.ops_failed, summary.ops_not_run) == (2, 1, 0)


def test_summarize_missing_operator_counts_zero_and_not_run() -> None:
    results = [_result("library", "a", [_shape("0", 0.8)])]
    (summary,) = summarize(_run(results, entrants=("library",)))

    assert summary.suite_score == pytest.approx(0.5 * 0.8)  # b and c missing: 0 each
    # a missing operator's shapes are unknown: it is left out of the phase renormalisation
    assert summary.phase_scores == {"prefill": pytest.approx(0.8)}
    assert summary.ops_not_run == 2


def test_summarize_conditional_correctness() -> None:
    # a: right on tune and holdout; b: right on tune, wrong on holdout;
    # c: wrong on tune (not in the condition); d: right on tune, no holdout shape (left out).
    results = [
        _result("candidate", "a", [_shape("0", 0.5), _shape("h", 0.5, split="holdout")]),
        _result(
            "candidate",
            "b",
            [_shape("0", 0.5), _wrong("h", split="holdout")],
            status="failed",
            verdict="wrong_output",
        ),
        _result(
            "candidate",
            "c",
            [_wrong("0"), _shape("h", 0.5, split="holdout")],
            status="failed",
            verdict="wrong_output",
        ),
        _result("candidate", "d", [_shape("0", 0.5)]),
    ]
    (summary,) = summarize(_run(results, weights=(0.25, 0.25, 0.25, 0.25)))

    assert summary.p_holdout_given_tune == pytest.approx(1 / 2)


def test_summarize_without_holdout_has_no_conditional() -> None:
    (summary,) = summarize(_run([_result("candidate", "a", [_shape("0", 0.5)])]))

    assert summary.p_holdout_given_tune is None
    assert summary.holdout_score is None


def test_summarize_cpu_run_has_no_scores_even_with_a_failure() -> None:
    # Nothing timed: a failure must not turn the suite score into 0.0 (it is unknown).
    results = [
        _result("candidate", "a", [_shape("0", None, verdict="not_measured")]),
        _result("candidate", "b", [_wrong("0")], status="failed", verdict="wrong_output"),
    ]
    (summary,) = summarize(_run(results, measured=False))

    assert summary.suite_score is None
    assert summary.phase_scores == {"prefill": None}
    assert summary.holdout_score is None
    assert (summary.ops_ok, summary.ops_failed, summary.ops_not_run) == (1, 1, 1)
