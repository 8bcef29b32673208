"""Statistics, the timing-mismatch rule and the score, by hand."""

from __future__ import annotations

import math

import pytest

from aka.bench import (
    EvalResult,
    LatencyStats,
    Manifest,
    ShapeResult,
    Verdict,
    geomean,
    iqr,
    latency_stats,
    median,
)
from aka.bench.score import confirm_suspicious, problem_score, sol_fraction, suspicious_margin
from aka.bench.timing import judge_windows
from aka.spec import Split


def test_median_and_iqr() -> None:
    values = [float(v) for v in range(1, 101)]
    assert median(values) == 50.5
    assert iqr(values) == pytest.approx(49.5)
    assert iqr([3.0]) == 0.0
    stats = latency_stats([10.0, 11.0, 12.0, 100.0])
    assert (stats.median, stats.n) == (11.5, 4)
    with pytest.raises(ValueError):
        median([])


def test_geomean_weights_and_zero() -> None:
    assert geomean([0.25, 1.0]) == pytest.approx(0.5)
    assert geomean([0.25, 1.0], [3.0, 1.0]) == pytest.approx(math.exp((3 * math.log(0.25)) / 4))
    assert geomean([0.5, 0.0]) == 0.0


def test_timing_mismatch_flags_work_that_escaped_the_stream() -> None:
    stream = [20.0] * 50
    honest = judge_windows(stream, [28.0] * 50, empty_gap_us=7.0, abs_us=5.0, rel=0.10)
    assert not honest.mismatch and honest.allowed_gap_us == pytest.approx(12.0)
    side_stream = judge_windows(stream, [60.0] * 50, empty_gap_us=7.0, abs_us=5.0, rel=0.10)
    assert side_stream.mismatch and side_stream.gap_us == pytest.approx(40.0)
    # for long kernels the allowance grows with T (10%)
    long = judge_windows([1000.0] * 20, [1090.0] * 20, empty_gap_us=7.0, abs_us=5.0, rel=0.10)
    assert not long.mismatch
    # another process on the GPU delays the device-end event in over half the samples: not work
    # of the candidate's, so no mismatch (the gap is judged at a low quantile, not the median)
    spiky = judge_windows(stream, [28.0] * 22 + [300.0] * 28, empty_gap_us=7.0, abs_us=5.0, rel=0.1)
    assert not spiky.mismatch


def test_sol_fraction_caps_at_one_and_flags_suspicious() -> None:
    assert sol_fraction(10.0, 40.0, 0.1) == (0.25, [])
    assert sol_fraction(10.0, 9.5, 0.1) == (1.0, [])  # within the margin: capped, not flagged
    s, flags = sol_fraction(10.0, 5.0, 0.1)
    assert s == 1.0 and flags == ["suspicious"]


def test_suspicious_margin_follows_floor_noise() -> None:
    assert suspicious_margin(5.0, 0.05) == 0.10
    assert suspicious_margin(5.0, 0.5) == pytest.approx(0.30)
    assert suspicious_margin(None, None) == 0.10


def _row(
    sid: str, s: float | None, verdict: Verdict = Verdict.ACCEPTED, weight: float = 1.0
) -> ShapeResult:
    return ShapeResult(
        shape_id=sid,
        split=Split.TUNE,
        verdict=verdict,
        sol_fraction=s,
        weight=weight,
        latency_us=LatencyStats(median=1.0, iqr=0.0, n=1),
    )


def test_problem_score_is_weighted_geomean_and_zero_on_failure() -> None:
    assert problem_score([_row("a", 0.25), _row("b", 1.0)]) == pytest.approx(0.5)
    assert problem_score([_row("a", 0.25, weight=2), _row("b", 1.0)]) == pytest.approx(
        0.25 ** (2 / 3)
    )
    assert problem_score([_row("a", 0.5), _row("b", None, Verdict.TIMING_MISMATCH)]) == 0.0
    assert problem_score([_row("a", None)]) is None


def _result(rows: list[ShapeResult]) -> EvalResult:
    manifest = Manifest(
        source_sha256="s", problem_sha256="p", problem_name="x", mode="gpu", created_at="now"
    )
    return EvalResult(
        verdict=Verdict.ACCEPTED, performance_measured=True, shapes=rows, manifest=manifest
    )


def test_implausible_needs_two_workers_to_agree() -> None:
    fast = _row("a", 1.0).model_copy(update={"flags": ["suspicious"]})
    also_fast = _row("b", 1.0).model_copy(update={"flags": ["suspicious"]})
    first = _result([fast, also_fast, _row("c", 0.5)])
    second = _result([fast, _row("b", 0.9)])  # b was not reproduced
    merged = confirm_suspicious(first, second)
    flags = {r.shape_id: r.flags for r in merged.shapes}
    assert flags == {"a": ["suspicious", "implausible"], "b": ["suspicious"], "c": []}
    verdicts = {r.shape_id: r.verdict for r in merged.shapes}
    assert verdicts == {"a": Verdict.IMPLAUSIBLE, "b": Verdict.ACCEPTED, "c": Verdict.ACCEPTED}
    assert merged.verdict is Verdict.IMPLAUSIBLE and merged.score == 0.0
    assert merged.failure is not None and "['a']" in merged.failure.message
    assert "two independent workers" in merged.notes[-1]


def test_suspicious_alone_is_only_a_note() -> None:
    first = _result([_row("a", 1.0).model_copy(update={"flags": ["suspicious"]})])
    merged = confirm_suspicious(first, _result([_row("a", 0.9)]))
    assert merged.verdict is Verdict.ACCEPTED and merged.shapes[0].flags == ["suspicious"]
    assert "not reproduced" in merged.notes[-1]


