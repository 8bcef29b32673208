"""atrex30 roofline overrides (issue #6, point 2): they evaluate, match the tensors, price right.

Each ``configs/suites/atrex30/<op>/roofline.yaml`` replaces what counting the reference gets wrong
(fp32-upcast matmuls, whole paged caches, unrouted experts, causal pairs) with the costs of an
ideal kernel for the operator's semantics (``docs/suites.md``, "Rooflines"). Checked here: every
override evaluates to finite non-negative numbers on every shape; at the smoke shapes its bytes
agree with an independent computation from the actual tensors; fp8 GEMMs are priced on fp8
tensor cores at 2*M*N*K; the delta-rule ops use tensor cores only with a stated reason; a dtype
kwarg picks the tensor unit; and T_sol on the H200 datasheet is positive for every tune shape.
"""

from __future__ import annotations

import functools
import math
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from aka.bench.problem_runtime import load_module
from aka.hardware import CostCounts, apply_overrides, count_costs, datasheet_ceilings, t_sol
from aka.spec import ProblemSpec, ShapeCase, Split, load_problem
from aka.spec.vocab import ComputeUnit

REPO = Path(__file__).resolve().parents[2]
SUITE = REPO / "configs" / "suites" / "atrex30"
OPS = sorted(p.parent.name for p in SUITE.glob("*/reference.py"))
OVERRIDDEN = sorted(op for op in OPS if (SUITE / op / "roofline.yaml").is_file())
TENSOR_UNITS = {u for u in ComputeUnit if u.value.startswith("tc_")}
DELTA_RULE_OPS = (
    "chunk_delta_rule_output",
    "chunk_gated_delta_rule_state",
    "gated_delta_rule_update",
)
#: Words a delta-rule override's reason must hold to price work on tensor cores.
TENSOR_CORE_JUSTIFICATION = "tensor cores justified"


@functools.cache
def _problem(op: str) -> ProblemSpec:
    return load_problem(SUITE / op / "op.yaml")


def _module(op: str) -> types.ModuleType:
    name = f"_atrex30_roofline_{op}"
    return sys.modules.get(name) or load_module(name, SUITE / op / "reference.py")


def _names(shape: ShapeCase) -> dict[str, Any]:
    return {**shape.init_kwargs, **shape.input_kwargs}


def _overridden(op: str, shape: ShapeCase) -> CostCounts:
    """The overrides alone, applied to empty counts."""
    return apply_overrides(
        CostCounts(),
        _problem(op).roofline_overrides_for(shape.id),
        _names(shape),
        shape_id=shape.id,
    )


def _covers_all_fields(op: str, shape: ShapeCase) -> bool:
    overrides = _problem(op).roofline_overrides_for(shape.id)
    return all(
        any(getattr(o, field) is not None for o in overrides)
        for field in ("flops_by_unit", "bytes_read", "bytes_written")
    )


def _smoke(op: str) -> list[ShapeCase]:
    return [s for s in _problem(op).shapes if s.split is Split.SMOKE]


def test_overrides_are_the_hand_written_files() -> None:
    assert OVERRIDDEN, "no atrex30 operator has a roofline.yaml"
    for op in OPS:
        path = SUITE / op / "roofline.yaml"
        written = yaml.safe_load(path.read_text()) if path.is_file() else []
        assert [o.model_dump(mode="json", exclude_none=True) for o in _problem(op).roofline] == [
            {"shapes": ["*"], **o} if "shapes" not in o else o for o in written
        ], f"{op}: op.yaml's roofline differs from roofline.yaml; run scripts/build_atrex30.py"
        for override in _problem(op).roofline:
            assert "\n" not in override.reason.strip(), f"{op}: a reason is one line"


@pytest.mark.parametrize("op", OVERRIDDEN)
def test_every_override_evaluates_on_every_shape(op: str) -> None:
    shapes = _problem(op).shapes
    assert any(s.split is Split.TUNE for s in shapes) and any(
        s.split is Split.SMOKE for s in shapes
    )
    for shape in shapes:
        costs = _overridden(op, shape)
        values = [costs.bytes_read, costs.bytes_written, *costs.flops_by_unit.values()]
        assert all(math.isfinite(v) and v >= 0 for v in values), (op, shape.id, costs)
        assert _problem(op).roofline_overrides_for(shape.id), f"{op}: no override covers {shape.id}"


