"""The profile diagnosis: bottleneck class, ceiling distances, compiler/ncu flags, hints."""

from __future__ import annotations

import math
from typing import Any

import pytest

from aka.agent.profile import LATENCY_MULTIPLE, diagnose
from aka.bench import (
    EvalResult,
    KernelFacts,
    LatencyStats,
    Manifest,
    NcuKernelMetrics,
    ProfileData,
    ShapeResult,
    Verdict,
)
from aka.spec import ComputeUnit, Split

BANDWIDTH = 4.0e12  # bytes/s
BF16_RATE = 800e12  # FLOP/s
FLOOR_US = 5.0
CEILINGS: dict[str, Any] = {
    "device_name": "NVIDIA H200",
    "source": "measured",
    "bandwidth_bytes_per_s": BANDWIDTH,
    "rates_flops_per_s": {"tc_bf16": BF16_RATE, "vector_fp32": 60e12},
    "launch_floor_us": FLOOR_US,
}


def _row(
    sid: str,
    t_us: float,
    *,
    bytes_: float = 0.0,
    flops: float = 0.0,
    unit: ComputeUnit | None = None,
    weight: float = 1.0,
) -> ShapeResult:
    """A timed shape priced the way the scorer prices it (T_sol = max of the three terms)."""
    t_mem = bytes_ / BANDWIDTH * 1e6
    t_comp = flops / (BF16_RATE if unit is ComputeUnit.TC_BF16 else 60e12) * 1e6
    terms = {"memory": t_mem, "compute": t_comp, "latency": FLOOR_US}
    bound = max(terms, key=lambda k: terms[k])
    return ShapeResult(
        shape_id=sid,
        split=Split.TUNE,
        weight=weight,
        verdict=Verdict.ACCEPTED,
        latency_us=LatencyStats(median=t_us, iqr=0.01 * t_us, n=100),
        t_sol_us=terms[bound],
        bound=bound,
        bytes=bytes_,
        flops=flops,
        compute_unit=unit,
        sol_fraction=min(1.0, terms[bound] / t_us),
    )


def _result(
    *rows: ShapeResult, measured: bool = True, verdict: Verdict = Verdict.ACCEPTED
) -> EvalResult:
    sols = [r.sol_fraction for r in rows if r.sol_fraction is not None]
    score = math.exp(sum(math.log(s) for s in sols) / len(sols)) if sols and measured else None
    return EvalResult(
        verdict=verdict,
        performance_measured=measured,
        shapes=list(rows),
        score=score,
        manifest=Manifest(
            source_sha256="0" * 64,
            problem_sha256="1" * 64,
            problem_name="rms_norm",
            mode="gpu" if measured else "cpu_interpreter",
            ceilings=CEILINGS if measured else {},
            created_at="2026-12-02T00:00:00+00:00",
        ),
    )


def test_memory_bound_far_from_peak() -> None:
    # 100 MB in 100 us = 1 TB/s = 25% of 4 TB/s
    result = _result(_row("prefill", 100.0, bytes_=1e8, flops=1e8, unit=ComputeUnit.VECTOR_FP32))

    report = diagnose("c1_0", result, None, CEILINGS)

    assert report.bound == "memory"
    assert report.distance["memory"] == pytest.approx(0.25)
    assert report.distance["launch"] == pytest.approx(FLOOR_US / 100.0)
    assert "memory_bound_far_from_peak" in report.hints
    assert report.sol_fraction == pytest.approx(0.25)
    assert "memory-bound" in report.summary and "25% of 4.00 TB/s" in report.summary


def test_memory_bound_near_peak_and_near_sol() -> None:
    report = diagnose("c", _result(_row("p", 27.0, bytes_=1e8)), None, CEILINGS)

    assert report.bound == "memory"
    assert report.distance["memory"] == pytest.approx(1e8 / 27e-6 / BANDWIDTH)
    assert "memory_bound_near_peak" in report.hints and "near_sol" in report.hints


def test_compute_bound_gemm_far_from_peak() -> None:
    # 2*8192^3 FLOPs on tensor cores: T_sol ~1.37 ms; 4 ms reaches ~34% of 800 TFLOP/s
    flops = 2 * 8192.0**3
    row = _row("gemm", 4000.0, bytes_=3 * 8192 * 8192 * 2.0, flops=flops, unit=ComputeUnit.TC_BF16)

    report = diagnose("c", _result(row), None, CEILINGS)

    assert report.bound == "compute"
    assert report.distance["compute"] == pytest.approx(flops / 4e-3 / BF16_RATE)
    assert "compute_bound_far_from_peak" in report.hints
    assert "tc_bf16" in report.summary


def test_latency_bound_when_close_to_the_launch_floor() -> None:
    small = _row("decode", FLOOR_US * (LATENCY_MULTIPLE - 0.2), bytes_=1e6)  # T_sol 0.25 us < floor

    report = diagnose("c", _result(small), None, CEILINGS)

    assert report.bound == "latency"
    assert report.hints[0] == "latency_bound"
    assert "Latency-bound" in report.summary