def test_gap_baseline_is_the_empty_kernel_timed_between_the_shapes_samples() -> None:
    from aka.bench.performance import shape_empty_gap

    # H200, session 4: the empty gap at the worker's start was 8.8 us; an honest microsecond
    # kernel later showed 15.3 us while the host's wake-up had drifted. Judged against the empty
    # kernel timed between its own samples, the honest kernel passes...
    honest = {
        "stream_us": [4.0] * 40,
        "device_us": [19.3] * 40,
        "empty_stream_us": [3.0] * 40,
        "empty_device_us": [17.4] * 40,
    }
    gap = shape_empty_gap(8.8, honest)
    assert gap == pytest.approx(14.4)
    verdict = judge_windows(
        honest["stream_us"], honest["device_us"], empty_gap_us=gap, abs_us=5.0, rel=0.1
    )
    assert not verdict.mismatch
    # ...while work left on a side stream still widens its gap beyond the paired empty kernel's
    cheat = {**honest, "device_us": [4.0 + 14.4 + 9.0] * 40}
    verdict = judge_windows(
        cheat["stream_us"],
        cheat["device_us"],
        empty_gap_us=shape_empty_gap(8.8, cheat),
        abs_us=5.0,
        rel=0.1,
    )
    assert verdict.mismatch
    # never below the gap at the worker's start; payloads without paired samples use that one
    low = {**honest, "empty_device_us": [3.5] * 40}
    assert shape_empty_gap(8.8, low) == pytest.approx(8.8)
    assert shape_empty_gap(8.8, {"stream_us": [1.0], "device_us": [2.0]}) == pytest.approx(8.8)


def test_paired_sampling_interleaves_the_empty_kernel_and_splits_the_windows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import aka.hardware
    from aka.bench.worker_timing import TimingSession
    from aka.hardware import WindowSamples

    calls: list[str] = []
    seen: dict[str, object] = {}

    def fake_sample_windows(fn, *, n_samples, flush, warmup_s, budget_s, min_samples):  # type: ignore[no-untyped-def]
        seen.update(n=n_samples, budget=budget_s, min=min_samples, flush=flush)
        for i in range(6):
            fn(i)
        return WindowSamples(
            stream_us=[float(i) for i in range(6)],
            device_us=[10.0 + i for i in range(6)],
            host_us=[20.0 + i for i in range(6)],
        )

    monkeypatch.setattr(aka.hardware, "sample_windows", fake_sample_windows)
    session = TimingSession.__new__(TimingSession)
    session.cfg = {"max_samples": 100, "sample_budget_s": 0.25, "min_samples": 10, "warmup_ms": 0}
    session.flush = lambda: None
    session.empty = lambda i: calls.append(f"empty{i}")
    got = session._sample_paired(lambda j: calls.append(f"call{j}"))
    assert calls == ["call0", "empty0", "call1", "empty1", "call2", "empty2"]
    assert got["stream_us"] == [0.0, 2.0, 4.0] and got["empty_stream_us"] == [1.0, 3.0, 5.0]
    assert got["device_us"] == [10.0, 12.0, 14.0] and got["empty_device_us"] == [11.0, 13.0, 15.0]
    assert got["host_us"] == [20.0, 22.0, 24.0]
    # the candidate keeps its own sample count and budget: the empty kernel's come on top
    assert (seen["n"], seen["budget"], seen["min"]) == (200, 0.5, 20)
    assert seen["flush"] is session.flush


def test_gap_allowance_grows_with_the_spread_of_the_paired_empty_gaps() -> None:
    from aka.bench.performance import paired_gap_spread, shape_empty_gap

    # A noisy host: the empty kernel's gaps beside the candidate's spread over 19-31 us.
    noisy_gaps = [19.0, 20.0, 22.0, 25.0, 27.0, 29.0, 31.0, 24.0]
    candidate = {
        "stream_us": [5.0] * 8,
        "device_us": [5.0 + 28.5] * 8,
        "empty_stream_us": [3.0] * 8,
        "empty_device_us": [3.0 + g for g in noisy_gaps],
    }
    spread = paired_gap_spread(candidate)
    assert spread == pytest.approx(6.0)  # inclusive quartiles 21.5 and 27.5 of the gaps

    base = shape_empty_gap(11.0, candidate)
    fixed = judge_windows(
        candidate["stream_us"], candidate["device_us"], empty_gap_us=base, abs_us=5.0, rel=0.1
    )
    adaptive = judge_windows(
        candidate["stream_us"],
        candidate["device_us"],
        empty_gap_us=base,
        abs_us=5.0,
        rel=0.1,
        empty_spread_us=spread,
    )
    assert fixed.mismatch and not adaptive.mismatch
    assert adaptive.allowed_gap_us == pytest.approx(base + 2 * spread)
    # work hidden on a side stream beyond the noise is still caught
    cheat = {**candidate, "device_us": [5.0 + base + 2 * spread + 6.0] * 8}
    assert judge_windows(
        cheat["stream_us"],
        cheat["device_us"],
        empty_gap_us=base,
        abs_us=5.0,
        rel=0.1,
        empty_spread_us=spread,
    ).mismatch
    # fewer than four paired samples: no spread term
    assert paired_gap_spread({"empty_stream_us": [1.0] * 3, "empty_device_us": [9.0] * 3}) == 0.0
