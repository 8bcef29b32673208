"""The scorer on a real GPU: times, SOL fractions and the timing guards (run with -m gpu)."""

from __future__ import annotations

from pathlib import Path

import pytest

from aka.bench import Scorer, Verdict
from aka.core import BenchConfig
from aka.spec import ProblemSpec
from tests.bench.conftest import fixture_candidate

pytestmark = [pytest.mark.gpu, pytest.mark.integration]
SHAPES = ["decode_b64_h4096", "prefill_t4096_h4096"]


@pytest.fixture(scope="module")
def gpu_scorer(tmp_path_factory: pytest.TempPathFactory) -> Scorer:
    config = BenchConfig(
        min_samples=50, max_samples=300, sample_budget_s=0.5, torch_compile_baseline=False
    )
    return Scorer(config, tmp_path_factory.mktemp("gpu-cache"), device="cuda")


@pytest.fixture(scope="module")
def runtime_scorer(gpu_scorer: Scorer) -> Scorer:
    """The same scorer with the static screen skipped: runtime evidence alone must decide."""
    return Scorer(gpu_scorer.config, gpu_scorer.cache_dir, device="cuda", static_screen=False)


def test_gpu_correct_candidate_is_timed_and_scored(
    gpu_scorer: Scorer, rms_norm: ProblemSpec, rms_norm_candidate: str
) -> None:
    result = gpu_scorer.evaluate(rms_norm, rms_norm_candidate, shape_ids=SHAPES)
    assert result.verdict is Verdict.ACCEPTED, result.failure
    assert result.performance_measured
    for row in result.shapes:
        assert row.latency_us is not None and row.latency_us.n >= 50
        assert row.t_sol_us is not None and 0 < row.sol_fraction <= 1  # type: ignore[operator]
        assert row.bound in ("memory", "latency")
        assert "eager" in row.baselines_us
    assert result.score is not None and 0 < result.score <= 1
    assert result.manifest.device and "H" in result.manifest.device
    assert result.manifest.raw_samples_us["launch_floor"]["stream_us"]


def test_gpu_wrong_candidate_is_rejected(gpu_scorer: Scorer, rms_norm: ProblemSpec) -> None:
    result = gpu_scorer.evaluate(
        rms_norm, fixture_candidate("rms_norm_drop_last_row.py"), shape_ids=SHAPES
    )
    assert result.verdict in (Verdict.WRONG_OUTPUT, Verdict.NON_FINITE)
    assert result.performance_measured is False


def test_gpu_side_stream_work_is_a_timing_mismatch(
    runtime_scorer: Scorer, rms_norm: ProblemSpec, rms_norm_candidate: str
) -> None:
    # the result is computed on the launching stream first; then one big launch of the
    # candidate's own kernel (own: the engagement gate has nothing to say) goes to a side stream
    # and forward returns at once: the stream window closes early, the device works on
    source = rms_norm_candidate.replace(
        "        return rms_norm(x, weight, self.eps)\n",
        "        y = rms_norm(x, weight, self.eps)\n"
        "        big = x.new_empty((x.shape[0] * 512, x.shape[1]))\n"
        "        side = torch.cuda.Stream()\n"
        "        with torch.cuda.stream(side):\n"
        "            rms_norm(big, weight, self.eps)\n"
        "        return y\n",
    )
    result = runtime_scorer.evaluate(rms_norm, source, shape_ids=SHAPES[:1])
    assert result.verdict is Verdict.TIMING_MISMATCH, result.failure


def test_gpu_timer_tampering_is_detected(
    runtime_scorer: Scorer, rms_norm: ProblemSpec, rms_norm_candidate: str
) -> None:
    patch = (
        "\nimport torch as _t\n_orig = _t.cuda.Event.elapsed_time\n"
        "_t.cuda.Event.elapsed_time = lambda self, end: 0.5 * _orig(self, end)\n"
    )
    result = runtime_scorer.evaluate(rms_norm, rms_norm_candidate + patch, shape_ids=SHAPES[:1])
    assert result.verdict is Verdict.TAMPERED, result.failure


def test_gpu_crash_then_next_evaluation_works(
    gpu_scorer: Scorer,
    runtime_scorer: Scorer,
    rms_norm: ProblemSpec,
    rms_norm_candidate: str,
    tmp_path: Path,
) -> None:
    assert (
        runtime_scorer.evaluate(
            rms_norm, fixture_candidate("rms_norm_crash.py"), shape_ids=SHAPES[:1]
        ).verdict
        is Verdict.CRASH
    )
    assert (
        gpu_scorer.evaluate(rms_norm, rms_norm_candidate, shape_ids=SHAPES[:1]).verdict
        is Verdict.ACCEPTED
    )
