"""The scorer's ``measured:`` entries on reference kernels: built from results, written in place."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from aka.agent.measured import candidate_problems, measured_entries, write_measured
from aka.bench import EvalResult, LatencyStats, Manifest, ShapeResult, Verdict
from aka.core import SpecError
from aka.spec import KernelMeta, Split, kernel_header, load_suite

REPO = Path(__file__).resolve().parents[2]
KERNEL = REPO / "reference_kernels" / "triton" / "norm" / "rms_norm_rowwise.py"


def _result(mode: str = "gpu", verdict: Verdict = Verdict.ACCEPTED) -> EvalResult:
    def shape(sid: str, us: float, s: float | None, v: Verdict = Verdict.ACCEPTED) -> ShapeResult:
        return ShapeResult(
            shape_id=sid,
            split=Split.TUNE,
            verdict=v,
            latency_us=LatencyStats(median=us, iqr=0.1, n=40),
            sol_fraction=s,
        )

    return EvalResult(
        verdict=verdict,
        performance_measured=mode == "gpu",
        shapes=[shape("36", 5.123456, 0.61234), shape("48", 12.0, 1.3), shape("7", 3.0, None)],
        manifest=Manifest(
            source_sha256="a" * 64,
            problem_sha256="b" * 64,
            problem_name="rms_norm",
            device="NVIDIA H200",
            mode=mode,
            created_at="2026-12-03T12:00:00+00:00",
        ),
    )


def test_entries_come_from_accepted_timed_shapes_only() -> None:
    entries = measured_entries(_result(), "bf16")
    assert entries[0] == {
        "device": "NVIDIA H200",
        "shape": "rms_norm/36",
        "dtype": "bf16",
        "latency_us": 5.1235,
        "sol_fraction": 0.6123,
        "date": "2026-12-03",
    }
    assert entries[1]["sol_fraction"] == 1.0  # capped
    assert "sol_fraction" not in entries[2]
    # nothing measured on the CPU, and nothing for a rejected candidate
    assert measured_entries(_result(mode="cpu_interpreter"), "bf16") == []
    assert measured_entries(_result(verdict=Verdict.WRONG_OUTPUT), "bf16") == []
    # a problem whose shapes run at several dtypes names each shape's own
    mixed = measured_entries(_result(), "bf16", dtypes={"48": "fp32"})
    assert [e["dtype"] for e in mixed] == ["bf16", "fp32", "bf16"]


def test_write_measured_changes_only_the_block_and_replaces_same_device_and_shape(
    tmp_path: Path,
) -> None:
    path = tmp_path / KERNEL.name
    shutil.copy(KERNEL, path)
    before = path.read_text()
    had = KernelMeta.model_validate(kernel_header(before, source="x")[0]).measured
    first = measured_entries(_result(), "bf16")
    meta = write_measured(path, first)
    # the header's own entries (the H200 run's) stay; the new ones follow
    assert meta.measured[: len(had)] == had
    assert [(e.shape, e.latency_us) for e in meta.measured[len(had) :]] == [
        ("rms_norm/36", 5.1235),
        ("rms_norm/48", 12.0),
        ("rms_norm/7", 3.0),
    ]
    after = path.read_text()
    # the code and prose after the header are untouched
    assert after.split('"""', 2)[2] == before.split('"""', 2)[2]
    assert kernel_header(after, source="x")[1] == kernel_header(before, source="x")[1]
    # a new measurement of one shape replaces that entry; another device's entry is added
    again = [{**first[0], "latency_us": 4.5}, {**first[1], "device": "NVIDIA H100"}]
    meta = write_measured(path, again)
    got = {(e.device, e.shape): e.latency_us for e in meta.measured[len(had) :]}
    assert got == {
        ("NVIDIA H200", "rms_norm/36"): 4.5,
        ("NVIDIA H200", "rms_norm/48"): 12.0,
        ("NVIDIA H200", "rms_norm/7"): 3.0,
        ("NVIDIA H100", "rms_norm/48"): 12.0,
    }
    assert KernelMeta.model_validate(kernel_header(path.read_text(), source="x")[0]) == meta


def test_write_measured_refuses_an_invalid_entry_and_leaves_the_file(tmp_path: Path) -> None:
    path = tmp_path / KERNEL.name
    shutil.copy(KERNEL, path)
    before = path.read_text()
    bad = [{**measured_entries(_result(), "bf16")[0], "latency_us": -1.0}]
    with pytest.raises(SpecError, match="do not validate"):
        write_measured(path, bad)
    assert path.read_text() == before


def test_kernels_are_tried_on_problems_of_their_family_or_name() -> None:
    suite = load_suite("atrex30")
    problems = [suite.problem(o.name) for o in suite.operators]
    meta = KernelMeta.model_validate(kernel_header(KERNEL.read_text(), source="x")[0])
    names = {p.name for p in candidate_problems(meta, problems)}
    assert "rms_norm" in names and "fused_moe" not in names
    assert all(
        p.op_family is not None and p.op_family.value == "norm" for p in problems if p.name in names
    )
