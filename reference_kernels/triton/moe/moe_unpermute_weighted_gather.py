"""
---
id: moe_unpermute_weighted_gather
title: MoE unpermute by gather, invert the padded expert-major order then weighted top-k row sums
op_family: moe
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [inverse-permutation, row-gather, no-atomics, deterministic-combine,
  unrolled-slot-loop, fp32-accumulate, padding-sentinel]
status: reference
launcher: moe_unpermute_weighted_gather
tuning:
  block_t: [4, 1, 8]
  block_h: [512, 128, 2048]
  num_warps: [4, 2, 8]
args:
  permuted: {shape: [P, H], dtypes: [bf16, fp16, fp32], aliases: [expert_outputs, intermediate]}
  sorted_token_ids: {shape: [P], dtypes: [int32], aliases: [sorted_ids]}
  topk_weights: {shape: [T, TOPK], dtypes: [fp32], aliases: [routing_weights]}
returns:
  - {name: out, shape: [T, H], dtype: permuted}
problem:
  shapes: [{tokens: 5, top_k: 3, experts: 4, hidden: 100, block_size: 4}, {tokens: 2, top_k: 1, experts: 3, hidden: 33, block_size: 8}]
  dtypes: [fp32, bf16]
measured: []
---
The combine after an expert-major grouped GEMM: row p of ``permuted`` (P, H) is the expert output
of the flat (token, slot) pair sorted_token_ids[p] = t * k + j (moe_align_block_size's layout,
padding rows carry the sentinel T * k and are ignored), and out[t] = sum_j topk_weights[t, j] *
permuted[row of (t, j)] in the rows' dtype. Instead of scattering rows into the output with
atomics (order-free, not deterministic, and an fp32 buffer plus a cast), launch 1 inverts the
permutation: one program per 1024 rows writes row_of_pair[sorted_token_ids[p]] = p (T*k int32, a
few KB). Launch 2 is a pure gather: each program owns (BLOCK_T tokens x BLOCK_H columns), reads the
k row indices and weights of its tokens, and sums the k gathered rows in fp32 in slot order (an
unrolled loop, TOP_K constexpr, so all k row loads are in flight), rounding once at the store.
Every output element is written exactly once by one program, so the result is bitwise
reproducible. Bytes: k row reads plus one write per output element (2 B each in bf16) plus 8 B per
pair of index and weight; the padding rows are never read. Limits: rows of one token are scattered
over the permuted buffer, so each load is a separate H-contiguous row segment (fine for H >= 256);
a pair absent from sorted_token_ids (an id that was dropped) reads as zero.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _invert_kernel(sorted_ptr, row_of_pair_ptr, P, NUM_PAIRS, BLOCK: tl.constexpr):
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    pair = tl.load(sorted_ptr + rows, mask=rows < P, other=NUM_PAIRS)
    ok = (pair >= 0) & (pair < NUM_PAIRS)  # the sentinel marks padding rows
    tl.store(row_of_pair_ptr + tl.where(ok, pair, 0), rows, mask=ok)


@triton.jit
def _gather_sum_kernel(
    x_ptr,  # (P, H) permuted rows
    row_of_pair_ptr,  # int32 (T * k,), -1 for a pair with no row
    w_ptr,  # (T, k) routing weights
    out_ptr,  # (T, H)
    T,
    H,
    stride_xp,
    stride_wt,
    stride_ot,
    TOP_K: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_H: tl.constexpr,
):
    offs_t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    offs_h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    mask_t = offs_t < T
    mask_h = offs_h < H
    acc = tl.zeros((BLOCK_T, BLOCK_H), dtype=tl.float32)
    for j in tl.static_range(TOP_K):
        row = tl.load(row_of_pair_ptr + offs_t * TOP_K + j, mask=mask_t, other=-1)
        w = tl.load(w_ptr + offs_t * stride_wt + j, mask=mask_t, other=0.0).to(tl.float32)
        has_row = row >= 0
        x_ptrs = x_ptr + tl.where(has_row, row, 0)[:, None].to(tl.int64) * stride_xp
        x = tl.load(x_ptrs + offs_h[None, :], mask=has_row[:, None] & mask_h[None, :], other=0.0)
        acc += x.to(tl.float32) * w[:, None]
    out_ptrs = out_ptr + offs_t[:, None].to(tl.int64) * stride_ot + offs_h[None, :]
    tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty), mask=mask_t[:, None] & mask_h[None, :])


def moe_unpermute_weighted_gather(
    permuted: torch.Tensor,
    sorted_token_ids: torch.Tensor,
    topk_weights: torch.Tensor,
    *,
    block_t: int | None = None,
    block_h: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return out[t] = sum_j topk_weights[t, j] * permuted[row of pair t * k + j].

    Args:
        permuted: (P, H) bf16/fp16/fp32 expert outputs in sorted_token_ids' row order, H contiguous.
        sorted_token_ids: (P,) int32 flat pair index of each row; values >= T * k are padding.
        topk_weights: (T, k) fp32 routing weights.
        block_t: Tokens per program (power of two); None = 4 (fewer for tiny T).
        block_h: Columns per program (power of two); None = min(512, next_power_of_2(H)).
        num_warps: Warps per program; None = 4.

    Returns:
        out: (T, H) in ``permuted``'s dtype, contiguous.

    Raises:
        ValueError: The shapes, dtypes or tiles do not fit.
    """
    if permuted.dim() != 2 or sorted_token_ids.dim() != 1 or topk_weights.dim() != 2:
        raise ValueError(
            f"need permuted (P, H), sorted_token_ids (P,), topk_weights (T, k); got "
            f"{tuple(permuted.shape)}, {tuple(sorted_token_ids.shape)}, {tuple(topk_weights.shape)}"
        )
    if sorted_token_ids.shape[0] != permuted.shape[0] or sorted_token_ids.dtype != torch.int32:
        raise ValueError(
            f"need int32 sorted_token_ids with one entry per permuted row ({permuted.shape[0]}); "
            f"got {sorted_token_ids.dtype} {tuple(sorted_token_ids.shape)}"
        )
    p, h = permuted.shape
    t, k = topk_weights.shape
    bt = block_t or max(1, min(4, triton.next_power_of_2(max(t, 1))))
    bh = block_h or min(512, triton.next_power_of_2(max(h, 1)))
    if bt & (bt - 1) or bh & (bh - 1):
        raise ValueError(f"block_t and block_h must be powers of two; got {bt}, {bh}")
    out = torch.empty((t, h), dtype=permuted.dtype, device=permuted.device)
    if t == 0 or h == 0:
        return out
    x = permuted if permuted.stride(1) == 1 else permuted.contiguous()
    row_of_pair = torch.full((t * k,), -1, dtype=torch.int32, device=permuted.device)
    if p:
        _invert_kernel[(triton.cdiv(p, 1024),)](
            sorted_token_ids.contiguous(), row_of_pair, p, t * k, BLOCK=1024
        )
    _gather_sum_kernel[(triton.cdiv(t, bt), triton.cdiv(h, bh))](
        x, row_of_pair, topk_weights, out,
        t, h, x.stride(0), topk_weights.stride(0), out.stride(0),
        TOP_K=k, BLOCK_T=bt, BLOCK_H=bh, num_warps=num_warps or 4,
    )  # fmt: skip
    return out


