"""Paired re-measurement and profile data on a real GPU (run with -m gpu)."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

import pytest

from aka.bench import Scorer, Verdict
from aka.bench.profile import find_ncu
from aka.core import BenchConfig
from aka.spec import ComputeUnit, ProblemSpec

pytestmark = [pytest.mark.gpu, pytest.mark.integration]
SHAPES = ["decode_b64_h4096", "prefill_t4096_h4096"]
WARPS_LINE = "    num_warps = min(max(block_h // 256, 1), 16)\n"
logger = logging.getLogger(__name__)


@pytest.fixture(scope="module")
def gpu_scorer(tmp_path_factory: pytest.TempPathFactory) -> Scorer:
    config = BenchConfig(
        min_samples=50,
        max_samples=300,
        sample_budget_s=0.5,
        torch_compile_baseline=False,
        ceilings="datasheet",
    )
    return Scorer(config, tmp_path_factory.mktemp("gpu-pair-cache"), device="cuda")


def test_gpu_a_vs_a_is_one_within_noise(
    gpu_scorer: Scorer, rms_norm: ProblemSpec, rms_norm_candidate: str
) -> None:
    # decode_b256_h8192 is the shape whose A/A ratio read 1.09 before batches re-placed inputs
    shapes = [*SHAPES, "decode_b256_h8192"]
    cmp = gpu_scorer.compare(
        rms_norm, rms_norm_candidate, rms_norm_candidate, shape_ids=shapes, pairs=7
    )
    logger.info("A/A: ratio=%s noise=%s shapes=%s", cmp.ratio, cmp.noise, cmp.model_dump())

    assert cmp.measured, cmp.notes
    assert [s.shape_id for s in cmp.shapes] == shapes
    assert all(len(s.ratios) == 7 and min(s.a_us + s.b_us) > 0 for s in cmp.shapes)
    assert cmp.ratio is not None and cmp.noise is not None
    assert abs(math.log(cmp.ratio)) <= max(2 * cmp.noise, 0.02)


def test_gpu_slower_b_is_detected(
    gpu_scorer: Scorer, rms_norm: ProblemSpec, rms_norm_candidate: str, inject: Callable[[str], str]
) -> None:
    twice = inject("rms_norm(x, weight, self.eps)")  # the same work done twice per call
    cmp = gpu_scorer.compare(rms_norm, rms_norm_candidate, twice, shape_ids=SHAPES)
    logger.info("A/2A: ratio=%s noise=%s shapes=%s", cmp.ratio, cmp.noise, cmp.model_dump())

    assert cmp.measured, cmp.notes
    assert cmp.ratio is not None and cmp.noise is not None
    assert cmp.ratio < 1.0 / (1.0 + cmp.noise)  # B is slower, beyond the noise
    assert cmp.ratio < 0.85
    assert all(s.ratio is not None and s.ratio < 1.0 for s in cmp.shapes)


def test_gpu_profile_reads_compiler_facts_and_ncu(
    gpu_scorer: Scorer, rms_norm: ProblemSpec, rms_norm_candidate: str
) -> None:
    data = gpu_scorer.profile(rms_norm, rms_norm_candidate, shape_id="prefill_t4096_h4096")
    logger.info("profile: %s", data.model_dump())

    kernel = next(k for k in data.kernels if "_rms_norm_row_kernel" in k.name)
    assert kernel.n_regs is not None and kernel.n_regs > 0
    assert kernel.num_warps == 16  # BLOCK_H 4096 // 256
    assert kernel.n_spills is not None and kernel.shared_bytes is not None
    assert data.device_limits.get("regs_per_sm", 0) > 0
    if find_ncu() is not None:
        assert data.ncu_ran, data.notes
        m = next(m for m in data.ncu if "_rms_norm_row_kernel" in m.name)
        assert m.duration_us is not None and m.duration_us > 0
        assert m.dram_throughput_pct is not None and 0 < m.dram_throughput_pct <= 100


def test_gpu_profile_sees_the_launch_configuration(
    gpu_scorer: Scorer, rms_norm: ProblemSpec, rms_norm_candidate: str
) -> None:
    one_warp = rms_norm_candidate.replace(WARPS_LINE, "    num_warps = 1\n")
    assert one_warp != rms_norm_candidate

    data = gpu_scorer.profile(rms_norm, one_warp, shape_id="prefill_t4096_h4096", ncu=False)
    logger.info("profile num_warps=1: %s", data.model_dump())

    (kernel,) = [k for k in data.kernels if "_rms_norm_row_kernel" in k.name]
    assert kernel.num_warps == 1 and data.ncu == []


def test_gpu_evaluate_reports_bytes_and_flops(
    gpu_scorer: Scorer, rms_norm: ProblemSpec, rms_norm_candidate: str
) -> None:
    result = gpu_scorer.evaluate(rms_norm, rms_norm_candidate, shape_ids=["prefill_t4096_h4096"])
    (row,) = result.shapes
    logger.info("evaluate: %s", row.model_dump())

    assert result.verdict is Verdict.ACCEPTED, result.failure
    tokens, hidden = 4096, 4096
    # bf16 x read and y written once, the weight read once
    assert row.bytes == pytest.approx(2 * (2 * tokens * hidden + hidden), rel=0.05)
    assert row.flops is not None and row.flops > tokens * hidden
    assert row.compute_unit is ComputeUnit.VECTOR_FP32
