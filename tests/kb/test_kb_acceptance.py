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
    # accepted on both; the other rounding is tried only when the default one is rejected (with
    # the interpreter rounding bf16 as a GPU does, the default passes the fp32-computed example)
    assert {r["verdict"] for r in rows.values()} == {"accepted"}
    assert all(r["tuning"] in ({}, {"round_act": False}) for r in rows.values())


def test_the_most_important_kernels_serve_the_heaviest_operators_first() -> None:
    rows = [
        {"kernel": "a", "problem": "atrex30/light", "verdict": "accepted"},
        {"kernel": "b", "problem": "atrex30/heavy", "verdict": "wrong_output"},
        {"kernel": "c", "problem": "examples/heavy", "verdict": "accepted"},
        {"kernel": "d", "problem": "atrex30/heavy", "verdict": "accepted"},
        {"kernel": "a", "problem": "atrex30/heavy", "verdict": "accepted"},
        {"kernel": "e", "problem": "atrex30/unknown", "verdict": "accepted"},
    ]
    ranked = _module().ranked_kernels(rows, {"heavy": 0.5, "light": 0.1})
    # a rejected pair and a non-atrex30 problem rank nothing; a kernel ranks by its heaviest op
    assert ranked == ["d", "a"]


def test_measured_entries_from_a_results_file_land_in_the_headers(tmp_path: Path) -> None:
    src = REPO / "reference_kernels" / "triton" / "norm" / "rms_norm_rowwise.py"
    copy = tmp_path / "triton" / "norm" / "rms_norm_rowwise.py"  # the layout load_kernels wants
    copy.parent.mkdir(parents=True)
    copy.write_text(src.read_text(encoding="utf-8"), encoding="utf-8")
    entry = {"device": "NVIDIA H200", "shape": "rms_norm/t4096_h4096", "dtype": "bf16",
             "latency_us": 12.5, "sol_fraction": 0.61, "date": "2026-12-03"}  # fmt: skip
    rows = [
        {"kernel": "rms_norm_rowwise", "measured": [entry]},
        {"kernel": "rms_norm_rowwise", "measured": []},
    ]
    assert _module().apply_measured(rows, {"rms_norm_rowwise": copy}) == 1
    (kernel,), problems = load_kernels(tmp_path)
    assert problems == []
    (measured,) = kernel.meta.measured
    assert (measured.device, measured.shape, measured.latency_us) == (
        "NVIDIA H200",
        "rms_norm/t4096_h4096",
        12.5,
    )
