"""ProblemSpec: hashing, shape selection, worker JSON, and never running problem code."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from aka.spec import (
    DtypePolicySpec,
    OpYamlSpec,
    ProblemSpec,
    Split,
    load_problem,
    parse_op_yaml_text,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
RMS_NORM = REPO_ROOT / "configs" / "examples" / "rms_norm"


@pytest.fixture
def rms_copy(tmp_path: Path) -> Path:
    """A private copy of the rms_norm example (op.yaml + reference.py) to edit."""
    directory = tmp_path / "rms_norm"
    directory.mkdir()
    for name in ("op.yaml", "reference.py"):
        shutil.copy(RMS_NORM / name, directory / name)
    return directory


# ------------------------------------------------------------------------------------- hashing


def test_problem_hash_stable_across_loads() -> None:
    first = load_problem(RMS_NORM / "op.yaml").problem_hash()
    second = load_problem(RMS_NORM / "op.yaml").problem_hash()

    assert first == second
    assert len(first) == 64 and int(first, 16) >= 0


def test_problem_hash_ignores_source_path(rms_copy: Path) -> None:
    original = load_problem(RMS_NORM / "op.yaml")
    copy = load_problem(rms_copy / "op.yaml")

    assert original.source_path != copy.source_path
    assert original.problem_hash() == copy.problem_hash()


def test_problem_hash_same_for_inline_code(rms_copy: Path) -> None:
    by_path = load_problem(rms_copy / "op.yaml")
    body = yaml.safe_load((rms_copy / "op.yaml").read_text())
    body["reference"] = {"code": (rms_copy / "reference.py").read_text()}

    by_code = parse_op_yaml_text(yaml.safe_dump(body), base_dir=None, source="<api>")

    assert by_code.reference_code == by_path.reference_code
    assert by_code.problem_hash() == by_path.problem_hash()


def test_problem_hash_changes_with_code(rms_copy: Path) -> None:
    before = load_problem(rms_copy / "op.yaml").problem_hash()
    reference = rms_copy / "reference.py"
    reference.write_text(reference.read_text().replace("1e-6", "1e-5"))

    assert load_problem(rms_copy / "op.yaml").problem_hash() != before


def test_problem_hash_changes_with_shapes(rms_copy: Path) -> None:
    before = load_problem(rms_copy / "op.yaml").problem_hash()
    spec = rms_copy / "op.yaml"
    spec.write_text(spec.read_text().replace("tokens: 64,", "tokens: 65,"))

    assert load_problem(spec).problem_hash() != before


def test_problem_hash_changes_with_guard_fields(rms_copy: Path) -> None:
    before = load_problem(rms_copy / "op.yaml").problem_hash()
    spec = rms_copy / "op.yaml"
    spec.write_text(spec.read_text() + "engagement_min: 0.8\n")

    assert load_problem(spec).problem_hash() != before


# ------------------------------------------------------------------------------------ selection


def test_shapes_in_by_split() -> None:
    problem = load_problem(RMS_NORM / "op.yaml")

    smoke = problem.shapes_in({Split.SMOKE})
    tune = problem.shapes_in({Split.TUNE})

    assert [s.id for s in smoke] == ["smoke_t8_h1000", "smoke_t33_h256"]
    assert all(s.split is Split.TUNE for s in tune) and len(tune) == 4
    holdout = problem.shapes_in({Split.HOLDOUT})
    assert [s.id for s in holdout] == ["holdout_b128_h5120", "holdout_t2048_h6144"]
    assert problem.shapes_in() == problem.shapes
    assert len(problem.shapes_in({Split.TUNE, Split.SMOKE})) == 6


def test_shapes_in_by_ids_keeps_the_given_order() -> None:
    problem = load_problem(RMS_NORM / "op.yaml")

    chosen = problem.shapes_in(ids=["smoke_t33_h256", "decode_b64_h4096"])

    assert [s.id for s in chosen] == ["smoke_t33_h256", "decode_b64_h4096"]


def test_shapes_in_ids_win_over_splits() -> None:
    problem = load_problem(RMS_NORM / "op.yaml")

    chosen = problem.shapes_in({Split.SMOKE}, ids=["decode_b64_h4096"])

    assert [s.id for s in chosen] == ["decode_b64_h4096"]


# ---------------------------------------------------------------------------------- round trips


def test_to_worker_json_round_trips() -> None:
    problem = load_problem(REPO_ROOT / "configs" / "examples" / "rotary_embedding" / "op.yaml")

    again = ProblemSpec.model_validate(problem.to_worker_json())

    assert again == problem
    assert again.problem_hash() == problem.problem_hash()


def test_op_yaml_defaults() -> None:
    spec = OpYamlSpec.model_validate(
        {"name": "x", "reference": {"code": "pass"}, "shapes": {"cases": [{"id": "a"}]}}
    )

    assert spec.version == 1
    assert [d.value for d in spec.dsl] == ["triton", "cuda"]
    assert spec.baselines == ["eager", "torch_compile"]
    assert spec.dtype_policy == DtypePolicySpec(match_output_dtype=True, allow_tf32=False)
    assert spec.engagement_min == 0.9
    assert spec.tolerance is None and spec.roofline == [] and spec.inputs is None
    assert spec.screen_allow == [] and spec.in_place == [] and spec.fp8_scales == {}
    case = spec.shapes.cases[0]  # type: ignore[index]
    assert (case.weight, case.phase, case.split) == (1.0, None, Split.TUNE)


def test_op_yaml_defaults_are_not_shared() -> None:
    body = {"name": "x", "reference": {"code": "pass"}, "shapes": {"cases": [{"id": "a"}]}}
    first, second = OpYamlSpec.model_validate(body), OpYamlSpec.model_validate(body)

    first.baselines.append("eager")

    assert second.baselines == ["eager", "torch_compile"]


# ------------------------------------------------------------------------------- never run code


HOSTILE_MODULE_BODY = """\
import sys
import definitely_not_an_installed_module_4711
open({marker!r}, "w").write("ran")
raise SystemExit("imported!")
sys.exit(3)
"""


def test_load_never_imports_problem_code(tmp_path: Path, write_spec, reference_text: str) -> None:
    marker = tmp_path / "module_body_ran"
    reference = HOSTILE_MODULE_BODY.format(marker=str(marker)) + reference_text

    problem = load_problem(write_spec(reference=reference))

    assert problem.forward_params == ["x", "weight"]
    assert not marker.exists()


def test_load_never_imports_kernelbench_code(tmp_path: Path) -> None:
    marker = tmp_path / "kb_module_body_ran"
    fixture = REPO_ROOT / "tests" / "fixtures" / "problems" / "kernelbench_softmax.py"
    path = tmp_path / "hostile_kb.py"
    path.write_text(HOSTILE_MODULE_BODY.format(marker=str(marker)) + fixture.read_text())

    problem = load_problem(path)

    assert problem.shapes[0].id == "default"
    assert not marker.exists()
