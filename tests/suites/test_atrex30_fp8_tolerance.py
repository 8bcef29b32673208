"""The fp8 operators' tolerances accept what fp8 tensor-core kernels compute, and nothing wrong.

block_scaled_mm: an emulated fp8 tensor-core GEMM (13-bit truncated accumulation every 4 products
inside each 128-wide K block, fp32 across blocks) must pass; the same with one K block dropped, or
all zeros, must fail. fp8_blockscale_fused_moe: the serving algorithm (the SiLU activation
re-quantised to fp8 per 1 x 128 group) must pass; one routed expert dropped must fail.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from aka.bench import compare_outputs
from aka.bench.correctness import Tolerance
from aka.bench.problem_runtime import flatten_outputs, load_module
from aka.spec import load_suite

SUITE = Path(__file__).resolve().parents[2] / "configs" / "suites" / "atrex30"


def _tolerance(op: str) -> Tolerance:
    spec = load_suite("atrex30").problem(op).tolerance
    assert spec is not None and spec.atol is not None and spec.rtol is not None
    return Tolerance(spec.atol, spec.rtol, spec.atol_scale)


def _as_output(t: torch.Tensor) -> dict[str, Any]:
    structure, tensors = flatten_outputs(t)
    return {"structure": structure, "tensors": tensors, "extra": {}}


def _check(cand: dict[str, Any], ref: dict[str, Any], *, cpu: bool, override: Any = None) -> Any:
    """The scorer's comparison (no fp8 outputs here; short reductions: the table is unwidened)."""
    return compare_outputs(cand, ref, fp8_scales={}, cpu=cpu, override=override)


def _truncate(x: torch.Tensor, bits: int) -> torch.Tensor:
    mantissa, exponent = torch.frexp(x)
    return torch.ldexp(torch.trunc(mantissa * 2**bits) / 2**bits, exponent)


def _fp8_tensor_core_gemm(inp: dict[str, torch.Tensor], gn: int, gk: int, drop: int = -1):
    a, b = inp["a"].float(), inp["b"].float()
    m, k = a.shape
    n = b.shape[0]
    out = torch.zeros(m, n)
    for i, k0 in enumerate(range(0, k, gk)):
        if i == drop:
            continue
        acc = torch.zeros(m, n)
        for j in range(k0, min(k0 + gk, k), 4):
            hi = min(j + 4, k0 + gk, k)
            acc = _truncate(acc + a[:, j:hi] @ b[:, j:hi].t(), 13)
        b_scale = inp["b_scales"][:, i].repeat_interleave(gn)[:n]
        out += acc * inp["a_scales"][:, i, None] * b_scale[None, :]
    return out


def test_block_scaled_mm_accepts_fp8_tensor_core_accumulation_only() -> None:
    ref_mod = load_module("_tol_bsm", SUITE / "block_scaled_mm" / "reference.py")
    tol = _tolerance("block_scaled_mm")
    for m, n, k in ((37, 200, 1024), (16, 256, 2048)):
        torch.manual_seed(0)
        inp = ref_mod._make_inputs(m=m, n=n, k=k, group_n=128, group_k=128, device="cpu")
        ref = _as_output(ref_mod.Model(group_n=128, group_k=128)(**inp))
        good = _fp8_tensor_core_gemm(inp, 128, 128)
        outcome = _check(_as_output(good), ref, cpu=True, override=tol)
        assert outcome.ok, outcome.message
        # fp32's table rejects the same honest result: the override is what lets it pass.
        assert not _check(_as_output(good), ref, cpu=True).ok
        dropped = _fp8_tensor_core_gemm(inp, 128, 128, drop=1)
        assert not _check(_as_output(dropped), ref, cpu=True, override=tol).ok
        zeros = torch.zeros_like(good)
        assert not _check(_as_output(zeros), ref, cpu=True, override=tol).ok


def _serving_moe(mod: Any, inp: dict[str, torch.Tensor], inter: int, skip_slot: int = -1):
    x = mod._dequantize(inp["hidden_states"], inp["a_scale"], 1, 128)
    out = torch.zeros_like(x)
    tokens, top_k = inp["topk_ids"].shape
    for t in range(tokens):
        for j in range(top_k):
            if j == skip_slot:
                continue
            e = int(inp["topk_ids"][t, j])
            w1 = mod._dequantize(inp["w1"][e], inp["fc1_scale"][e], 128, 128)
            w2 = mod._dequantize(inp["w2"][e], inp["fc2_scale"][e], 128, 128)
            gate_up = x[t : t + 1] @ w1.t()
            act = F.silu(gate_up[:, :inter]) * gate_up[:, inter:]
            q, s = mod._quantize_blocks(act, 1, 128)  # the serving kernels' fp8 activation
            out[t] += float(inp["topk_weights"][t, j]) * (mod._dequantize(q, s, 1, 128) @ w2.t())[0]
    return out.to(torch.bfloat16)


def test_fp8_fused_moe_accepts_the_serving_algorithm_only() -> None:
    mod = load_module("_tol_moe", SUITE / "fp8_blockscale_fused_moe" / "reference.py")
    tol = _tolerance("fp8_blockscale_fused_moe")
    torch.manual_seed(0)
    kw = {"token_count": 8, "hidden_size": 512, "intermediate_size": 384, "num_experts": 6}
    inp = mod._make_inputs(**kw, top_k=2, device="cpu")
    model = mod.Model(num_experts=6, intermediate_size=384, top_k=2)
    ref = _as_output(model(**inp))
    serving = _serving_moe(mod, inp, 384)
    assert _check(_as_output(serving), ref, cpu=True, override=tol).ok
    assert not _check(_as_output(serving), ref, cpu=True).ok  # bf16's table rejects it
    one_expert = _serving_moe(mod, inp, 384, skip_slot=1)
    assert not _check(_as_output(one_expert), ref, cpu=True, override=tol).ok
