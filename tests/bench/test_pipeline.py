"""The scorer end to end on the CPU: real worker processes under the Triton interpreter."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from aka.bench import Scorer, Verdict
from aka.core import BaselineError, BenchConfig, ProgressEvent, SpecError
from aka.spec import Dsl, ProblemSpec, load_problem, parse_op_yaml_text
from tests.bench.conftest import EXAMPLES, fixture_candidate

pytestmark = pytest.mark.integration


def test_correct_candidate_is_accepted_without_timing(
    cpu_scorer: Scorer, rms_norm: ProblemSpec, rms_norm_candidate: str
) -> None:
    events: list[ProgressEvent] = []
    result = cpu_scorer.evaluate(rms_norm, rms_norm_candidate, progress=events.append)
    assert result.verdict is Verdict.ACCEPTED, result.failure
    assert result.performance_measured is False
    assert any("performance was not measured" in n for n in result.notes)
    assert [r.shape_id for r in result.shapes] == ["smoke_t8_h1000", "smoke_t33_h256"]
    assert all(r.latency_us is None and r.rel_l2_err is not None for r in result.shapes)
    assert set(result.skipped_shapes) == {
        "decode_b64_h4096",
        "decode_b256_h8192",
        "prefill_t4096_h4096",
        "prefill_t16384_h8192",
        "holdout_b128_h5120",
        "holdout_t2048_h6144",
    }
    assert result.manifest.mode == "cpu_interpreter"
    assert result.manifest.seeds == [0, 1, 2]
    assert result.manifest.weights_mode == "none"
    assert {e.stage for e in events} >= {"screen", "reference", "correctness"}


@pytest.mark.parametrize(
    ("fixture", "verdict", "message"),
    [
        ("rms_norm_no_tail_mask.py", {Verdict.WRONG_OUTPUT, Verdict.NON_FINITE}, "smoke_t8_h1000"),
        ("rms_norm_drop_last_row.py", {Verdict.WRONG_OUTPUT, Verdict.NON_FINITE}, "smoke_t8_h1000"),
        ("rms_norm_wrong_dtype.py", {Verdict.BAD_STRUCTURE}, "torch.float32"),
        ("rms_norm_nan.py", {Verdict.NON_FINITE}, "NaN"),
        ("rms_norm_zeros.py", {Verdict.WRONG_OUTPUT}, "outside"),
        ("rms_norm_raise.py", {Verdict.COMPILE_ERROR, Verdict.RUNTIME_ERROR}, "RuntimeError"),
        ("rms_norm_syntax.py", {Verdict.COMPILE_ERROR}, "syntax error"),
        ("rms_norm_torch_fallback.py", {Verdict.SCREEN_REJECTED}, "torch-compute-in-forward"),
        ("rms_norm_no_kernel.py", {Verdict.SCREEN_REJECTED}, "no-kernel"),
    ],
)
def test_wrong_candidates_are_rejected(
    cpu_scorer: Scorer, rms_norm: ProblemSpec, fixture: str, verdict: set[Verdict], message: str
) -> None:
    result = cpu_scorer.evaluate(rms_norm, fixture_candidate(fixture))
    assert result.verdict in verdict, result.failure
    assert result.failure is not None and result.failure.kind is result.verdict
    assert message in result.failure.message or any(
        message in f.rule for f in result.failure.findings
    )
    assert result.score == 0.0


def test_worker_survives_crash_and_next_evaluation_works(
    cpu_scorer: Scorer, runtime_scorer: Scorer, rms_norm: ProblemSpec, rms_norm_candidate: str
) -> None:
    crashed = runtime_scorer.evaluate(rms_norm, fixture_candidate("rms_norm_crash.py"))
    assert crashed.verdict is Verdict.CRASH
    assert "signal 11" in crashed.failure.message  # type: ignore[union-attr]
    assert cpu_scorer.evaluate(rms_norm, rms_norm_candidate).verdict is Verdict.ACCEPTED


def test_heap_corruption_is_a_verdict(
    runtime_scorer: Scorer, rms_norm: ProblemSpec, inject: Callable[[str], str]
) -> None:
    # overwrite a live object's header: the interpreter dies in C, not with a Python exception
    source = inject(
        "import ctypes\nvictim = [1, 2, 3]\nctypes.memset(id(victim), 0, 64)\n"
        "len(victim)\nimport gc\ngc.collect()"
    )
    result = runtime_scorer.evaluate(rms_norm, source)
    assert result.verdict is Verdict.CRASH, result.failure


def test_hang_is_killed_as_a_group(
    tmp_path: Path, rms_norm: ProblemSpec, inject: Callable[[str], str]
) -> None:
    scorer = Scorer(BenchConfig(worker_timeout_s=6.0), tmp_path, device="cpu", static_screen=False)
    pid_file = tmp_path / "child.pid"
    source = inject(
        "import subprocess\n"
        f"child = subprocess.Popen(['sleep', '300'])\n"
        f"open('{pid_file}', 'w').write(str(child.pid))\n"
        "while True:\n    pass"
    )
    result = scorer.evaluate(rms_norm, source)
    assert result.verdict is Verdict.TIMEOUT
    assert "did not finish" in result.failure.message  # type: ignore[union-attr]
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child), "the candidate's child outlived the group kill"


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
    except OSError:
        return False
    return state != "Z"


def test_out_of_memory_is_a_verdict(
    tmp_path: Path, rms_norm: ProblemSpec, inject: Callable[[str], str]
) -> None:
    scorer = Scorer(BenchConfig(address_space_limit_gb=6.0), tmp_path, device="cpu")
    result = scorer.evaluate(
        rms_norm, inject("hog = torch.empty(8 * 2**30, dtype=torch.uint8)\nhog.fill_(1)")
    )
    assert result.verdict is Verdict.OOM, result.failure


def test_mutated_input_is_rejected(
    runtime_scorer: Scorer, rms_norm: ProblemSpec, inject: Callable[[str], str]
) -> None:
    result = runtime_scorer.evaluate(rms_norm, inject("weight.fill_(0.5)"))
    assert result.verdict is Verdict.MUTATED_INPUT
    assert "weight" in result.failure.message  # type: ignore[union-attr]


def test_non_tensor_output_is_bad_structure(
    cpu_scorer: Scorer, rms_norm: ProblemSpec, inject: Callable[[str], str]
) -> None:
    result = cpu_scorer.evaluate(
        rms_norm, inject("return [rms_norm(x, weight, self.eps), 'extra']")
    )
    assert result.verdict is Verdict.BAD_STRUCTURE


def test_worker_environment_holds_no_secrets(
    cpu_scorer: Scorer,
    rms_norm: ProblemSpec,
    inject: Callable[[str], str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-secret")
    monkeypatch.setenv("AKA_LLM__API_KEY", "aka-secret")
    monkeypatch.setenv("MY_TOKEN", "tok")
    leak = inject(
        "import os\n"
        "leaked = [k for k in os.environ if 'KEY' in k or 'TOKEN' in k or k.startswith('AKA_')]\n"
        "interp = os.environ.get('TRITON_INTERPRET')\n"
        "if leaked or interp != '1' or os.getcwd() != os.environ['HOME']:\n"
        "    raise RuntimeError(f'sandbox leak: {leaked}')"
    )
    result = cpu_scorer.evaluate(rms_norm, leak)
    assert result.verdict is Verdict.ACCEPTED, result.failure


def test_cuda_candidate_is_not_run_on_cpu(cpu_scorer: Scorer, rms_norm: ProblemSpec) -> None:
    source = (
        "import torch\nfrom torch.utils.cpp_extension import load_inline\n"
        "class ModelNew(torch.nn.Module):\n    def forward(self, x, weight):\n"
        "        return load_inline(name='m', cpp_sources='', cuda_sources='').run(x)\n"
    )
    result = cpu_scorer.evaluate(rms_norm, source)
    assert result.verdict is Verdict.NOT_RUN


def test_unknown_shape_id_is_a_spec_error(
    cpu_scorer: Scorer, rms_norm: ProblemSpec, rms_norm_candidate: str
) -> None:
    with pytest.raises(SpecError, match="unknown shape id"):
        cpu_scorer.evaluate(rms_norm, rms_norm_candidate, shape_ids=["nope"])


def test_named_shapes_override_the_smoke_split(
    cpu_scorer: Scorer, rms_norm: ProblemSpec, rms_norm_candidate: str
) -> None:
    result = cpu_scorer.evaluate(rms_norm, rms_norm_candidate, shape_ids=["smoke_t33_h256"])
    assert [r.shape_id for r in result.shapes] == ["smoke_t33_h256"]
    assert "smoke_t8_h1000" in result.skipped_shapes


@pytest.mark.parametrize(
    "example", sorted(p.name for p in EXAMPLES.iterdir() if (p / "candidate.py").exists())
)
def test_every_example_candidate_is_accepted(cpu_scorer: Scorer, example: str) -> None:
    problem = load_problem(EXAMPLES / example / "op.yaml")
    result = cpu_scorer.evaluate(problem, (EXAMPLES / example / "candidate.py").read_text())
    assert result.verdict is Verdict.ACCEPTED, result.failure


FIXTURE_PROBLEMS = Path(__file__).resolve().parents[1] / "fixtures" / "problems"


def test_atrex_problem_scores_a_candidate_named_model(
    cpu_scorer: Scorer, rms_norm_candidate: str
) -> None:
    problem = load_problem(FIXTURE_PROBLEMS / "atrex_rms_norm")
    as_model = rms_norm_candidate.replace("class ModelNew(", "class Model(")
    result = cpu_scorer.evaluate(problem, as_model, shape_ids=["0", "1"])
    assert result.verdict is Verdict.ACCEPTED, result.failure
    assert [r.shape_id for r in result.shapes] == ["0", "1"]
    assert all(r.phase == "decode" for r in result.shapes)


def test_candidate_named_model_is_rejected_outside_atrex(
    cpu_scorer: Scorer, rms_norm: ProblemSpec, rms_norm_candidate: str
) -> None:
    as_model = rms_norm_candidate.replace("class ModelNew(", "class Model(")
    result = cpu_scorer.evaluate(rms_norm, as_model)
    assert result.verdict is Verdict.SCREEN_REJECTED


def test_kernelbench_problem_scores_positional_inputs(cpu_scorer: Scorer) -> None:
    problem = load_problem(FIXTURE_PROBLEMS / "kernelbench_softmax.py")
    candidate = (EXAMPLES / "softmax" / "candidate.py").read_text()
    result = cpu_scorer.evaluate(problem, candidate, shape_ids=["default"])
    assert result.verdict is Verdict.ACCEPTED, result.failure
    with pytest.raises(SpecError, match="smoke"):
        cpu_scorer.evaluate(problem, candidate)  # no smoke shape and no --shapes on the CPU


def test_problem_dsl_allow_list_is_enforced(
    cpu_scorer: Scorer, rms_norm: ProblemSpec, rms_norm_candidate: str
) -> None:
    cuda_only = rms_norm.model_copy(update={"dsl": [Dsl.CUDA]})
    result = cpu_scorer.evaluate(cuda_only, rms_norm_candidate)
    assert result.verdict is Verdict.SCREEN_REJECTED
    assert "allows ['cuda']" in result.failure.message  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("candidate", "mode"),
    [("candidate_same_names.py", "loaded"), ("candidate_own_names.py", "seeded")],
)
def test_weights_are_shared_with_the_reference(
    cpu_scorer: Scorer, candidate: str, mode: str
) -> None:
    problem = load_problem(FIXTURE_PROBLEMS / "scaled_rows" / "op.yaml")
    result = cpu_scorer.evaluate(
        problem, (FIXTURE_PROBLEMS / "scaled_rows" / candidate).read_text()
    )
    assert result.verdict is Verdict.ACCEPTED, result.failure
    assert result.manifest.weights_mode == mode


def test_file_size_limit_scales_with_the_reference_outputs(tmp_path: Path) -> None:
    # The workers' RLIMIT_FSIZE guards the disk from untrusted code; it must not fail the trusted
    # reference (whose tensors for a large holdout shape can pass it: seen on the H200 with fp8
    # problems at 4 GiB) nor an honest candidate writing outputs of the same size.
    import shutil

    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "problems" / "residual_add"
    problem_dir = tmp_path / "residual_add"
    shutil.copytree(fixture, problem_dir)
    op = problem_dir / "op.yaml"
    op.write_text(
        op.read_text().replace(
            "{id: smoke_r9_h300, input_kwargs: {rows: 9, hidden: 300}, split: smoke}",
            "{id: smoke_r1100_h300, input_kwargs: {rows: 1100, hidden: 300}, split: smoke}",
        )
    )
    problem = load_problem(op)
    assert [s.id for s in problem.shapes] == ["smoke_r1100_h300"]
    # each output file holds y and the updated residual: 2 x 1100 x 300 fp32 = 2.6 MB > 1 MB
    scorer = Scorer(BenchConfig(file_size_limit_mb=1), tmp_path / "cache", device="cpu")
    result = scorer.evaluate(problem, (problem_dir / "candidate.py").read_text())
    assert result.verdict is Verdict.ACCEPTED, result.message


_SEEDED_LENGTH_PROBLEM = """
name: seeded_length
reference:
  code: |
    import torch
    class Model(torch.nn.Module):
        def forward(self, x, idx):
            return x[idx.long()] * 2
    def _make_inputs(n):
        picks = int(torch.randint(1, n, (1,)))  # the number of indices changes with the seed
        return {"x": torch.randn(n), "idx": torch.randint(0, n, (picks,), dtype=torch.int32)}
