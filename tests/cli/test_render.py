"""``aka bench score``'s GPU table: the library path's column appears only when it was timed."""

from __future__ import annotations

import io

from rich.console import Console

from aka.bench.result import EvalResult, LatencyStats, Manifest, ShapeResult, Verdict
from aka.cli.render import eval_table
from aka.spec import Split


def _result(baselines: dict[str, float]) -> EvalResult:
    row = ShapeResult(
        shape_id="decode",
        split=Split.TUNE,
        verdict=Verdict.ACCEPTED,
        latency_us=LatencyStats(median=10.0, iqr=0.5, n=100),
        baselines_us={k: LatencyStats(median=v, iqr=1.0, n=100) for k, v in baselines.items()},
        t_sol_us=5.0,
        sol_fraction=0.5,
        fallback_ratio=0.01,
    )
    manifest = Manifest(
        source_sha256="0" * 64,
        problem_sha256="1" * 64,
        problem_name="attention",
        mode="gpu",
        created_at="2026-12-03T00:00:00+00:00",
    )
    return EvalResult(
        verdict=Verdict.ACCEPTED, performance_measured=True, shapes=[row], manifest=manifest
    )


def _text(result: EvalResult) -> str:
    console = Console(file=io.StringIO(), width=200)
    console.print(eval_table(result))
    return console.file.getvalue()  # type: ignore[attr-defined]


def test_library_column_only_when_the_problem_has_a_library_path() -> None:
    with_library = _text(_result({"eager": 40.0, "torch_compile": 20.0, "library": 12.345}))
    assert "library us" in with_library and "12.35" in with_library
    assert "fallback" in with_library and "1%" in with_library
    without = _text(_result({"eager": 40.0}))
    assert "library us" not in without and "40.00" in without
