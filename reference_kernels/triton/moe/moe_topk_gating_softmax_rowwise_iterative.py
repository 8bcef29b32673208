"""
---
id: moe_topk_gating_softmax_rowwise_iterative
title: MoE router streaming the expert row in chunks, online softmax and an iteratively merged top-k
op_family: moe
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [fp32, bf16, fp16]
bound: latency
techniques: [row-per-program, chunked-row-loop, online-softmax, running-topk-buffer,
  iterative-argmax-topk, optional-renormalize]
status: reference
launcher: moe_topk_gating_softmax_rowwise_iterative
tuning:
  block_c: [128, 32, 1024]
  num_warps: [4, 1, 8]
args:
  gating_output:
    {shape: [T, E], dtypes: [fp32, bf16, fp16], layout: any, aliases: [router_logits, logits]}
  top_k: {type: int, aliases: [topk, k, num_experts_per_tok]}
  renormalize: {type: bool, default: false, aliases: [normalize, norm_topk_prob]}
returns:
  - {name: topk_weights, shape: [T, top_k], dtype: fp32}
  - {name: topk_ids, shape: [T, top_k], dtype: int32}
problem:
  shapes: [{tokens: 7, experts: 24, top_k: 5}, {tokens: 3, experts: 160, top_k: 8, renormalize: true}]
  dtypes: [fp32, bf16]
measured:
  - {device: NVIDIA H200, shape: moe_topk_gating_softmax/0, dtype: fp32, latency_us: 6.112, sol_fraction: 0.4555, date: '2026-12-03'}
---
Router for very wide expert rows: one program per token streams its logits in BLOCK_C-wide chunks
instead of holding the whole row (the whole-row designs need next_power_of_2(E) lanes). Per chunk it
updates an online softmax (running max m and running sum s of exp(x - m), rescaled when m grows)
and merges the chunk into a k-entry register buffer of the best logits so far: k rounds of (max
over buffer and chunk, lowest expert id holding it, knock it out). Softmax is monotonic, so the
top-k of the logits is the top-k of the probabilities; buffer entries always come from earlier
chunks, so ties go to the lower expert id as in the whole-row designs. At the end the k weights are
exp(v - m) / s (optionally renormalised over the k) and one store writes weights (fp32) and ids
(int32). Bytes per token: E logits read once, 8 B written per selected expert. Work: k * (BLOCK_C +
k) compares per chunk. When it wins: E in the thousands (fine-grained experts) where a whole-row
tile would spill registers; the chunk width, not E, sets the register footprint. Limits: k <= 32,
the k serial rounds per chunk cost more than a single-row tile for E <= 256, no grouped routing,
no bias, and -inf logits are not supported (they would look like knocked-out lanes).
"""

import torch
import triton
import triton.language as tl

MAX_TOP_K = 32


@triton.jit
def _topk_streaming_kernel(
    logits_ptr,  # (T, E)
    weights_ptr,  # fp32 (T, k), contiguous
    ids_ptr,  # int32 (T, k), contiguous
    E,
    stride_lt,
    stride_le,
    TOP_K: tl.constexpr,
    BLOCK_K: tl.constexpr,  # next_power_of_2(TOP_K)
    BLOCK_C: tl.constexpr,  # chunk width, >= BLOCK_K
    RENORMALIZE: tl.constexpr,
):
    token = tl.program_id(0).to(tl.int64)
    offs_c = tl.arange(0, BLOCK_C)
    offs_k = tl.arange(0, BLOCK_K)
    neg = float("-inf")
    big = 2147483647
    m = tl.max(tl.full((BLOCK_C,), neg, dtype=tl.float32), axis=0)  # running max (scalar)
    s = tl.sum(tl.zeros((BLOCK_C,), dtype=tl.float32), axis=0)  # running sum of exp(x - m)
    top_v = tl.full((BLOCK_K,), neg, dtype=tl.float32)  # best logits so far, descending
    top_i = tl.full((BLOCK_K,), big, dtype=tl.int32)
    for c0 in range(0, E, BLOCK_C):
        ids_c = c0 + offs_c
        x = tl.load(logits_ptr + token * stride_lt + ids_c * stride_le, mask=ids_c < E,
                    other=neg).to(tl.float32)  # fmt: skip
        new_m = tl.maximum(m, tl.max(x, axis=0))
        s = s * tl.exp(m - new_m) + tl.sum(tl.exp(x - new_m), axis=0)
        m = new_m
        # merge: k rounds of max over (buffer, chunk); buffer ids are lower than chunk ids
        work_b = top_v
        work_c = x
        new_v = tl.full((BLOCK_K,), neg, dtype=tl.float32)
        new_i = tl.full((BLOCK_K,), big, dtype=tl.int32)
        for j in tl.static_range(TOP_K):
            best = tl.maximum(tl.max(work_b, axis=0), tl.max(work_c, axis=0))
            from_b = tl.min(tl.where(work_b == best, top_i, big), axis=0)
            from_c = tl.min(tl.where(work_c == best, ids_c, big), axis=0)
            idx = tl.minimum(from_b, from_c)
            new_v = tl.where(offs_k == j, best, new_v)
            new_i = tl.where(offs_k == j, idx, new_i)
            work_b = tl.where(top_i == idx, neg, work_b)
            work_c = tl.where(ids_c == idx, neg, work_c)
        top_v = new_v
        top_i = new_i

    mask_k = offs_k < TOP_K
    top_w = tl.where(mask_k, tl.exp(top_v - m) / s, 0.0)
    if RENORMALIZE:
        top_w = top_w / tl.sum(top_w, axis=0)
    tl.store(weights_ptr + token * TOP_K + offs_k, top_w, mask=mask_k)
    tl.store(ids_ptr + token * TOP_K + offs_k, top_i, mask=mask_k)


