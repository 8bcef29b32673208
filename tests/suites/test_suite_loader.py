"""Loading suites (aka.spec.load_suite) and ``aka bench suite show``."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from aka.cli.main import main
from aka.core import SpecError
from aka.spec import builtin_suites, load_suite

SUITE = Path(__file__).resolve().parents[2] / "configs" / "suites" / "atrex30"


def test_builtin_suite_by_name_dir_or_file() -> None:
    assert "atrex30" in builtin_suites()
    for ref in ("atrex30", SUITE, SUITE / "suite.yaml"):
        suite = load_suite(ref)
        assert suite.name == "atrex30" and len(suite.operators) == 30
    suite = load_suite("atrex30")
    assert math.isclose(sum(o.weight for o in suite.operators), 1.0, abs_tol=1e-4)
    assert suite.source["commit"].startswith("eb8697d")
    assert suite.problem("rms_norm").name == "rms_norm"


def test_unknown_suite_and_operator_say_what_exists(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="atrex30"):
        load_suite("no_such_suite")
    with pytest.raises(SpecError, match="unified_attention"):
        load_suite("atrex30").operator("nope")
    bad = tmp_path / "suite.yaml"
    bad.write_text("name: x\noperators:\n  - {name: a, problem: a/op.yaml}\n")
    with pytest.raises(SpecError) as err:
        load_suite(bad)
    assert err.value.file == str(bad) and "operators" in (err.value.field or "")


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_suite_show_json_lists_operators_weights_phases_and_shapes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = _run(capsys, "bench", "suite", "show", "atrex30", "--json")
    assert code == 0, out
    data = json.loads(out)
    ops = {o["name"]: o for o in data["operators"]}
    assert len(ops) == 30
    assert sum(1 for o in ops.values() for s in o["shapes"] if s["split"] == "tune") == 440
    assert all(any(s["split"] == "smoke" for s in o["shapes"]) for o in ops.values())
    assert {"name", "weight", "phase", "shapes"} <= set(ops["rms_norm"])
    assert {"id", "split"} <= set(ops["rms_norm"]["shapes"][0])


def test_suite_show_table_and_a_missing_suite(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "bench", "suite", "show", "atrex30")
    assert code == 0 and "unified_attention" in out
    code, _, err = _run(capsys, "bench", "suite", "show", "nope")
    assert code == 2 and "no suite 'nope'" in err
