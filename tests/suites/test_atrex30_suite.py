"""The atrex30 suite's files: upstream data kept verbatim, derived files current, problems load."""

from __future__ import annotations

import importlib.util
import json
import math
import types
from pathlib import Path

import pytest
import yaml

from aka.spec import Split, load_problem

REPO = Path(__file__).resolve().parents[2]
SUITE = REPO / "configs" / "suites" / "atrex30"
UPSTREAM = SUITE / "upstream"
OPS = sorted(p.parent.name for p in SUITE.glob("*/reference.py"))


@pytest.fixture(scope="module")
def build() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(
        "build_atrex30", REPO / "scripts" / "build_atrex30.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_upstream_data_is_complete_and_licensed() -> None:
    importance = json.loads((UPSTREAM / "operator_importance.json").read_text())["operators"]
    assert len(importance) == 30
    shapes = sum(len(json.loads((UPSTREAM / op / "shapes.json").read_text())) for op in importance)
    assert shapes == 440
    assert "Apache License" in (UPSTREAM / "LICENSE").read_text()
    assert (UPSTREAM / "NOTICE").is_file()
    assert "eb8697d5cc66adf555a4599dd3ae53f916116cb0" in (UPSTREAM / "SOURCE.txt").read_text()


def test_derived_files_are_current(build: types.ModuleType) -> None:
    stale = build.stale()
    assert stale == [], f"{stale} are stale: run python scripts/build_atrex30.py"


def test_suite_weights_are_normalised() -> None:
    suite = yaml.safe_load((SUITE / "suite.yaml").read_text())
    assert [o["name"] for o in suite["operators"]] == OPS
    importance = json.loads((UPSTREAM / "operator_importance.json").read_text())["operators"]
    total = sum(v["importance_score"] for v in importance.values())
    for item in suite["operators"]:
        assert math.isclose(
            item["weight"], importance[item["name"]]["importance_score"] / total, abs_tol=1e-6
        )
    if len(OPS) == 30:
        assert math.isclose(sum(o["weight"] for o in suite["operators"]), 1.0, abs_tol=1e-4)


@pytest.mark.parametrize("op", OPS)
def test_problem_loads_with_upstream_tune_shapes_and_phases(op: str) -> None:
    problem = load_problem(SUITE / op / "op.yaml")
    upstream = json.loads((UPSTREAM / op / "shapes.json").read_text())
    tune = problem.shapes_in({Split.TUNE})
    assert [s.id for s in tune] == list(upstream)
    for shape in tune:
        raw = upstream[shape.id]
        assert shape.input_kwargs == (raw.get("input_kwargs") or {})
        assert shape.init_kwargs == (raw.get("init_kwargs") or {})
        assert shape.phase is not None and shape.phase.value in ("prefill", "decode")
    assert 1 <= len(problem.shapes_in({Split.SMOKE})) <= 3


def test_every_problem_runs_in_a_sandboxed_reference_worker(tmp_path: Path) -> None:
    """The scorer's own path: each op.yaml's reference runs in a worker on its first smoke shape."""
    from concurrent.futures import ThreadPoolExecutor

    from aka.bench import Scorer
    from aka.core import BenchConfig

    scorer = Scorer(BenchConfig(worker_timeout_s=120.0), tmp_path, device="cpu")

    def forward_names(op: str) -> list[str]:
        problem = load_problem(SUITE / op / "op.yaml")
        return [a.name for a in scorer.input_signature(problem).forward_args]

    with ThreadPoolExecutor(max_workers=2) as pool:
        names = dict(zip(OPS, pool.map(forward_names, OPS), strict=True))
    for op in OPS:
        meta = json.loads((UPSTREAM / op / "metadata.json").read_text())
        assert names[op] == list(meta["input_dtypes"]), op