def moe_topk_gating_softmax_rowwise_iterative(
    gating_output: torch.Tensor,
    top_k: int,
    renormalize: bool = False,
    *,
    block_c: int | None = None,
    num_warps: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return the top-k softmax routing weights and expert ids of every token.

    Args:
        gating_output: (T, E) fp32/bf16/fp16 router logits, any strides, no -inf entries.
        top_k: Experts per token, 1 <= top_k <= min(32, E).
        renormalize: Divide the k weights by their sum.
        block_c: Logits per chunk (power of two, raised to next_power_of_2(top_k)); None = 128.
        num_warps: Warps per program; None = 4.

    Returns:
        topk_weights: (T, top_k) fp32, descending per row.
        topk_ids: (T, top_k) int32, ties to the lower expert id.

    Raises:
        ValueError: The shape, dtype, top_k or block_c do not fit.
    """
    if gating_output.dim() != 2 or not gating_output.dtype.is_floating_point:
        raise ValueError(
            f"need float gating_output (T, E); got {tuple(gating_output.shape)} "
            f"{gating_output.dtype}"
        )
    t, e = gating_output.shape
    if not 1 <= top_k <= min(MAX_TOP_K, e):
        raise ValueError(f"need 1 <= top_k <= min({MAX_TOP_K}, E={e}); got top_k={top_k}")
    bc = block_c or 128
    if bc & (bc - 1):
        raise ValueError(f"block_c must be a power of two; got {bc}")
    block_k = triton.next_power_of_2(top_k)
    weights = torch.empty((t, top_k), dtype=torch.float32, device=gating_output.device)
    ids = torch.empty((t, top_k), dtype=torch.int32, device=gating_output.device)
    if t == 0:
        return weights, ids
    _topk_streaming_kernel[(t,)](
        gating_output, weights, ids, e, gating_output.stride(0), gating_output.stride(1),
        TOP_K=top_k, BLOCK_K=block_k, BLOCK_C=max(bc, block_k), RENORMALIZE=renormalize,
        num_warps=num_warps or 4,
    )  # fmt: skip
    return weights, ids


def reference(
    gating_output: torch.Tensor, top_k: int, renormalize: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return torch.topk of the fp32 softmax (sorted), optionally renormalised over the k."""
    probs = torch.softmax(gating_output.float(), dim=-1)
    weights, ids = probs.topk(top_k, dim=-1, largest=True, sorted=True)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights, ids.to(torch.int32)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return inputs for ``{"tokens", "experts", "top_k"}`` (+ optional ``"renormalize"``).

    Logits ~ N(0, 1) in ``dtype`` (continuous, so ties have probability zero in fp32).
    """
    logits = torch.randn(shape["tokens"], shape["experts"], device=device).to(dtype)
    return {"gating_output": logits, "top_k": shape["top_k"],
            "renormalize": shape.get("renormalize", False)}  # fmt: skip