def test_kernel_well_above_the_floor_with_tiny_bytes_is_still_latency_when_t_sol_is_the_floor() -> (
    None
):
    # T_sol is the launch floor (tiny work), although T is 4x the floor
    report = diagnose("c", _result(_row("tiny", 4 * FLOOR_US, bytes_=1e3)), None, CEILINGS)

    assert report.bound == "latency"


def test_overall_class_is_the_one_that_loses_most_score() -> None:
    decode = _row("decode", 8.0, bytes_=1e6)  # latency, S = 5/8
    prefill = _row("prefill", 400.0, bytes_=1e8)  # memory, S = 25/400
    report = diagnose("c", _result(decode, prefill), None, CEILINGS)

    assert report.bound == "memory"
    # the decode shape weighs 100x more: now its loss dominates
    heavy = _row("decode", 8.0, bytes_=1e6, weight=100.0)
    assert diagnose("c", _result(heavy, prefill), None, CEILINGS).bound == "latency"
    lines = report.summary.splitlines()
    assert lines[2].startswith("- prefill")  # worst shape first


def test_cpu_result_is_unknown_and_says_not_measured() -> None:
    row = ShapeResult(shape_id="smoke", split=Split.SMOKE, verdict=Verdict.ACCEPTED)

    report = diagnose("c0", _result(row, measured=False), None, None)

    assert report.bound == "unknown"
    assert report.distance == {} and report.sol_fraction is None
    assert "not measured" in report.summary
    assert report.hints == ["not_measured"]


def test_rejected_candidate_is_unknown() -> None:
    row = ShapeResult(shape_id="p", split=Split.TUNE, verdict=Verdict.WRONG_OUTPUT)

    report = diagnose("c", _result(row, verdict=Verdict.WRONG_OUTPUT), None, CEILINGS)

    assert report.bound == "unknown" and "wrong_output" in report.summary


def _data(*kernels: KernelFacts, ncu: list[NcuKernelMetrics] | None = None) -> ProfileData:
    limits = {
        "max_shared_bytes": 232448,
        "regs_per_sm": 65536,
        "max_threads_per_sm": 2048,
        "sm_count": 132,
        "warp_size": 32,
    }
    return ProfileData(
        shape_id="p", mode="gpu", kernels=list(kernels), ncu=ncu or [], device_limits=limits
    )


def test_compiler_flags_spills_registers_occupancy_and_shared_memory() -> None:
    fat = KernelFacts(
        name="_fat", n_regs=255, n_spills=12, shared_bytes=220_000, num_warps=8, num_stages=4
    )
    lean = KernelFacts(
        name="_lean", n_regs=32, n_spills=0, shared_bytes=0, num_warps=4, num_stages=1
    )
    result = _result(_row("p", 100.0, bytes_=1e8))

    report = diagnose("c", result, _data(fat, lean), CEILINGS)

    for hint in ("spills", "high_registers", "low_occupancy", "shared_memory_near_limit"):
        assert hint in report.hints
    assert report.compiler[0]["name"] == "_fat" and report.compiler[0]["n_spills"] == 12
    assert "_fat: 255 regs, 12 spills" in report.summary
    assert "Register spills" in report.summary

    clean = diagnose("c", result, _data(lean), CEILINGS)
    assert not {"spills", "high_registers", "low_occupancy"} & set(clean.hints)


def test_ncu_metrics_give_stall_and_occupancy_hints() -> None:
    metrics = NcuKernelMetrics(
        name="_row",
        duration_us=90.0,
        dram_throughput_pct=31.0,
        sm_throughput_pct=12.0,
        achieved_occupancy_pct=18.0,
        stalls={"long_scoreboard": 14.0, "wait": 2.0},
    )
    lean = KernelFacts(
        name="_row", n_regs=32, n_spills=0, shared_bytes=0, num_warps=4, num_stages=1
    )

    report = diagnose("c", _result(_row("p", 100.0, bytes_=1e8)), _data(lean, ncu=[metrics]), None)

    assert "stall_long_scoreboard" in report.hints and "low_occupancy" in report.hints
    assert report.ncu["_row"]["dram_throughput_pct"] == 31.0
    assert "ncu _row: DRAM 31% of peak" in report.summary
    assert report.distance["memory"] == pytest.approx(0.25)  # ceilings from the manifest


def test_summary_stays_within_twelve_lines() -> None:
    rows = [_row(f"s{i}", 50.0 + i, bytes_=1e7 * (i + 1)) for i in range(9)]
    fat = KernelFacts(
        name="_k", n_regs=255, n_spills=3, shared_bytes=220_000, num_warps=8, num_stages=4
    )
    data = _data(fat, fat, fat, ncu=[NcuKernelMetrics(name="_k", stalls={"wait": 1.0})])

    report = diagnose("c", _result(*rows), data, CEILINGS)

    assert 8 <= len(report.summary.splitlines()) <= 12
    assert "more shapes" in report.summary
