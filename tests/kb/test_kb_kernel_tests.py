"""``benchmarks/kb_kernel_tests.py``: kernel tests attributed to the kernels they loaded."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

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


@dataclass(eq=False)
class _Item:
    """What shard_items reads of a pytest item."""

    nodeid: str
    gpu: bool = False

    def get_closest_marker(self, name: str) -> object | None:
        return object() if name == "gpu" and self.gpu else None


def test_a_test_belongs_to_the_kernel_its_parameters_name() -> None:
    key = _module().group_key
    assert key(_Item("t/a.py::f[sampling/argmax_cuda-0-torch.float32]")) == (
        "t/a.py::sampling/argmax_cuda"
    )
    assert key(_Item("t/a.py::f[bf16-rms_norm_rowwise-case0]")) == "t/a.py::rms_norm_rowwise"
    assert key(_Item("t/a.py::f[3-7]")) == "t/a.py"
    assert key(_Item("t/a.py::test_plain")) == "t/a.py"


def test_shards_run_every_test_once_and_keep_a_kernels_tests_together() -> None:
    module = _module()
    items = [_Item(f"t/c.py::f[cuda_k{i % 3}-{i}]", gpu=True) for i in range(9)]
    items += [_Item(f"t/t.py::f[kernel_{i % 7}-{i}]") for i in range(70)]
    shards = [module.shard_items(items, i, 4) for i in range(1, 5)]
    assert sorted(id(x) for s in shards for x in s) == sorted(id(x) for x in items)
    owner = {module.group_key(x): n for n, s in enumerate(shards) for x in s}
    assert all(owner[module.group_key(x)] == n for n, s in enumerate(shards) for x in s)
    # the three nvcc builds go to three different shards
    assert len({owner[f"t/c.py::cuda_k{i}"] for i in range(3)}) == 3


@pytest.mark.parametrize("bad", ["0/4", "5/4", "x/4", "4"])
def test_a_bad_shard_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="I/N"):
        _module().parse_shard(bad)


def _record(shard: str, tests: dict[str, str], calls: list[tuple[str, str]]) -> dict[str, Any]:
    return {
        "device": "NVIDIA H200",
        "device_kind": "cuda",
        "versions": {},
        "date": "2026-12-03T10:00:00+00:00",
        "shard": shard,
        "pytest_exit_code": 0,
        "wall_s": 1.0,
        "summary": {},
        "tests": {t: {"outcome": o, "seconds": 0.1, "message": None} for t, o in tests.items()},
        "calls": calls,
    }


def test_merged_shards_attribute_the_union_of_their_tests() -> None:
    module = _module()
    one = _record("1/2", {"a::1": "passed", "a::2": "failed"}, [("a::1", "k1"), ("a::2", "k2")])
    two = _record("2/2", {"b::1": "passed", "a::2": "passed"}, [("b::1", "k2"), ("b::1", "k3")])
    merged = module.merge([one, two], ["k1", "k2", "k3", "k4"])
    verdicts = {k: v["verdict"] for k, v in merged["kernels"].items()}
    # a test seen twice keeps its worse outcome; a kernel no shard loaded is untested
    assert verdicts == {"k1": "passed", "k2": "failed", "k3": "passed", "k4": "untested"}
    assert merged["summary"] == {"passed": 2, "failed": 1, "skipped": 0, "untested": 1}
    assert [s["shard"] for s in merged["shards"]] == ["1/2", "2/2"]
    with pytest.raises(ValueError, match="different devices"):
        module.merge([one, {**two, "device": "cpu (Triton interpreter)"}], ["k1"])


def test_sm90_mode_compiles_each_launch_for_hopper_on_the_cpu(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "kb_kernel_tests.py"), "--device", "sm90",
         "-k", "l2_norm_rowwise", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=600, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (path,) = tmp_path.glob("kb_kernel_tests_*_sm90.json")
    record = json.loads(path.read_text())
    assert record["device"].startswith("sm_90 compile only")
    assert record["kernels"]["triton/norm/l2_norm_rowwise.py"]["verdict"] == "passed"


_SM90_KERNELS = """
import triton
import triton.language as tl

SCALE = 2.0  # a plain global: the interpreter reads it, the compiler refuses it


@triton.jit
def reads_a_global(x_ptr, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    tl.store(x_ptr + i, tl.load(x_ptr + i) * SCALE)


@triton.jit
def too_much_shared(a_ptr, c_ptr, BLOCK: tl.constexpr, STAGES: tl.constexpr):
    i = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK, BLOCK), tl.float32)
    for k in tl.range(0, 4 * BLOCK, BLOCK, num_stages=STAGES):
        a = tl.load(a_ptr + i[:, None] * 4 * BLOCK + k + i[None, :])
        acc = tl.dot(a, a, acc)
    tl.store(c_ptr + i[:, None] * BLOCK + i[None, :], acc)
"""


def test_sm90_mode_fails_what_the_gpu_compiler_refuses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    import torch

    from tests.reference_kernels import conftest

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # real @jit functions, not interpreted
    (tmp_path / "sm90_kernels.py").write_text(_SM90_KERNELS)
    spec = importlib.util.spec_from_file_location("sm90_kernels", tmp_path / "sm90_kernels.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    conftest._compile_only(monkeypatch)

    with pytest.raises(conftest.KernelCompileFailed, match="SCALE"):
        mod.reads_a_global[(1,)](torch.zeros(16), BLOCK=16)
    a, c = torch.zeros(256, 1024, dtype=torch.bfloat16), torch.zeros(256, 256)
    mod.too_much_shared[(1,)](a, c, BLOCK=128, STAGES=2)  # 128 KiB: fits, nothing runs
    with pytest.raises(conftest.KernelCompileFailed, match="shared memory"):
        mod.too_much_shared[(1,)](a, c, BLOCK=256, STAGES=3)
