"""
---
id: moe_topk_gating_softmax
title: MoE router, fp32 softmax over experts then iterative top-k selection, one program per token
op_family: moe
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [fp32, bf16, fp16]
bound: latency
techniques: [row-per-program, fp32-softmax, iterative-argmax-topk, optional-renormalize]
status: reference
launcher: moe_topk_gating_softmax
tuning:
  num_warps: [2, 1, 4, 8]
args:
  gating_output:
    {shape: [T, E], dtypes: [fp32, bf16, fp16], layout: any, aliases: [router_logits, logits]}
  top_k: {type: int, aliases: [topk, k, num_experts_per_tok]}
  renormalize: {type: bool, default: false, aliases: [normalize, norm_topk_prob]}
returns:
  - {name: topk_weights, shape: [T, top_k], dtype: fp32}
  - {name: topk_ids, shape: [T, top_k], dtype: int32}
problem:
  shapes: [{tokens: 7, experts: 128, top_k: 8}, {tokens: 3, experts: 6, top_k: 2, renormalize: true}]
  dtypes: [fp32, bf16]
measured:
  - {device: NVIDIA H200, shape: moe_topk_gating_softmax/0, dtype: fp32, latency_us: 5.408, sol_fraction: 0.5207, date: '2026-12-03'}
---
Router for a mixture of experts: each program owns one token's (E,) logits row in registers, takes a
numerically safe softmax in fp32 (max-subtracted exp, one division), then selects the top k <= 8
experts by k rounds of (row max, lowest index holding it, knock it out), i.e. ties go to the lower
expert id. The k weights are collected in a small vector so the optional renormalisation (divide by
their sum) happens before a single store of weights (fp32) and ids (int32). Bytes per token: E
logits read once (4 B each for fp32) and 8 B written per selected expert; for E = 128..256 and T in
the thousands this is a latency-bound kernel of a few microseconds. Limits: BLOCK_E =
next_power_of_2(E) must fit in registers (fine to several thousand experts), the k rounds are serial
reductions over the row (k * E compares), no grouped-expert (DeepSeek group-limited) routing and no
bias term.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _moe_topk_gating_softmax_kernel(
    # pointers
    logits_ptr,  # (T, E)
    weights_ptr,  # fp32 (T, k)
    ids_ptr,  # int32 (T, k)
    # sizes
    E,
    # strides (elements)
    stride_lt,
    stride_le,
    stride_wt,
    stride_it,
    # meta
    TOP_K: tl.constexpr,
    BLOCK_E: tl.constexpr,  # next_power_of_2(E)
    BLOCK_K: tl.constexpr,  # next_power_of_2(TOP_K)
    RENORMALIZE: tl.constexpr,
):
    token = tl.program_id(0).to(tl.int64)
    offs_e = tl.arange(0, BLOCK_E)
    mask_e = offs_e < E
    logits = tl.load(logits_ptr + token * stride_lt + offs_e * stride_le, mask=mask_e,
                     other=-float("inf")).to(tl.float32)  # fmt: skip

    # softmax in fp32; padded lanes become exactly 0
    row_max = tl.max(logits, axis=0)
    num = tl.where(mask_e, tl.exp(logits - row_max), 0.0)
    probs = num / tl.sum(num, axis=0)

    # k rounds of argmax; a taken or padded lane is -1 so it never wins again (probs >= 0)
    work = tl.where(mask_e, probs, -1.0)
    offs_k = tl.arange(0, BLOCK_K)
    top_w = tl.zeros((BLOCK_K,), dtype=tl.float32)
    top_i = tl.zeros((BLOCK_K,), dtype=tl.int32)
    for j in tl.static_range(TOP_K):
        best = tl.max(work, axis=0)
        idx = tl.min(tl.where(work == best, offs_e, BLOCK_E), axis=0)  # ties -> lowest id
        top_w = tl.where(offs_k == j, best, top_w)
        top_i = tl.where(offs_k == j, idx, top_i)
        work = tl.where(offs_e == idx, -1.0, work)

    if RENORMALIZE:
        top_w = top_w / tl.sum(top_w, axis=0)  # unused lanes hold 0 and do not count
    mask_k = offs_k < TOP_K
    tl.store(weights_ptr + token * stride_wt + offs_k, top_w, mask=mask_k)
    tl.store(ids_ptr + token * stride_it + offs_k, top_i, mask=mask_k)


def _launch_config(num_experts: int) -> dict[str, int]:
    """Return warps: one warp per 128 experts, at least 2, at most 8."""
    return {"num_warps": max(2, min(8, triton.cdiv(num_experts, 128)))}


def moe_topk_gating_softmax(
    gating_output: torch.Tensor,
    top_k: int,
    renormalize: bool = False,
    *,
    num_warps: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return the top-k softmax routing weights and expert ids of every token.

    Args:
        gating_output: (T, E) fp32/bf16/fp16 router logits, any strides.
        top_k: Experts per token, 1 <= top_k <= min(8, E).
        renormalize: Divide the k weights by their sum.
        num_warps: Warps per program; None picks by E.

    Returns:
        topk_weights: (T, top_k) fp32, descending per row.
        topk_ids: (T, top_k) int32.

    Raises:
        ValueError: The shape, dtype or top_k do not fit.
    """
    if gating_output.dim() != 2 or not gating_output.dtype.is_floating_point:
        raise ValueError(f"need float gating_output (T, E); got {tuple(gating_output.shape)}")
    t, e = gating_output.shape
    if not 1 <= top_k <= min(8, e):
        raise ValueError(f"need 1 <= top_k <= min(8, E={e}); got top_k={top_k}")
    weights = torch.empty((t, top_k), dtype=torch.float32, device=gating_output.device)
    ids = torch.empty((t, top_k), dtype=torch.int32, device=gating_output.device)
    if t == 0:
        return weights, ids
    cfg = _launch_config(e)
    if num_warps is not None:
        cfg["num_warps"] = num_warps
    _moe_topk_gating_softmax_kernel[(t,)](
        gating_output, weights, ids,
        e,
        gating_output.stride(0), gating_output.stride(1), weights.stride(0), ids.stride(0),
        TOP_K=top_k, BLOCK_E=triton.next_power_of_2(e),
        BLOCK_K=triton.next_power_of_2(top_k), RENORMALIZE=renormalize,
        num_warps=cfg["num_warps"],
    )  # fmt: skip
    return weights, ids


def reference(
    gating_output: torch.Tensor, top_k: int, renormalize: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return fp32 softmax then torch.topk, optionally renormalised."""
    probs = torch.softmax(gating_output.float(), dim=-1)
    weights, ids = torch.topk(probs, top_k, dim=-1)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights, ids.to(torch.int32)


def make_inputs(shape: dict, dtype: torch.dtype = torch.float32, device: str = "cpu") -> dict:
    """Return ``{"gating_output", "top_k", "renormalize"}`` for ``{"tokens", "experts", "top_k"}``.

    Logits ~ N(0, 1) in ``dtype``; ``renormalize`` comes from the shape (default False).
    """
    logits = torch.randn(shape["tokens"], shape["experts"], device=device).to(dtype)
    return {"gating_output": logits, "top_k": shape["top_k"],
            "renormalize": shape.get("renormalize", False)}  # fmt: skip
