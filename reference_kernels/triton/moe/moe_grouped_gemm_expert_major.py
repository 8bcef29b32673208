"""
---
id: moe_grouped_gemm_expert_major
title: MoE grouped GEMM over aligned expert-sorted row blocks, expert-major program order
op_family: moe
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: compute
techniques: [grouped-gemm, moe-align-block-size, gather-rows, expert-major-order,
  padding-block-skip, routing-weight-epilogue, fp32-accumulate]
status: reference
launcher: moe_grouped_gemm_expert_major
tuning:
  block_n: [64, 32, 128]
  block_k: [64, 32, 128]
  num_warps: [4, 2, 8]
  num_stages: [3, 2, 4]
args:
  a: {shape: [T, K], dtypes: [bf16, fp16, fp32], aliases: [hidden_states, x, hidden]}
  w: {shape: [E, N, K], like: a, layout: any, aliases: [weight, w1, b]}
  sorted_token_ids: {shape: [S], dtypes: [int32], aliases: [sorted_ids]}
  expert_ids: {shape: [NB], dtypes: [int32]}
  num_tokens_post_padded: {shape: [1], dtypes: [int32], aliases: [num_tokens_post_pad]}
  top_k: {type: int, aliases: [topk]}
  block_size: {type: int, aliases: [block_m]}
  topk_weights: {shape: [T, TOPK], dtypes: [fp32], optional: true, aliases: [routing_weights]}
returns:
  - {name: out, shape: [T*TOPK, N], dtype: a}
problem:
  shapes: [{tokens: 10, k_dim: 48, n: 40, experts: 4, top_k: 2, block_size: 16, weighted: true}, {tokens: 3, k_dim: 100, n: 20, experts: 8, top_k: 1, block_size: 16}]
  dtypes: [fp32, bf16]
  allow_tf32: true
measured: []
---
The GEMM at the heart of sorted MoE, on its own: for every routed pair p = t * top_k + j listed in
sorted_token_ids, out[p] = a[p // top_k] @ w[e]^T (times topk_weights[t, j] if given), where the
aligned block of block_size slots holding p has expert e = expert_ids[block], exactly the layout
moe_align_block_size produces (slots padded per expert to a multiple of block_size with the
sentinel T * top_k; expert id -1 marks a block to skip, as for experts on another rank). Each
program owns one (block of block_size sorted slots, BLOCK_N columns) tile: it gathers its rows of a
through the slot ids, runs the K loop as tl.dot against that expert's (BLOCK_N, BLOCK_K) weight
tiles, applies the routing weight in fp32 and scatters rows back to their pair index. The grid is
expert-major: program ids run over the row blocks fastest within one column tile, and the blocks of
one expert are adjacent after alignment, so consecutive programs read the same w[e] column tile
and it is served from L2 to all of that expert's blocks; blocks past num_tokens_post_padded, and
padding slots, return or mask without touching memory. FLOPs 2 * T * top_k * N * K (plus at most
block_size - 1 padded rows per expert); bytes: E * N * K weights once (L2-served thereafter), a
gathered row per slot per column tile. Limits: block_size must equal the alignment block (it is
BLOCK_M); the gather of a rows defeats vectorised TMA loads; output rows are in pair order, so a
separate combine (moe_sum_reduce) sums a token's top_k rows.
"""

import os

import torch
import triton
import triton.language as tl


