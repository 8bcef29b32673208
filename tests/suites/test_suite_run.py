"""``aka bench run`` and ``aka bench roofline`` over atrex30, on the CPU (real workers)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from aka.bench import Scorer
from aka.bench.suite_run import SuiteOptions, find_candidate, run_suite, select_suite_shapes
from aka.cli.main import main
from aka.core import SpecError
from aka.core.config import BenchConfig
from aka.hardware import datasheet_ceilings
from aka.spec import Split, load_suite

SUITE = Path(__file__).resolve().parents[2] / "configs" / "suites" / "atrex30"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "suite_candidates"


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(list(args))
    out, _ = capsys.readouterr()
    return code, out


def _results(out: Path) -> dict[str, dict[str, dict]]:
    data = json.loads((out / "results.json").read_text())
    table: dict[str, dict[str, dict]] = {}
    for r in data["results"]:
        table.setdefault(r["entrant"], {})[r["op"]] = r
    return table


@pytest.mark.slow
def test_every_operator_runs_on_the_cpu_and_a_second_run_resumes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    code, text = _run(
        capsys, "bench", "run", "--suite", "atrex30", "--device", "cpu", "--out", str(out)
    )
    assert code == 0, text
    table = _results(out)
    assert set(table) == {"eager", "torch_compile", "library"}
    assert len(table["eager"]) == 30
    assert all(r["status"] == "ok" and r["shapes"] for r in table["eager"].values())
    with_library = {p.parent.name for p in SUITE.glob("*/library.py")}
    assert len(with_library) >= 10
    for op, r in table["library"].items():
        if op in with_library:
            assert r["status"] == "ok", (op, r["message"])
            assert all(s["correct"] is True and s["split"] == "smoke" for s in r["shapes"])
        else:
            assert r["verdict"] == "no_library"
    assert all(r["status"] == "not_run" for r in table["torch_compile"].values())
    report = (out / "report.md").read_text()
    assert "nothing was timed" in report and "attention_forward" in report
    assert "<script" not in (out / "report.html").read_text()
    # Resume: every measured (entrant, operator) comes back from the cache.
    code, _ = _run(
        capsys, "bench", "run", "--suite", "atrex30", "--device", "cpu", "--out", str(out)
    )
    assert code == 0
    again = _results(out)
    assert all(r["cached"] for r in again["eager"].values())
    assert all(r["cached"] for op, r in again["library"].items() if op in with_library)


def test_candidates_are_scored_and_a_wrong_or_missing_one_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good, bad = tmp_path / "good", tmp_path / "bad"
    args = ("bench", "run", "--suite", "atrex30", "--device", "cpu", "--ops", "rms_norm")
    code, text = _run(capsys, *args, "--candidates", str(FIXTURES / "good"), "--out", str(good))
    assert code == 0, text
    result = _results(good)["candidate"]["rms_norm"]
    assert result["status"] == "ok" and result["source_hash"]
    assert {s["shape_id"] for s in result["shapes"]} == {"smoke_7x300", "smoke_1x64"}
    assert all(s["correct"] for s in result["shapes"])
    code, _ = _run(capsys, *args, "--candidates", str(FIXTURES / "bad"), "--out", str(bad))
    assert code == 1
    result = _results(bad)["candidate"]["rms_norm"]
    assert result["status"] == "failed" and result["verdict"] == "wrong_output"
    code, _ = _run(
        capsys, *args[:-1], "silu_and_mul", "--candidates", str(FIXTURES / "good"),
        "--out", str(tmp_path / "missing"),
    )  # fmt: skip
    assert code == 1
    assert _results(tmp_path / "missing")["candidate"]["silu_and_mul"]["status"] == "missing"


def test_a_wrong_library_baseline_is_caught(tmp_path: Path) -> None:
    suite_dir = tmp_path / "suite"
    shutil.copytree(SUITE / "rms_norm", suite_dir / "rms_norm")
    library = suite_dir / "rms_norm" / "library.py"
    text = library.read_text()
    assert "def forward" in text
    # Same signature, output doubled: the check against the reference must reject it.
    library.write_text(
        text + "\n\n_forward = Model.forward\nModel.forward = "
        "lambda self, x, weight: _forward(self, x, weight) * 2\n"
    )
    op = next(o for o in yaml.safe_load((SUITE / "suite.yaml").read_text())["operators"]
              if o["name"] == "rms_norm")  # fmt: skip
    (suite_dir / "suite.yaml").write_text(
        yaml.safe_dump({"name": "tiny", "operators": [op | {"weight": 1.0}]})
    )
    scorer = Scorer(BenchConfig(), tmp_path / "cache", device="cpu")
    run = run_suite(
        scorer,
        load_suite(suite_dir),
        SuiteOptions(out_dir=tmp_path / "out", baselines=["eager", "library"]),
    )
    lib = run.result("library", "rms_norm")
    assert lib is not None and lib.status == "failed" and lib.verdict == "wrong_output"
    eager = run.result("eager", "rms_norm")
    assert eager is not None and eager.status == "ok"


def test_shape_selection_caps_each_split_evenly() -> None:
    problem = load_suite("atrex30").problem("fused_moe")
    tune = problem.shapes_in({Split.TUNE})
    picked = select_suite_shapes(problem, cpu=False, max_shapes=3)
    assert [s.id for s in picked] == [tune[0].id, tune[len(tune) // 2].id, tune[-1].id] or (
        len(picked) == 3 and picked[0].id == tune[0].id and picked[-1].id == tune[-1].id
    )
    assert all(
        s.split is Split.SMOKE for s in select_suite_shapes(problem, cpu=True, max_shapes=None)
    )


def test_find_candidate_layouts(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "candidate.py").write_text("")
    assert find_candidate(tmp_path, "a") == tmp_path / "a.py"
    assert find_candidate(tmp_path, "b") == tmp_path / "b" / "candidate.py"
    assert find_candidate(tmp_path, "c") is None


def test_bad_usage_is_a_clear_error(tmp_path: Path) -> None:
    scorer = Scorer(BenchConfig(), tmp_path / "cache", device="cpu")
    suite = load_suite("atrex30")
    with pytest.raises(SpecError, match="unknown baselines"):
        run_suite(scorer, suite, SuiteOptions(out_dir=tmp_path, baselines=["cublas"]))
    with pytest.raises(SpecError, match="no operator"):
        run_suite(scorer, suite, SuiteOptions(out_dir=tmp_path, baselines=["eager"], ops=["x"]))
    with pytest.raises(SpecError, match="does not exist"):
        run_suite(scorer, suite, SuiteOptions(out_dir=tmp_path, candidates=tmp_path / "nope"))


def test_roofline_json_from_overrides_matches_the_datasheet(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out = _run(
        capsys, "bench", "roofline", "--suite", "atrex30", "--op", "block_scaled_mm",
        "--device-name", "H200", "--json",
    )  # fmt: skip
    assert code == 0, out
    data = json.loads(out)
    problem = load_suite("atrex30").problem("block_scaled_mm")
    tune = problem.shapes_in({Split.TUNE})
    assert [r["shape_id"] for r in data["shapes"]] == [s.id for s in tune]
    sheet = datasheet_ceilings("H200")
    assert sheet is not None
    for row, shape in zip(data["shapes"], tune, strict=True):
        kw = shape.input_kwargs
        assert not row["counted"]  # every field is overridden: no reference ran
        assert row["flops_by_unit"] == {"tc_fp8": pytest.approx(2 * kw["m"] * kw["n"] * kw["k"])}
        t_fp8 = (
            row["flops"] / {str(k.value): v for k, v in sheet.rates_flops_per_s.items()}["tc_fp8"]
        )
        t_mem = (row["bytes_read"] + row["bytes_written"]) / sheet.bandwidth_bytes_per_s
        assert row["t_sol_s"] == pytest.approx(max(t_fp8, t_mem))
        assert row["bound"] == ("compute" if t_fp8 > t_mem else "memory")


def test_roofline_counts_the_reference_in_a_worker(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out = _run(
        capsys, "bench", "roofline", "--suite", "atrex30", "--op", "rms_norm", "--split", "smoke",
        "--device-name", "H200", "--device", "cpu", "--json",
    )  # fmt: skip
    assert code == 0, out
    rows = {r["shape_id"]: r for r in json.loads(out)["shapes"]}
    row = rows["smoke_7x300"]
    assert row["counted"]
    assert row["bytes_read"] == 2 * (7 * 300 + 300)  # x and weight, bf16, each byte once
    assert row["bytes_written"] == 2 * 7 * 300
    assert row["t_sol_s"] > 0


def test_roofline_errors_name_the_fix(capsys: pytest.CaptureFixture[str]) -> None:
    code, _ = _run(
        capsys, "bench", "roofline", "--suite", "atrex30", "--op", "rms_norm",
        "--device-name", "NoSuchGPU", "--json",
    )  # fmt: skip
    assert code == 2
    code, _ = _run(capsys, "bench", "roofline", "--suite", "atrex30", "--op", "nope", "--json")
    assert code == 2


def test_progress_counts_operators_and_names_the_stage() -> None:
    from aka.cli.bench_suite import _per_operator
    from aka.core import ProgressEvent

    seen: list[ProgressEvent] = []
    relay = _per_operator(seen.append)
    relay(ProgressEvent("suite", "operator", "rms_norm", 3, 30))
    relay(ProgressEvent("bench", "reference", "smoke_7x300", 0, 2))
    assert (seen[-1].done, seen[-1].total) == (3, 30)
    assert seen[-1].message == "rms_norm: reference smoke_7x300"


def test_gpu_pricing_path_on_recorded_samples(tmp_path: Path) -> None:
    """The GPU half of the baselines' judgement, fed a recorded timing payload on the CPU."""
    import torch

    from aka.bench.problem_runtime import load_module
    from aka.bench.run_state import _Reference
    from aka.bench.suite_baselines import _baseline_row, _price
    from aka.bench.suite_result import SuiteRun
    from aka.hardware import count_costs

    problem = load_suite("atrex30").problem("rms_norm")
    shapes = problem.shapes_in({Split.SMOKE})
    module = load_module("_price_rms", SUITE / "rms_norm" / "reference.py")
    rows = {}
    for s in shapes:
        inputs = module._make_inputs(**s.input_kwargs, device="cpu")
        counts = count_costs(module.Model(**s.init_kwargs), inputs)
        rows[s.id] = {"costs": counts.model_dump(mode="json")}
    device = {
        "name": "NVIDIA H200", "vendor": "nvidia", "arch": "sm_90", "compute_capability": "9.0",
        "sm_count": 132, "memory_bytes": 150 * 2**30, "torch_version": torch.__version__,
    }  # fmt: skip
    ref = _Reference(outputs={}, rows=rows, versions={"torch": "x"}, device=device)
    floor = [4.0, 4.2, 4.1, 4.3]
    timing = {
        "launch_floor": {"stream_us": floor},
        "shapes": [
            {"shape_id": s.id, "baselines": {"eager": {"stream_us": [20.0, 22.0, 21.0]}}}
            for s in shapes
        ],
        "baseline_errors": {f"{shapes[0].id}/library": "RuntimeError: no kernel"},
    }
    run = SuiteRun(suite="atrex30", date="d", performance_measured=True, operators=[], entrants=[])
    scorer = Scorer(BenchConfig(ceilings="datasheet"), tmp_path, device="cpu")
    priced = _price(scorer, problem, shapes, ref, timing, run)
    assert run.ceilings is not None and run.ceilings["launch_floor_us"] == pytest.approx(4.15)
    eager = _baseline_row("eager", shapes[0], {}, priced, cpu=False)
    # Tiny smoke shapes are launch-bound: T_sol is the measured floor, S = floor / median.
    assert eager.bound == "latency" and eager.t_sol_us == pytest.approx(4.15)
    assert eager.s == pytest.approx(4.15 / 21.0) and eager.correct
    library = _baseline_row("library", shapes[0], {}, priced, cpu=False)
    assert library.s is None and "no kernel" in (library.message or "")
    wrong = _baseline_row(
        "library", shapes[1], {("library", shapes[1].id): ("wrong_output", "seed 0: off")},
        priced, cpu=False,
    )  # fmt: skip
    assert wrong.correct is False and wrong.s is None and wrong.verdict == "wrong_output"


def test_a_bad_device_is_refused_by_run_and_roofline(capsys: pytest.CaptureFixture[str]) -> None:
    for args in (
        ("bench", "run", "--suite", "atrex30", "--device", "gpu0"),
        ("bench", "roofline", "--suite", "atrex30", "--op", "rms_norm", "--device", "gpu0"),
    ):
        code, _ = _run(capsys, *args)
        assert code == 2
