"""``aka.kb.kernel_problem``: a reference kernel scored on the problem its own reference() states.

The generated problem is a real op.yaml problem: it loads with the op.yaml loader, its reference
runs in the scorer's reference worker, and the kernel (adapted by the agent's adapter, as for any
problem) is accepted or rejected by a real CPU scorer under the same screen and correctness checks;
a kernel made to write zeros, or to compute with PyTorch, is rejected on its own problem.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from aka.agent.adapt import adapt_kernel
from aka.bench import InputSignature, Scorer
from aka.core import BenchConfig, SpecError
from aka.kb import LoadedKernel, kernel_problem, kernel_problem_yaml, lint_problems
from aka.spec import KernelMeta, kernel_header

REPO = Path(__file__).resolve().parents[2]
KERNELS = REPO / "reference_kernels"


@pytest.fixture(scope="module")
def scorer(tmp_path_factory: pytest.TempPathFactory) -> Scorer:
    config = BenchConfig(
        min_samples=10, max_samples=50, cold_recheck="never", torch_compile_baseline=False,
        worker_timeout_s=120.0,
    )  # fmt: skip
    return Scorer(config, tmp_path_factory.mktemp("cache"), device="cpu")


def _kernel(relpath: str, root: Path = KERNELS) -> LoadedKernel:
    path = root / relpath
    text = path.read_text(encoding="utf-8")
    raw, paragraph = kernel_header(text, source=str(path))
    return LoadedKernel(KernelMeta.model_validate(raw), paragraph, path, text)


def _one_case(kernel: LoadedKernel) -> LoadedKernel:
    """The kernel with its problem cut to its first shape and dtype (a fast test)."""
    assert kernel.meta.problem is not None
    problem = kernel.meta.problem.model_copy(
        update={
            "shapes": kernel.meta.problem.shapes[:1],
            "dtypes": kernel.meta.problem.dtypes[:1],
        }
    )
    meta = kernel.meta.model_copy(update={"problem": problem})
    return LoadedKernel(meta=meta, paragraph=kernel.paragraph, path=kernel.path, text=kernel.text)


_SIGNATURES: dict[str, InputSignature] = {}  # by problem hash: a broken copy has the same problem


def _score(scorer: Scorer, kernel: LoadedKernel) -> tuple[str, str]:
    problem = kernel_problem(kernel.path, kernel.meta, kernel.text)
    key = problem.problem_hash()
    if key not in _SIGNATURES:  # the reference runs in the scorer's reference worker
        _SIGNATURES[key] = scorer.input_signature(problem)
    signature = _SIGNATURES[key]
    source = adapt_kernel(kernel.path, kernel.meta, signature, params={})
    result = scorer.evaluate(problem, source)
    return result.verdict.value, result.failure.message if result.failure else ""


@pytest.mark.integration
@pytest.mark.parametrize(
    "relpath",
    [
        "triton/reduction/logsumexp_rowwise_online.py",  # a reduction
        "triton/sort/argsort_stable_rank_count.py",  # a sort (int64 indices, compared exactly)
        "triton/activation/gelu_and_mul_tanh.py",  # an activation no atrex30 problem computes
    ],
)
def test_a_kernel_is_accepted_on_its_own_problem(scorer: Scorer, relpath: str) -> None:
    kernel = _one_case(_kernel(relpath))
    problem = kernel_problem(kernel.path, kernel.meta, kernel.text)
    assert problem.name == f"kernel.{kernel.meta.id}"
    assert [s.split.value for s in problem.shapes] == ["smoke"]
    assert _score(scorer, kernel) == ("accepted", "")


def _broken_copy(tmp_path: Path, old: str, new: str) -> LoadedKernel:
    relpath = "triton/activation/gelu_and_mul_tanh.py"
    copy = tmp_path / relpath
    copy.parent.mkdir(parents=True)
    shutil.copy(KERNELS / relpath, copy)
    text = copy.read_text(encoding="utf-8")
    assert old in text
    copy.write_text(text.replace(old, new), encoding="utf-8")
    return _one_case(_kernel(relpath, tmp_path))


@pytest.mark.integration
def test_a_kernel_that_writes_zeros_is_rejected_on_its_own_problem(
    scorer: Scorer, tmp_path: Path
) -> None:
    kernel = _broken_copy(tmp_path, "(act * up).to(", "(act * up * 0.0).to(")
    verdict, message = _score(scorer, kernel)
    assert verdict == "wrong_output", message


@pytest.mark.integration
def test_a_launcher_that_falls_back_to_torch_is_rejected_on_its_own_problem(
    scorer: Scorer, tmp_path: Path
) -> None:
    fallback = (
        "    gate, up = x.float().chunk(2, dim=-1)\n"
        "    return (torch.nn.functional.gelu(gate, approximate='tanh') * up).to(x.dtype)\n"
    )
    kernel = _broken_copy(tmp_path, "    return out.reshape(*x.shape[:-1], d)\n", fallback)
    verdict, message = _score(scorer, kernel)
    assert verdict == "screen_rejected", message
    assert "torch" in message


def test_a_kernel_whose_fp32_path_runs_on_tf32_gets_a_problem_that_allows_it() -> None:
    # gemm_tiled's fp32 tl.dot takes TF32 on the GPU: its own problem says so, so the scorer
    # judges fp32 outputs with tf32's tolerance (the exact-fp32 one failed such kernels there)
    tf32 = _kernel("triton/gemm/gemm_tiled.py")
    assert tf32.meta.problem is not None and tf32.meta.problem.allow_tf32
    assert "allow_tf32: true" in kernel_problem_yaml(tf32.path, tf32.meta, tf32.text)
    assert kernel_problem(tf32.path, tf32.meta, tf32.text).dtype_policy.allow_tf32
    # a kernel without the field keeps fp32's own tolerance
    exact = _kernel("triton/gemm/gemm_fp32_tf32_precision_switch.py")
    assert "dtype_policy" not in kernel_problem_yaml(exact.path, exact.meta, exact.text)
    assert not kernel_problem(exact.path, exact.meta, exact.text).dtype_policy.allow_tf32


def test_the_generated_reference_is_the_files_reference_without_the_kernel() -> None:
    kernel = _kernel("triton/activation/gelu_and_mul_tanh.py")
    text = kernel_problem_yaml(kernel.path, kernel.meta, kernel.text)
    problem = kernel_problem(kernel.path, kernel.meta, kernel.text)
    code = problem.reference_code
    assert "def reference(" in code and "def make_inputs(" in code
    assert "@triton.jit" not in code and "def gelu_and_mul_tanh(" not in code
    assert "class Model(torch.nn.Module)" in code and "return reference(x)" in code
    assert problem.forward_params == ["x"] and problem.dsl[0].value == "triton"
    assert [s.id for s in problem.shapes] == [
        "smoke0_rows3_d1000_fp32",
        "smoke0_rows3_d1000_bf16",
        "smoke1_rows5_d64_fp32",
        "smoke1_rows5_d64_bf16",
    ]
    assert "tolerance" not in text  # its tests use the scorer's table


def test_a_reference_that_calls_the_launcher_is_refused(tmp_path: Path) -> None:
    relpath = "triton/activation/gelu_and_mul_tanh.py"
    copy = tmp_path / relpath
    copy.parent.mkdir(parents=True)
    text = (KERNELS / relpath).read_text(encoding="utf-8")
    body = (
        '    """Return gelu(gate, approximate="tanh") * up in fp32, cast once to x\'s dtype."""\n'
    )
    copy.write_text(text.replace(body, body + "    return gelu_and_mul_tanh(x)\n"))
    kernel = _kernel(relpath, tmp_path)
    with pytest.raises(SpecError, match="reaches the kernel code"):
        kernel_problem(kernel.path, kernel.meta, kernel.text)
    problems = lint_problems(tmp_path / "no-docs", tmp_path)
    assert any(str(copy) in p and "field 'problem'" in p for p in problems), problems


