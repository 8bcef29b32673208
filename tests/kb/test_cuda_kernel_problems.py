"""CUDA C++ reference kernels, dry on the CPU: the scorer's adapter maps their problems.

No GPU here, so the 30 ``reference_kernels/cuda`` kernels cannot be built or run. Everything the
scorer does before it builds a candidate can run: each kernel's own-reference problem (header
``problem:``) is built by ``aka.kb.kernel_problem``; its ``make_inputs`` and ``reference`` run on
the CPU for every case (and the inputs the reference updates are exactly its ``in_place``); the
input signature is taken as ``benchmarks/kb_acceptance.py`` takes it (``_signature``: the richest
shape of an own problem), ``aka.agent.adapt.adapt_kernel`` maps it onto the launcher and the
scorer's static screen checks the candidate. An ``unmapped`` or screen verdict shows up here, not
on the H200. The family problems ``--problems family`` pairs each kernel with (atrex30 and the
examples) are mapped too, on their first smoke shape (the GPU run describes the first tune shape;
the mapping reads sizes symbolically, and the smoke shapes keep this test fast).

What needs CUDA and is not exercised: building the extension (nvcc), the launcher's own checks,
the outputs and their tolerances, the guards that run the candidate, and timing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from aka.agent.adapt import AdaptError, adapt_kernel
from aka.agent.measured import candidate_problems
from aka.bench import InputSignature
from aka.bench.problem_runtime import ProblemRuntime
from aka.bench.screen import screen_source
from aka.bench.signature import describe_reference
from aka.kb import LoadedKernel, kernel_problem, load_kernels
from aka.spec import ProblemSpec, ShapeCase, Split
from tests.scripts import load_script

REPO = Path(__file__).resolve().parents[2]
_KERNELS, _ = load_kernels(REPO / "reference_kernels")
CUDA = {k.meta.id: k for k in _KERNELS if k.meta.dsl.value == "cuda"}

#: The family problems each CUDA kernel maps onto (the others of its family are unmapped: another
#: operator, layout or contract). A new mapping, or one lost, fails the test: update the table.
FAMILY_MAPPED = {
    "gelu_and_mul_vec_cuda": {"atrex30/silu_and_mul", "examples/silu_and_mul"},
    "silu_and_mul_vec8_cuda": {"atrex30/silu_and_mul", "examples/silu_and_mul"},
    "reshape_and_cache_cuda": {"atrex30/reshape_and_cache"},
    "moe_align_block_size_cuda": {"atrex30/moe_align_block_size"},
    "moe_sum_reduce_vec_cuda": {"atrex30/moe_sum_reduce"},
    "moe_topk_gating_softmax_warp_cuda": {"atrex30/moe_topk_gating_softmax"},
    "fused_add_rms_norm_block_cuda": {
        "atrex30/fused_add_rms_norm",
        "atrex30/gated_rms_norm",
        "examples/fused_add_rms_norm",
    },
    "fused_qk_rmsnorm_warp_per_head_cuda": {"atrex30/fused_qk_rmsnorm"},
    "gated_rms_norm_warp_cuda": {"atrex30/gated_rms_norm"},
    "l2_norm_block_cuda": {"atrex30/l2_norm"},
    "rms_norm_warp_per_row_cuda": {"atrex30/rms_norm", "examples/rms_norm"},
    "gated_delta_rule_update_cuda": {"atrex30/gated_delta_rule_update"},
    "per_token_group_quant_fp8_warp_cuda": {
        "atrex30/per_token_group_quant_fp8",
        "examples/fp8_quant",
    },
    "per_token_quant_fp8_cuda": {"atrex30/fp8_dynamic_per_token_quant", "examples/fp8_quant"},
    "rms_norm_quant_fp8_block_cuda": {"atrex30/fused_rmsnorm_quant"},
    "fused_qkv_rope_cuda": {"atrex30/fused_qkv_rope"},
    "mrope_cuda": {"atrex30/mrope"},
    "topk_filter_block_cuda": {"atrex30/topk_filter"},
    "log_softmax_block_cuda": {"examples/softmax"},
    "softmax_online_warp_cuda": {"examples/softmax"},
}
#: Launchers the screen rejects (torch compute in forward): the scorer rejects them on the GPU
#: too, on every problem. Fix the launcher, then drop its entry.
SCREEN_KNOWN: dict[str, set[str]] = {}


class _DryScorer:
    """``Scorer.input_signature`` in this process on the CPU (the scorer runs it in a worker)."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir

    def input_signature(self, problem: ProblemSpec, shape_id: str | None = None) -> InputSignature:
        shape = next(s for s in problem.shapes if s.id == shape_id) if shape_id else _smoke(problem)
        return InputSignature.model_validate(
            describe_reference(self._runtime(problem), shape.model_dump(mode="json"), 0)
        )

    def _runtime(self, problem: ProblemSpec) -> ProblemRuntime:
        workdir = self.workdir / problem.name
        workdir.mkdir(exist_ok=True)
        return ProblemRuntime.load(problem.to_worker_json(), workdir, "cpu")


