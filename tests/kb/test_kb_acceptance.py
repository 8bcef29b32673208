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
def test_a_cpu_run_scores_a_kernel_on_its_family_problems_and_its_own(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "kb_acceptance.py"), "--device", "cpu",
         "--kernels", "silu_and_mul_rowwise", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=900, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    record = json.loads((tmp_path / "kb_acceptance_cpu.json").read_text())
    rows = {r["problem"]: r for r in record["rows"]}
    own = "own/kernel.silu_and_mul_rowwise"
    assert set(rows) == {"atrex30/silu_and_mul", "examples/silu_and_mul", own}
    assert [r["problem"] for r in record["rows"]][-1] == own  # family problems are scored first
    assert {p: r["problem_kind"] for p, r in rows.items()} == {
        "atrex30/silu_and_mul": "atrex30",
        "examples/silu_and_mul": "examples",
        own: "own",
    }
    assert all(r["kernel"] == "silu_and_mul_rowwise" for r in rows.values())
    # accepted on both; the other rounding is tried only when the default one is rejected (with
    # the interpreter rounding bf16 as a GPU does, the default passes the fp32-computed example)
    assert {r["verdict"] for r in rows.values()} == {"accepted"}
    assert all(r["tuning"] in ({}, {"round_act": False}) for r in rows.values())


def test_an_in_place_kernel_on_a_functional_problem_gets_a_named_row(tmp_path: Path) -> None:
    # rope_position_ids_inplace_qk computes rotary_embedding, but writes q and k in place while the
    # example returns new tensors: the adapter refuses the pair by name, and the row says so
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "kb_acceptance.py"), "--device", "cpu",
         "--kernels", "rope_position_ids_inplace_qk", "--problems", "examples",
         "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=600, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    record = json.loads((tmp_path / "kb_acceptance_cpu.json").read_text())
    (row,) = [r for r in record["rows"] if r["problem"] == "examples/rotary_embedding"]
    assert row["verdict"] == "in_place_mismatch"
    assert "'q'" in row["message"] and "in_place" in row["message"]


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
    # the entry lands next to those the header already had (other shapes)
    (measured,) = [m for m in kernel.meta.measured if m.shape == "rms_norm/t4096_h4096"]
    assert (measured.device, measured.shape, measured.latency_us) == (
        "NVIDIA H200",
        "rms_norm/t4096_h4096",
        12.5,
    )


def test_the_summary_counts_kernels_per_problem_kind_and_names_the_rejected() -> None:
    rows = [
        {"kernel": "a", "problem": "atrex30/rms_norm", "verdict": "accepted"},
        {"kernel": "a", "problem": "own/kernel.a", "problem_kind": "own", "verdict": "accepted"},
        {"kernel": "b", "problem": "examples/softmax", "verdict": "wrong_output"},
        {"kernel": "b", "problem": "own/kernel.b", "problem_kind": "own", "verdict": "accepted"},
        {"kernel": "c", "problem": "atrex30/softmax", "verdict": "accepted"},
        {"kernel": "d", "problem": "own/kernel.d", "problem_kind": "own", "verdict": "skipped"},
        {"kernel": "e", "problem": "atrex30/x", "verdict": "wrong_output"},
        {"kernel": "e", "problem": "own/kernel.e", "verdict": "screen_rejected"},
    ]  # fmt: skip
    summary = _module().summarize(rows, kernels=6, triton=5)
    assert summary["accepted_by_kind"] == {"atrex30": 2, "examples": 0, "own": 2}
    assert summary["accepted_first_by_kind"] == {"atrex30": 2, "examples": 0, "own": 1}
    assert summary["accepted_on_a_problem"] == 3 and summary["accepted_only_on_own"] == ["b"]
    # a kernel accepted nowhere is listed under its own problem's verdict
    assert summary["not_accepted_by_verdict"] == {"screen_rejected": ["e"], "skipped": ["d"]}


def test_merge_joins_shards_and_carries_only_pairs_not_rerun(tmp_path: Path) -> None:
    def results(name: str, date: str, rows: list[dict[str, Any]]) -> Path:
        path = tmp_path / name
        base = {"device": "cpu", "date": date, "versions": {}, "kernels": 3, "triton_kernels": 3}
        path.write_text(json.dumps(base | {"rows": rows}))
        return path

    row = {"kernel": "a", "problem": "atrex30/p", "verdict": "accepted"}
    shard0 = results("s0.json", "2026-12-04T00:00:00+00:00", [row])
    own = {"kernel": "b", "problem": "own/kernel.b", "verdict": "accepted"}
    shard1 = results("s1.json", "2026-12-04T00:01:00+00:00", [own])
    old = results("old.json", "2026-12-03T00:00:00+00:00",
                  [row | {"verdict": "wrong_output"},
                   {"kernel": "c", "problem": "examples/q", "verdict": "accepted"}])  # fmt: skip
    rerun = results("rerun.json", "2026-12-04T00:02:00+00:00", [own | {"verdict": "wrong_output"}])
    out = tmp_path / "merged.json"
    record = _module().merge([shard0, shard1, rerun], [old], out, "a note")
    kept = {(r["kernel"], r["problem"]): r for r in record["rows"]}
    assert kept[("a", "atrex30/p")]["verdict"] == "accepted"  # the new run wins
    assert kept[("c", "examples/q")]["carried_from"] == "2026-12-03T00:00:00+00:00"
    assert [r["problem_kind"] for r in record["rows"]] == ["atrex30", "examples", "own"]
    assert kept[("b", "own/kernel.b")]["verdict"] == "wrong_output"  # a later file's re-run wins
    assert len(record["rows"]) == 3 and record["summary"]["accepted_on_a_problem"] == 2
    assert json.loads(out.read_text())["note"] == "a note"


def test_measured_entries_do_not_count_against_the_kernel_line_cap(tmp_path: Path) -> None:
    src = REPO / "reference_kernels" / "triton" / "norm" / "rms_norm_rowwise.py"
    copy = tmp_path / "triton" / "norm" / "rms_norm_rowwise.py"
    copy.parent.mkdir(parents=True)
    text = src.read_text(encoding="utf-8").rstrip("\n") + "\n"
    measured_now = text.count("\n  - {device:")
    # pad the code to exactly the cap (400 lines besides the header's measured entries)
    pad = 400 - (text.count("\n") + 1 - measured_now)
    assert pad > 0
    copy.write_text(text + "# pad\n" * (pad - 1) + "# last\n", encoding="utf-8")
    assert load_kernels(tmp_path)[1] == []
    shapes = [f"rms_norm/pad{i}" for i in range(3)]
    entries = [{"device": "NVIDIA H200", "shape": s, "dtype": "bf16", "latency_us": 1.0,
                "sol_fraction": 0.5, "date": "2026-12-04"} for s in shapes]  # fmt: skip
    assert _module().apply_measured([{"kernel": "rms_norm_rowwise", "measured": entries}],
                                    {"rms_norm_rowwise": copy}) == 3  # fmt: skip
    assert load_kernels(tmp_path)[1] == []  # three header lines longer, still within the cap
    copy.write_text(copy.read_text(encoding="utf-8") + "# one code line too many\n")
    (problem,) = load_kernels(tmp_path)[1]
    assert "over 400 lines" in problem