@pytest.mark.parametrize(
    ("field", "wanted"),
    [
        ("problem:\n  shapes: []\n", "problem.shapes"),
        ("problem:\n  shapes: [{rows: 3, dtype: 4}]\n", "problem.shapes"),
        ("problem:\n  shapes: [{rows: 3}]\n  dtypes: [fp33]\n", "problem.dtypes"),
        ("problem:\n  shapes: [{rows: 3}]\n  atol: -1\n", "problem.atol"),
        ("problem:\n  shape: [{rows: 3}]\n", "problem.shape"),
        ("problem:\n  shapes: [{rows: 3, d: 8}]\n  in_place: [y]\n", "problem.in_place"),
    ],
)
def test_lint_names_the_file_and_field_of_a_malformed_problem(
    tmp_path: Path, field: str, wanted: str
) -> None:
    relpath = "triton/activation/gelu_and_mul_tanh.py"
    copy = tmp_path / relpath
    copy.parent.mkdir(parents=True)
    text = (KERNELS / relpath).read_text(encoding="utf-8")
    text = re.sub(r"problem:\n(  .*\n)+", field, text, count=1)
    copy.write_text(text, encoding="utf-8")
    problems = lint_problems(tmp_path / "no-docs", tmp_path)
    assert any(str(copy) in p and f"field '{wanted}" in p for p in problems), problems


def test_lint_refuses_a_launcher_that_returns_a_dict(tmp_path: Path) -> None:
    # the adapter takes a launcher's outputs by position: a dict gave KeyError: 0 at run time
    relpath = "triton/activation/gelu_and_mul_tanh.py"
    copy = tmp_path / relpath
    copy.parent.mkdir(parents=True)
    text = (KERNELS / relpath).read_text(encoding="utf-8")
    copy.write_text(text, encoding="utf-8")
    assert lint_problems(tmp_path / "no-docs", tmp_path) == []  # a helper's dict is not flagged
    ret = "    return out.reshape(*x.shape[:-1], d)\n"
    assert ret in text
    copy.write_text(text.replace(ret, '    return {"out": out.reshape(*x.shape[:-1], d)}\n'))
    problems = lint_problems(tmp_path / "no-docs", tmp_path)
    assert len(problems) == 1 and "gelu_and_mul_tanh() returns a dict" in problems[0], problems