@triton.jit
def _moe_grouped_gemm_kernel(
    # pointers
    a_ptr,  # (T, K)
    w_ptr,  # (E, N, K)
    sorted_ptr,  # int32 (S,) pair ids, sentinel = NUM_PAIRS
    expert_ids_ptr,  # int32 (S / BLOCK_M,)
    num_post_ptr,  # int32 (1,)
    wts_ptr,  # fp32 (NUM_PAIRS,) routing weights (unused if not HAS_WEIGHTS)
    out_ptr,  # (NUM_PAIRS, N)
    # sizes
    N,
    K,
    NUM_PAIRS,
    NUM_BLOCKS,
    # strides (elements)
    stride_at,
    stride_ak,
    stride_we,
    stride_wn,
    stride_wk,
    stride_op,
    # meta
    TOP_K: tl.constexpr,
    HAS_WEIGHTS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    UPCAST: tl.constexpr,
):
    # expert-major order: row blocks fastest, so one expert's blocks share each weight tile
    pid = tl.program_id(0)
    pid_b = pid % NUM_BLOCKS
    pid_n = pid // NUM_BLOCKS
    if pid_b * BLOCK_M >= tl.load(num_post_ptr):
        return  # a block past the padded total
    expert = tl.load(expert_ids_ptr + pid_b)
    if expert < 0:
        return  # an expert this rank does not own

    offs_s = pid_b * BLOCK_M + tl.arange(0, BLOCK_M)
    pair = tl.load(sorted_ptr + offs_s)
    mask_p = pair < NUM_PAIRS  # padding slots hold the sentinel
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_n = offs_n < N
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = (a_ptr + (pair // TOP_K).to(tl.int64)[:, None] * stride_at
              + offs_k[None, :] * stride_ak)  # fmt: skip
    w_ptrs = (w_ptr + expert.to(tl.int64) * stride_we + offs_n[None, :].to(tl.int64) * stride_wn
              + offs_k[:, None] * stride_wk)  # fmt: skip

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k_start in range(0, K, BLOCK_K):
        mask_k = offs_k < K - k_start
        a = tl.load(a_ptrs, mask=mask_p[:, None] & mask_k[None, :], other=0.0)
        w = tl.load(w_ptrs, mask=mask_k[:, None] & mask_n[None, :], other=0.0)
        if UPCAST:
            # CPU interpreter: its bf16 tl.dot is wrong, so multiply exact fp32 copies
            acc = tl.dot(a.to(tl.float32), w.to(tl.float32), acc, input_precision="ieee")
        else:
            acc = tl.dot(a, w, acc)
        a_ptrs += BLOCK_K * stride_ak
        w_ptrs += BLOCK_K * stride_wk

    if HAS_WEIGHTS:
        acc = acc * tl.load(wts_ptr + pair, mask=mask_p, other=0.0)[:, None]
    o_ptrs = out_ptr + pair.to(tl.int64)[:, None] * stride_op + offs_n[None, :]
    tl.store(o_ptrs, acc.to(out_ptr.dtype.element_ty), mask=mask_p[:, None] & mask_n[None, :])


def _interpreting() -> bool:
    """Return whether Triton runs in its CPU interpreter (it then needs fp32 tl.dot operands)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def moe_grouped_gemm_expert_major(
    a: torch.Tensor,
    w: torch.Tensor,
    sorted_token_ids: torch.Tensor,
    expert_ids: torch.Tensor,
    num_tokens_post_padded: torch.Tensor,
    top_k: int,
    block_size: int,
    topk_weights: torch.Tensor | None = None,
    *,
    block_n: int | None = None,
    block_k: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
) -> torch.Tensor:
    """Return out (T * top_k, N): row p = a[p // top_k] @ w[expert of p]^T (weighted if given).

    Args:
        a: (T, K) bf16/fp16/fp32, rows contiguous.
        w: (E, N, K) one weight per expert, same dtype, any strides.
        sorted_token_ids: int32 (S,) pair ids grouped by expert, padded with T * top_k.
        expert_ids: int32 (S / block_size,) expert of each block (-1 = skip).
        num_tokens_post_padded: int32 (1,) number of used slots in sorted_token_ids.
        top_k: Routed slots per token.
        block_size: The alignment block (rows per program; power of two >= 16).
        topk_weights: Optional fp32 (T, top_k) weights multiplied into the rows.
        block_n: Columns per program (power of two >= 16); None = 64.
        block_k: K step (power of two >= 16); None = 64.
        num_warps: Warps per program; None = 4.
        num_stages: Software-pipelining depth on the GPU; None = 3.

    Returns:
        out: (T * top_k, N) in ``a``'s dtype; rows of pairs never listed stay zero.

    Raises:
        ValueError: The shapes, dtypes or block layout do not fit.
    """
    if a.dim() != 2 or w.dim() != 3 or w.shape[2] != a.shape[1]:
        raise ValueError(f"need a (T, K) and w (E, N, K); got {tuple(a.shape)}, {tuple(w.shape)}")
    if w.dtype != a.dtype:
        raise ValueError(f"need w in a's dtype {a.dtype}; got {w.dtype}")
    if block_size < 16 or block_size & (block_size - 1):
        raise ValueError(f"block_size must be a power of two >= 16; got {block_size}")
    s = sorted_token_ids.numel()
    if s % block_size or expert_ids.numel() != s // block_size:
        raise ValueError(
            f"need len(sorted_token_ids) = {s} a multiple of block_size = {block_size} and "
            f"expert_ids of {s // block_size} blocks; got {expert_ids.numel()}"
        )
    t, k = a.shape
    n = w.shape[1]
    pairs = t * top_k
    if topk_weights is not None and (
        tuple(topk_weights.shape) != (t, top_k) or topk_weights.dtype != torch.float32
    ):
        raise ValueError(
            f"need fp32 topk_weights ({t}, {top_k}); got {tuple(topk_weights.shape)} "
            f"{topk_weights.dtype}"
        )
    out = torch.zeros((pairs, n), dtype=a.dtype, device=a.device)
    if s == 0 or n == 0:
        return out
    cfg = {"block_n": 64, "block_k": 64, "num_warps": 4, "num_stages": 3}
    given = {"block_n": block_n, "block_k": block_k, "num_warps": num_warps,
             "num_stages": num_stages}  # fmt: skip
    cfg.update({key: value for key, value in given.items() if value is not None})
    a = a if a.stride(1) == 1 else a.contiguous()
    wts = topk_weights.contiguous().view(-1) if topk_weights is not None else out
    blocks = s // block_size
    _moe_grouped_gemm_kernel[(blocks * triton.cdiv(n, cfg["block_n"]),)](
        a, w, sorted_token_ids, expert_ids, num_tokens_post_padded, wts, out,
        n, k, pairs, blocks,
        a.stride(0), a.stride(1), w.stride(0), w.stride(1), w.stride(2), out.stride(0),
        TOP_K=top_k, HAS_WEIGHTS=topk_weights is not None, BLOCK_M=block_size,
        BLOCK_N=cfg["block_n"], BLOCK_K=cfg["block_k"], UPCAST=_interpreting(),
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
    )  # fmt: skip
    return out


def reference(
    a: torch.Tensor,
    w: torch.Tensor,
    sorted_token_ids: torch.Tensor,
    expert_ids: torch.Tensor,
    num_tokens_post_padded: torch.Tensor,
    top_k: int,
    block_size: int,
    topk_weights: torch.Tensor | None = None,
) -> torch.Tensor:
    """Return the same rows computed slot by used slot in fp32, cast to a's dtype."""
    pairs = a.shape[0] * top_k
    out = torch.zeros((pairs, w.shape[1]), dtype=torch.float32, device=a.device)
    used = int(num_tokens_post_padded.item())
    for slot, pair in enumerate(sorted_token_ids[:used].tolist()):
        expert = int(expert_ids[slot // block_size])
        if pair >= pairs or expert < 0:
            continue
        row = a[pair // top_k].float() @ w[expert].float().T
        out[pair] = row * (
            topk_weights.reshape(-1)[pair].float() if topk_weights is not None else 1
        )
    return out.to(a.dtype)


def _align(topk_ids: torch.Tensor, num_experts: int, block_size: int) -> tuple[torch.Tensor, ...]:
    """Return moe_align_block_size's (sorted_token_ids, expert_ids, num_tokens_post_padded).

    As vLLM allocates them, the buffers have the worst-case length numel + E * (block_size - 1)
    (rounded up to a block) for any routing: the tail past num_tokens_post_padded holds the
    sentinel, and its blocks expert -1. So the tensor shapes depend only on the problem's sizes.
    """
    flat = topk_ids.reshape(-1).long()
    counts = torch.bincount(flat, minlength=num_experts)
    padded = (counts + block_size - 1) // block_size * block_size
    total = int(padded.sum())
    capacity = -(-(flat.numel() + num_experts * (block_size - 1)) // block_size) * block_size
    sorted_ids = torch.full((capacity,), flat.numel(), dtype=torch.int32)
    starts = torch.cumsum(padded, 0) - padded
    order = torch.argsort(flat, stable=True)
    rank = torch.arange(flat.numel()) - (torch.cumsum(counts, 0) - counts)[flat[order]]
    sorted_ids[starts[flat[order]] + rank] = order.to(torch.int32)
    expert_ids = torch.full((capacity // block_size,), -1, dtype=torch.int32)
    used = torch.repeat_interleave(torch.arange(num_experts), padded // block_size)
    expert_ids[: used.numel()] = used.to(torch.int32)
    return sorted_ids, expert_ids, torch.tensor([total], dtype=torch.int32)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return inputs for ``{"tokens", "k_dim", "n", "experts", "top_k", "block_size"}``.

    a ~ N(0, 1), w ~ N(0, 1) * K^-1/2, uniform routing aligned as moe_align_block_size does (in
    worst-case-length buffers, so every seed gives the same tensor shapes);
    ``"weighted"`` adds softmax routing weights.
    """
    t, kd, n, e, k, bs = (shape[key] for key in ("tokens", "k_dim", "n", "experts", "top_k",
                                                 "block_size"))  # fmt: skip
    ids = torch.randint(0, e, (t, k))
    sorted_ids, expert_ids, num_post = _align(ids, e, bs)
    weights = torch.softmax(torch.randn(t, k), -1).to(device) if shape.get("weighted") else None
    return {
        "a": torch.randn(t, kd, device=device).to(dtype),
        "w": (torch.randn(e, n, kd, device=device) * kd**-0.5).to(dtype),
        "sorted_token_ids": sorted_ids.to(device),
        "expert_ids": expert_ids.to(device),
        "num_tokens_post_padded": num_post.to(device),
        "top_k": k,
        "block_size": bs,
        "topk_weights": weights,
    }