def reference(
    permuted: torch.Tensor, sorted_token_ids: torch.Tensor, topk_weights: torch.Tensor
) -> torch.Tensor:
    """Return the weighted combine in fp32 by index_add over the non-padding rows."""
    t, k = topk_weights.shape
    ids = sorted_token_ids.long()
    keep = ids < t * k
    rows = permuted.float()[keep] * topk_weights.float().reshape(-1)[ids[keep]][:, None]
    out = torch.zeros(t, permuted.shape[1], device=permuted.device)
    out.index_add_(0, ids[keep] // k, rows)
    return out.to(permuted.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return inputs for ``{"tokens", "top_k", "experts", "hidden", "block_size"}``.

    The pairs get random experts and are laid out expert-major with padding to block_size (the
    sentinel T * k), as moe_align_block_size would, in a buffer of its worst-case length T * k +
    E * (block_size - 1) (the tail is padding too), so every seed gives the same shapes; padding
    rows hold garbage (must be ignored).
    """
    t, k, e = shape["tokens"], shape["top_k"], shape["experts"]
    h, bs = shape["hidden"], shape["block_size"]
    flat = torch.randint(0, e, (t * k,), device=device)
    capacity = t * k + e * (bs - 1)
    sorted_ids = torch.full((capacity,), t * k, dtype=torch.int32, device=device)
    used = 0
    for expert in range(e):
        pairs = (flat == expert).nonzero().flatten().to(torch.int32)
        sorted_ids[used : used + pairs.numel()] = pairs
        used += pairs.numel() + (-pairs.numel()) % bs
    permuted = (torch.randn(capacity, h, device=device) * 0.02).to(dtype)
    permuted[sorted_ids == t * k] = 100.0  # garbage in padding rows
    weights = torch.softmax(torch.randn(t, k, device=device), dim=-1)
    return {"permuted": permuted, "sorted_token_ids": sorted_ids, "topk_weights": weights}
