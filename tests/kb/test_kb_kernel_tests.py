"""``benchmarks/kb_kernel_tests.py``: kernel tests attributed to the kernels they loaded."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.scripts import load_script

REPO = Path(__file__).resolve().parents[2]


def _module() -> Any:
    return load_script("benchmarks/kb_kernel_tests.py")


def test_a_kernel_fails_if_any_test_that_loaded_it_failed() -> None:
    tests = {
        "t::a": {"outcome": "passed"},
        "t::b": {"outcome": "failed"},
        "t::c": {"outcome": "skipped"},
    }
    calls = [("t::a", "k1.py"), ("t::b", "k1.py"), ("t::a", "k2.py"), ("t::c", "k3.py")]
    out = _module().attribute(tests, calls, ["k1.py", "k2.py", "k3.py", "k4.py"])
    assert out["k1.py"]["verdict"] == "failed" and out["k1.py"]["failed"] == ["t::b"]
    assert out["k2.py"] == {"verdict": "passed", "tests": 1, "passed": 1, "failed": []}
    assert out["k3.py"]["verdict"] == "skipped"
    assert out["k4.py"]["verdict"] == "untested"


def test_a_real_run_in_the_interpreter_writes_each_kernels_verdict(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "kb_kernel_tests.py"), "--device", "cpu",
         "-k", "l2_norm_rowwise", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=600, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (path,) = tmp_path.glob("kb_kernel_tests_*_cpu.json")
    record = json.loads(path.read_text())
    kernel = record["kernels"]["triton/norm/l2_norm_rowwise.py"]
    assert kernel["verdict"] == "passed" and kernel["tests"] == kernel["passed"] >= 2
    assert record["summary"]["failed"] == 0 and record["device"].startswith("cpu")
    assert all(t["outcome"] == "passed" for t in record["tests"].values())
