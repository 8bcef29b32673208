"""The cold re-check of final results: fresh random seeds, empty caches, same verdict and speed."""

from __future__ import annotations

from pathlib import Path

import pytest

from aka.bench import EvalResult, LatencyStats, Manifest, Scorer, ShapeResult, Verdict
from aka.bench.cold import cold_seeds, judge_cold
from aka.bench.sandbox import build_worker_env
from aka.spec import ProblemSpec, Split


def _result(median: float | None, verdict: Verdict = Verdict.ACCEPTED) -> EvalResult:
    row = ShapeResult(
        shape_id="a",
        split=Split.TUNE,
        verdict=verdict,
        latency_us=None if median is None else LatencyStats(median=median, iqr=0.1, n=10),
    )
    return EvalResult(
        verdict=verdict,
        performance_measured=median is not None,
        shapes=[row],
        score=0.5 if verdict is Verdict.ACCEPTED else 0.0,
        manifest=Manifest(
            source_sha256="s",
            problem_sha256="p",
            problem_name="x",
            mode="gpu",
            seeds=[5, 6, 7],
            created_at="now",
        ),
    )


def test_cold_seeds_are_fresh_and_distinct() -> None:
    seeds = cold_seeds(3)
    assert len(set(seeds)) == 3 and all(s >= 1_000_000 for s in seeds)
    assert cold_seeds(3) != seeds  # random per call: a candidate cannot anticipate them


def test_reproduced_result_keeps_its_verdict_and_gets_a_note() -> None:
    merged = judge_cold(_result(10.5), _result(10.0), max_slowdown=1.25)
    assert merged.verdict is Verdict.ACCEPTED and merged.score == 0.5
    assert "reproduced" in merged.notes[-1] and "1.05" in merged.notes[-1]


def test_cold_slowdown_is_not_reproduced() -> None:
    merged = judge_cold(_result(30.0), _result(10.0), max_slowdown=1.25)
    assert merged.verdict is Verdict.NOT_REPRODUCED and merged.score == 0.0
    assert merged.failure is not None and "{'a': 3.0}" in merged.failure.message


def test_cold_rejection_is_not_reproduced() -> None:
    merged = judge_cold(_result(None, Verdict.WRONG_OUTPUT), _result(10.0), max_slowdown=1.25)
    assert merged.verdict is Verdict.NOT_REPRODUCED
    assert merged.failure is not None and "wrong_output" in merged.failure.message


def test_workers_keep_every_compiler_cache_in_their_own_directory(tmp_path: Path) -> None:
    workdir = tmp_path
    env = build_worker_env(
        workdir, interpret=True, gpu_index=None, extra={"CUDA_CACHE_DISABLE": "1"}
    )
    for key in ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "XDG_CACHE_HOME", "HOME", "TMPDIR"):
        assert env[key].startswith(str(workdir)), key
    assert env["CUDA_CACHE_DISABLE"] == "1"


def test_cold_recheck_end_to_end_on_the_cpu(
    cpu_scorer: Scorer, rms_norm: ProblemSpec, rms_norm_candidate: str
) -> None:
    result = cpu_scorer.evaluate(
        rms_norm, rms_norm_candidate, shape_ids=["smoke_t33_h256"], cold_recheck=True
    )
    assert result.verdict is Verdict.ACCEPTED, result.failure
    note = result.notes[-1]
    assert note.startswith("cold re-check (fresh seeds") and "reproduced" in note
    # the reported result keeps its own seeds; the note names the cold ones
    assert result.manifest.seeds == [0, 1, 2]


@pytest.mark.parametrize(("mode", "cpu", "wanted"), [("gpu", True, False), ("always", True, True)])
def test_cold_recheck_setting(mode: str, cpu: bool, wanted: bool, cpu_scorer: Scorer) -> None:
    scorer = Scorer(
        cpu_scorer.config.model_copy(update={"cold_recheck": mode}),
        cpu_scorer.cache_dir,
        device="cpu",
    )
    assert scorer.cpu is cpu and scorer.wants_cold_recheck is wanted