def _smoke(problem: ProblemSpec) -> ShapeCase:
    return next(s for s in problem.shapes if s.split is Split.SMOKE)


@pytest.fixture(scope="module")
def acceptance() -> Any:
    return load_script("benchmarks/kb_acceptance.py")


@pytest.fixture(scope="module")
def dry(tmp_path_factory: pytest.TempPathFactory) -> _DryScorer:
    return _DryScorer(tmp_path_factory.mktemp("dry"))


def _screen_rules(source: str, problem: ProblemSpec) -> set[str]:
    report = screen_source(
        source, allow=problem.screen_allow, allow_tf32=problem.dtype_policy.allow_tf32
    )
    return {f.rule for f in report.findings}


def _mutated(rt: ProblemRuntime, shape: ShapeCase) -> set[str]:
    """The reference's inputs that one call of it changes."""
    model = rt.build_model(rt.reference.Model, shape.model_dump(mode="json"), 0)
    _, inputs = rt.make_inputs(shape.model_dump(mode="json"), 0)
    before = {k: v.clone() for k, v in inputs.items() if isinstance(v, torch.Tensor)}
    with torch.no_grad():
        model(**inputs)
    return {k for k, v in before.items() if not torch.equal(v, inputs[k])}


def test_all_30_cuda_kernels_have_an_own_problem() -> None:
    assert len(CUDA) == 30
    assert [k for k, kernel in CUDA.items() if kernel.meta.problem is None] == []


@pytest.mark.parametrize("kid", sorted(CUDA))
def test_own_problem_runs_on_the_cpu_and_maps_onto_the_launcher(
    kid: str, acceptance: Any, dry: _DryScorer
) -> None:
    kernel: LoadedKernel = CUDA[kid]
    problem = kernel_problem(kernel.path, kernel.meta, kernel.text)
    rt = dry._runtime(problem)
    for shape in problem.shapes:  # every case: make_inputs and reference run, in_place is true
        assert _mutated(rt, shape) == set(problem.in_place), shape.id
    signature = acceptance._signature(dry, problem)
    source = adapt_kernel(kernel.path, kernel.meta, signature, params={})
    assert _screen_rules(source, problem) == SCREEN_KNOWN.get(kid, set())


def _family(acceptance: Any) -> list[tuple[str, ProblemSpec]]:
    return [(where, p) for where, p in acceptance._problems() if where in ("atrex30", "examples")]


def test_family_problems_map_as_recorded(acceptance: Any, dry: _DryScorer) -> None:
    family = _family(acceptance)
    origin = {id(p): where for where, p in family}
    signatures: dict[str, InputSignature] = {}
    mapped: dict[str, set[str]] = {}
    screened: dict[str, set[str]] = {}
    for kid, kernel in sorted(CUDA.items()):
        for problem in candidate_problems(kernel.meta, [p for _, p in family]):
            key = f"{origin[id(problem)]}/{problem.name}"
            if key not in signatures:
                signatures[key] = acceptance._signature(dry, problem)
            try:
                source = adapt_kernel(kernel.path, kernel.meta, signatures[key], params={})
            except AdaptError:
                continue
            mapped.setdefault(kid, set()).add(key)
            screened.setdefault(kid, set()).update(_screen_rules(source, problem))
    assert mapped == FAMILY_MAPPED
    assert {k: v for k, v in screened.items() if v} == SCREEN_KNOWN