shapes: {cases: [{id: s, input_kwargs: {n: 4096}, split: smoke}]}
"""

_SEEDED_LENGTH_CANDIDATE = """
import torch
import triton
import triton.language as tl


@triton.jit
def _gather_twice(x, idx, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    i = tl.load(idx + offs, mask=mask, other=0)
    tl.store(out + offs, tl.load(x + i, mask=mask) * 2, mask=mask)


class ModelNew(torch.nn.Module):
    def forward(self, x, idx):
        n = idx.shape[0]
        out = torch.empty(n, device=x.device, dtype=x.dtype)
        _gather_twice[(triton.cdiv(n, 256),)](x, idx, out, n, BLOCK=256)
        return out
"""


def test_inputs_whose_shape_changes_with_the_seed_are_a_problem_error(
    cpu_scorer: Scorer, tmp_path: Path
) -> None:
    # The repeat probe refills one seed's tensors with another seed's values at the same
    # addresses: a tensor whose length depends on the seed cannot be refilled, so the problem is
    # refused before any candidate runs, naming the input and the fix.
    problem = parse_op_yaml_text(_SEEDED_LENGTH_PROBLEM, base_dir=tmp_path, source="s.yaml")
    with pytest.raises(BaselineError, match=r"input 'idx' is \(\(\d+,\), 'torch.int32'\) for seed"):
        cpu_scorer.evaluate(problem, _SEEDED_LENGTH_CANDIDATE)


def test_input_layout_compares_tensors_by_shape_and_dtype_and_scalars_by_value() -> None:
    import torch

    from aka.bench.worker import check_seed_independent_layout, input_layout

    same = {s: input_layout({"x": torch.randn(3, 4) * s, "n": 4}) for s in (0, 1, 2)}
    check_seed_independent_layout("a", same)  # values differ, layout does not
    wider = {0: input_layout({"x": torch.zeros(3)}), 1: input_layout({"x": torch.zeros(3).half()})}
    with pytest.raises(ValueError, match="input 'x'.*float32.*float16"):
        check_seed_independent_layout("a", wider)
    scalar = {0: input_layout({"max_len": 7}), 1: input_layout({"max_len": 9})}
    with pytest.raises(ValueError, match="input 'max_len' is 7 for seed 0 but 9 for seed 1"):
        check_seed_independent_layout("a", scalar)
