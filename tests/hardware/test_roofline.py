from __future__ import annotations

import pytest

from aka.core import SpecError, UnsupportedHardwareError
from aka.hardware import CostCounts, DeviceCeilings, apply_overrides, datasheet_ceilings, t_sol
from aka.spec import ComputeUnit, RooflineOverrideSpec


def _sheet(name: str) -> DeviceCeilings:
    sheet = datasheet_ceilings(name)
    assert sheet is not None
    return sheet


H200 = _sheet("NVIDIA H200")


def test_t_sol_rms_norm_bf16_is_memory_bound_on_h200() -> None:
    rows, hidden = 4096, 4096
    counts = CostCounts(
        flops_by_unit={ComputeUnit.VECTOR_FP32: 4.0 * rows * hidden},
        bytes_read=rows * hidden * 2 + hidden * 2,  # x + weight, bf16
        bytes_written=rows * hidden * 2,
    )

    got = t_sol(counts, H200)

    expected_bytes = 2 * 4096 * 4096 * 2 + 4096 * 2
    assert got.bytes_total == expected_bytes
    assert got.bound == "memory"
    assert got.t_memory_s == pytest.approx(expected_bytes / 4.8e12)
    assert got.t_sol_s == got.t_memory_s
    assert got.t_compute_s == pytest.approx(4.0 * rows * hidden / 66.9e12)
    assert got.t_floor_s is None


def test_t_sol_bf16_gemm_is_compute_bound_on_h200() -> None:
    n = 4096
    counts = CostCounts(
        flops_by_unit={ComputeUnit.TC_BF16: 2.0 * n**3},
        bytes_read=2 * n * n * 2,
        bytes_written=n * n * 2,
    )

    got = t_sol(counts, H200)

    assert got.bound == "compute"
    assert got.t_sol_s == pytest.approx(2 * 4096**3 / 989.4e12)
    assert got.t_memory_s == pytest.approx(3 * 4096 * 4096 * 2 / 4.8e12)
    assert got.flops_total == 2.0 * n**3


def test_t_sol_sums_compute_time_over_units() -> None:
    counts = CostCounts(
        flops_by_unit={ComputeUnit.TC_BF16: 989.4e9, ComputeUnit.VECTOR_FP32: 66.9e9}
    )

    got = t_sol(counts, H200)

    assert got.t_compute_s == pytest.approx(2e-3)
    assert got.bound == "compute"


def test_t_sol_latency_bound_when_the_floor_dominates() -> None:
    ceilings = H200.model_copy(update={"launch_floor_us": 4.6, "launch_floor_iqr_us": 0.3})
    counts = CostCounts(
        flops_by_unit={ComputeUnit.VECTOR_FP32: 1024.0}, bytes_read=4096, bytes_written=4096
    )

    got = t_sol(counts, ceilings)

    assert got.bound == "latency"
    assert got.t_sol_s == pytest.approx(4.6e-6)
    assert got.t_floor_s == pytest.approx(4.6e-6)


def test_t_sol_floor_does_not_win_over_a_large_memory_term() -> None:
    ceilings = H200.model_copy(update={"launch_floor_us": 4.6})
    counts = CostCounts(bytes_read=4.8e9)  # 1 ms at 4.8 TB/s

    got = t_sol(counts, ceilings)

    assert got.bound == "memory"
    assert got.t_sol_s == pytest.approx(1e-3)


def test_t_sol_unit_missing_on_device_raises() -> None:
    counts = CostCounts(flops_by_unit={ComputeUnit.TC_FP8: 1e12})

    with pytest.raises(UnsupportedHardwareError) as err:
        t_sol(counts, _sheet("NVIDIA A100-SXM4-80GB"))

    assert "tc_fp8" in err.value.message
    assert "NVIDIA A100-SXM4-80GB" in err.value.message


def test_t_sol_zero_flops_on_a_missing_unit_is_fine() -> None:
    counts = CostCounts(flops_by_unit={ComputeUnit.TC_FP8: 0.0}, bytes_read=2.039e9)

    got = t_sol(counts, _sheet("NVIDIA A100-SXM4-80GB"))

    assert got.t_sol_s == pytest.approx(1e-3)


COUNTED = CostCounts(
    flops_by_unit={ComputeUnit.FP32_MATMUL: 100.0, ComputeUnit.VECTOR_FP32: 5.0},
    bytes_read=1000.0,
    bytes_written=10.0,
    notes=["counted"],
)


def test_apply_overrides_replaces_only_the_fields_set() -> None:
    override = RooflineOverrideSpec(bytes_read="tokens * hidden * 2", reason="cache read once")

    got = apply_overrides(COUNTED, [override], {"tokens": 8, "hidden": 64})

    assert got.bytes_read == 8 * 64 * 2
    assert got.bytes_written == 10.0
    assert got.flops_by_unit == COUNTED.flops_by_unit
    assert got.notes[0] == "counted"
    assert "cache read once" in got.notes[-1] and "bytes_read" in got.notes[-1]


def test_apply_overrides_flops_replace_the_whole_table() -> None:
    override = RooflineOverrideSpec(
        flops_by_unit={ComputeUnit.TC_BF16: "2 * m * n * k"}, reason="causal mask halves it"
    )

    got = apply_overrides(COUNTED, [override], {"m": 4, "n": 8, "k": 16})

    assert got.flops_by_unit == {ComputeUnit.TC_BF16: 2 * 4 * 8 * 16}
    assert got.bytes_read == 1000.0


def test_apply_overrides_apply_in_order_and_respect_shape_ids() -> None:
    overrides = [
        RooflineOverrideSpec(bytes_written=1, reason="first"),
        RooflineOverrideSpec(shapes=["big"], bytes_written="x * 2", reason="second"),
    ]

    small = apply_overrides(COUNTED, overrides, {"x": 50}, shape_id="small")
    big = apply_overrides(COUNTED, overrides, {"x": 50}, shape_id="big")

    assert small.bytes_written == 1
    assert big.bytes_written == 100
    assert [n.split(": ")[-1] for n in big.notes[1:]] == ["first", "second"]


@pytest.mark.parametrize(
    ("expression", "fragment"),
    [("tokens * missing", "missing"), ("0 - tokens", "negative"), ("import os", "evaluate")],
)
def test_apply_overrides_bad_expression_is_a_spec_error(expression: str, fragment: str) -> None:
    override = RooflineOverrideSpec(bytes_read=expression, reason="r")

    with pytest.raises(SpecError) as err:
        apply_overrides(COUNTED, [override], {"tokens": 3})

    assert fragment in str(err.value)
    assert err.value.field == "roofline.bytes_read"


def test_cost_counts_totals() -> None:
    assert COUNTED.flops_total == 105.0
    assert COUNTED.bytes_total == 1010.0