# Bytes an ideal kernel must read of the inputs that it reads only in part, from the tensors
# themselves; every other input is read in full.
def _routed_experts(*weights: str) -> Callable[[dict[str, Any], str], float]:
    def needed(inputs: dict[str, Any], name: str) -> float:
        used = torch.unique(inputs["topk_ids"].long())
        return float(inputs[name][used].nbytes) if name in weights else float(inputs[name].nbytes)

    return needed


def _cache_tokens(lengths: str, block_dim: int) -> Callable[[dict[str, Any], str], float]:
    def needed(inputs: dict[str, Any], name: str) -> float:
        cache = inputs[name]
        if name not in ("k_cache", "v_cache"):
            return float(cache.nbytes)
        per_token = cache[0].nbytes / cache.shape[block_dim]
        return float(inputs[lengths].sum()) * per_token

    return needed


def _mrope_tables(inputs: dict[str, Any], name: str) -> float:
    # cos/sin (3, T, rotary_dim / 2): each slot reads one of the three position channels.
    return inputs[name].nbytes / 3 if name in ("cos", "sin") else float(inputs[name].nbytes)


def _cache_not_read(inputs: dict[str, Any], name: str) -> float:
    # reshape_and_cache only writes the caches
    return 0.0 if name in ("key_cache", "value_cache") else float(inputs[name].nbytes)


def _read_in_full(inputs: dict[str, Any], name: str) -> float:
    return float(inputs[name].nbytes)


PARTIAL_READS: dict[str, Callable[[dict[str, Any], str], float]] = {
    "fused_moe": _routed_experts("w1", "w2"),
    "fp8_blockscale_fused_moe": _routed_experts("w1", "w2", "fc1_scale", "fc2_scale"),
    "paged_attention_decode": _cache_tokens("seq_lens", block_dim=3),
    "unified_attention": _cache_tokens("seqused_k", block_dim=1),
    "mrope": _mrope_tables,
    "reshape_and_cache": _cache_not_read,
}
#: The MoE overrides use the expected number of routed experts; a smoke draw may differ a little.
READ_RTOL = {"fused_moe": 0.1, "fp8_blockscale_fused_moe": 0.1}


def _written_bytes(inputs: dict[str, Any], run: Callable[[], Any]) -> float:
    """Bytes of new outputs plus bytes of input elements the forward changed in place."""
    before = {k: v.clone() for k, v in inputs.items() if isinstance(v, torch.Tensor)}
    with torch.no_grad():
        out = run()
    leaves = out.values() if isinstance(out, dict) else out if isinstance(out, tuple) else [out]
    storages = {inputs[k].untyped_storage().data_ptr() for k in before}
    fresh = sum(
        t.nbytes
        for t in leaves
        if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in storages
    )
    changed = sum(
        int((inputs[k] != v).sum()) * v.element_size()
        for k, v in before.items()
        if not torch.equal(inputs[k], v)
    )
    return float(fresh + changed)


@pytest.mark.parametrize(("op", "shape_id"), [(op, s.id) for op in OVERRIDDEN for s in _smoke(op)])
def test_override_bytes_match_the_tensors(op: str, shape_id: str) -> None:
    shape = next(s for s in _problem(op).shapes if s.id == shape_id)
    module = _module(op)
    torch.manual_seed(0)
    model = module.Model(**shape.init_kwargs)
    inputs = module._make_inputs(**shape.input_kwargs, device="cpu")
    costs = _overridden(op, shape)
    needed = PARTIAL_READS.get(op, _read_in_full)
    tensors = {k: v for k, v in inputs.items() if isinstance(v, torch.Tensor)}
    must_read = sum(needed(tensors, k) for k in tensors)
    total = sum(t.nbytes for t in tensors.values()) + sum(
        p.nbytes for p in [*model.parameters(), *model.buffers()]
    )

    assert costs.bytes_read == pytest.approx(must_read, rel=READ_RTOL.get(op, 1e-9))
    assert costs.bytes_read <= total
    assert costs.bytes_written == pytest.approx(
        _written_bytes(inputs, lambda: model(**inputs)), rel=1e-9
    )


