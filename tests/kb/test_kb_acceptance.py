"""``benchmarks/kb_acceptance.py``: kernels adapted and scored on the problems they serve."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from aka.kb import load_kernels
from tests.scripts import load_script

REPO = Path(__file__).resolve().parents[2]


def _module() -> Any:
    return load_script("benchmarks/kb_acceptance.py")


def _meta(kid: str) -> Any:
    kernels, _ = load_kernels(REPO / "reference_kernels")
    return next(k.meta for k in kernels if k.meta.id == kid)


def test_a_rounding_knob_is_tried_both_ways_and_other_knobs_are_not() -> None:
    variants = _module()._numerics_variants
    assert variants(_meta("silu_and_mul_rowwise")) == [{}, {"round_act": False}]
    assert variants(_meta("rms_norm_rowwise")) == [{}]


@pytest.mark.slow
def test_a_cpu_run_scores_a_kernel_on_the_atrex30_and_example_problems(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "kb_acceptance.py"), "--device", "cpu",
         "--kernels", "silu_and_mul_rowwise", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=900, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    record = json.loads((tmp_path / "kb_acceptance_cpu.json").read_text())
    rows = {r["problem"]: r for r in record["rows"]}
    assert set(rows) == {"atrex30/silu_and_mul", "examples/silu_and_mul"}
    assert all(r["kernel"] == "silu_and_mul_rowwise" for r in rows.values())
    # the fp32-computed example reference wants the single rounding
    assert rows["examples/silu_and_mul"]["verdict"] == "accepted"
    assert rows["examples/silu_and_mul"]["tuning"] == {"round_act": False}
