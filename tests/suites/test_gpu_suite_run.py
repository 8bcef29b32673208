"""``aka bench run`` on a GPU: baselines timed, priced against T_sol; holdout shapes generated."""

from __future__ import annotations

from pathlib import Path

import pytest

from aka.bench import Scorer
from aka.bench.suite_run import SuiteOptions, run_suite
from aka.core.config import BenchConfig
from aka.spec import load_suite

pytestmark = [pytest.mark.gpu, pytest.mark.integration]


def test_baselines_are_timed_checked_and_scored_with_holdout(tmp_path: Path) -> None:
    config = BenchConfig(min_samples=5, max_samples=200, sample_budget_s=0.1, cold_recheck="never")
    scorer = Scorer(config, tmp_path / "cache", device="cuda")
    options = SuiteOptions(
        out_dir=tmp_path / "out",
        baselines=["eager", "torch_compile", "library"],
        ops=["rms_norm", "fused_add_rms_norm"],
        max_shapes=2,
        compile_max_shapes=1,
        holdout_seed=1234,
    )
    run = run_suite(scorer, load_suite("atrex30"), options)
    assert run.performance_measured and run.ceilings and run.device
    for op in ("rms_norm", "fused_add_rms_norm"):
        for entrant in ("eager", "library"):
            result = run.result(entrant, op)
            assert result is not None and result.status == "ok", (entrant, op, result)
            splits = {s.split for s in result.shapes}
            assert splits == {"tune", "holdout"}
            for s in result.shapes:
                assert s.t_sol_us and s.t_sol_us > 0 and s.latency_us and s.latency_us > 0
                assert s.s == pytest.approx(min(1.0, s.t_sol_us / s.latency_us))
        compiled = run.result("torch_compile", op)
        assert compiled is not None
        assert sum(s.s is not None for s in compiled.shapes) == 1  # --compile-max-shapes 1
    summary = {s.entrant: s for s in run.summary}
    assert summary["eager"].suite_score is not None and 0 < summary["eager"].suite_score <= 1
    # The holdout shapes are generated from the seed: the run records its hash, never the seed.
    assert run.holdout_seed_hash and "1234" not in run.holdout_seed_hash