@pytest.mark.parametrize("op", ["block_scaled_mm", "fp8_blockscale_fused_moe"])
def test_fp8_gemms_run_on_fp8_tensor_cores(op: str) -> None:
    for shape in _problem(op).shapes:
        n = _names(shape)
        flops = _overridden(op, shape).flops_by_unit
        if op == "block_scaled_mm":
            assert flops == {ComputeUnit.TC_FP8: 2 * n["m"] * n["n"] * n["k"]}
        else:  # both GEMMs in fp8 (the activation re-quantised, as serving kernels do)
            rows = n["token_count"] * n["top_k"]
            inter, hidden = n["intermediate_size"], n["hidden_size"]
            assert flops == {
                ComputeUnit.TC_FP8: 2 * rows * (2 * inter) * hidden + 2 * rows * hidden * inter
            }


@pytest.mark.parametrize("op", DELTA_RULE_OPS)
def test_delta_rule_ops_use_tensor_cores_only_with_a_reason(op: str) -> None:
    for override in _problem(op).roofline:
        units = set(override.flops_by_unit or {})
        if units & TENSOR_UNITS:
            assert TENSOR_CORE_JUSTIFICATION in override.reason, (op, override.reason)
    # The recurrent op is matrix-vector work on an fp32 state: never tensor cores.
    if op == "gated_delta_rule_update":
        for shape in _problem(op).shapes:
            assert set(_overridden(op, shape).flops_by_unit) == {ComputeUnit.VECTOR_FP32}


@pytest.mark.parametrize("op", OVERRIDDEN)
def test_a_dtype_kwarg_picks_the_tensor_unit(op: str) -> None:
    unit_of = {"bf16": ComputeUnit.TC_BF16, "fp16": ComputeUnit.TC_FP16}
    for shape in _problem(op).shapes:
        dtype = _names(shape).get("dtype")
        units = set(_overridden(op, shape).flops_by_unit) & TENSOR_UNITS
        if dtype in unit_of and units:
            assert units == {unit_of[dtype]}, (op, shape.id, units)


@pytest.mark.parametrize("op", OPS)
def test_t_sol_is_positive_on_the_h200(op: str) -> None:
    """Overrides alone where they give every field (all tune shapes), else counted smoke shapes."""
    ceilings = datasheet_ceilings("NVIDIA H200")
    assert ceilings is not None
    problem = _problem(op)
    tune = [s for s in problem.shapes if s.split is Split.TUNE]
    if all(_covers_all_fields(op, s) for s in tune):
        checked = {s.id: _overridden(op, s) for s in tune}
    else:
        module = _module(op)
        checked = {}
        for shape in _smoke(op):
            torch.manual_seed(0)
            inputs = module._make_inputs(**shape.input_kwargs, device="cpu")
            counts = count_costs(module.Model(**shape.init_kwargs), inputs)
            overrides = problem.roofline_overrides_for(shape.id)
            checked[shape.id] = apply_overrides(counts, overrides, _names(shape))
    assert checked
    for shape_id, costs in checked.items():
        sol = t_sol(costs, ceilings)
        assert 0 < sol.t_sol_s < 1.0 and math.isfinite(sol.t_sol_s), (op, shape_id, sol)
        assert costs.bytes_read > 0 and costs.bytes_written > 0, (op, shape_id, costs)


@pytest.mark.parametrize(
    ("op", "weights"),
    [
        ("fused_moe", ("w1", "w2")),
        ("fp8_blockscale_fused_moe", ("w1", "w2", "fc1_scale", "fc2_scale")),
    ],
)
def test_moe_overrides_expect_the_generators_routing(op: str, weights: tuple[str, ...]) -> None:
    """The experts the override reads equal the mean number of distinct experts routed to.

    Few tokens with a large top-k tell the two routings apart: 16 experts, 2 tokens, top-8 touch
    12 experts on average when each token takes 8 distinct ones, 10.2 when all 16 picks are
    independent.
    """
    kwargs = {"token_count": 2, "hidden_size": 8, "intermediate_size": 8}
    kwargs |= {"num_experts": 16, "top_k": 8}
    module = _module(op)
    distinct = []
    for seed in range(60):
        torch.manual_seed(seed)
        inputs = module._make_inputs(**kwargs, device="cpu")
        distinct.append(len(torch.unique(inputs["topk_ids"])))
    per_expert = sum(inputs[w][0].nbytes for w in weights)
    others = sum(t.nbytes for k, t in inputs.items() if k not in weights)
    costs = apply_overrides(CostCounts(), _problem(op).roofline, kwargs)
    expected_experts = (costs.bytes_read - others) / per_expert

    assert expected_experts == pytest.approx(sum(distinct) / len(distinct), rel=0.05)
