"""docs/op-yaml.md stays true: its complete example loads and every model field is documented."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import BaseModel

from aka.spec import (
    CodeRef,
    DtypePolicySpec,
    OpYamlSpec,
    Phase,
    RooflineOverrideSpec,
    ShapeCase,
    ShapesRef,
    Split,
    ToleranceSpec,
    load_problem,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
DOC = REPO_ROOT / "docs" / "op-yaml.md"
FENCE = re.compile(r"```(?:yaml|python)\n# file: (?P<name>[\w.]+)\n(?P<body>.*?)```", re.DOTALL)


@pytest.fixture(scope="module")
def doc_text() -> str:
    return DOC.read_text(encoding="utf-8")


def test_doc_complete_example_loads(doc_text: str, tmp_path: Path) -> None:
    example = doc_text[doc_text.index("## 7. A complete annotated example") :]
    files = {m["name"]: m["body"] for m in FENCE.finditer(example)}
    assert set(files) == {"op.yaml", "reference.py"}
    for name, body in files.items():
        (tmp_path / name).write_text(body, encoding="utf-8")

    problem = load_problem(tmp_path / "op.yaml")

    assert problem.name == "fused_add_rms_norm_inplace"
    assert problem.forward_params == ["x", "residual", "weight"]
    assert problem.in_place == ["residual"]
    assert problem.inputs_take_device
    assert {s.split for s in problem.shapes} == {Split.TUNE, Split.HOLDOUT, Split.SMOKE}
    assert problem.shapes[0].phase is Phase.DECODE and problem.shapes[1].weight == 2.0
    assert problem.tolerance is not None and problem.tolerance.reason


@pytest.mark.parametrize(
    "model",
    [
        OpYamlSpec,
        CodeRef,
        ShapesRef,
        ShapeCase,
        ToleranceSpec,
        DtypePolicySpec,
        RooflineOverrideSpec,
    ],
)
def test_doc_names_every_field(doc_text: str, model: type[BaseModel]) -> None:
    missing = [name for name in model.model_fields if f"`{name}`" not in doc_text]

    assert missing == [], f"docs/op-yaml.md does not document {model.__name__} fields {missing}"
