"""
---
id: moe_count_and_sort_single_program
title: MoE count-and-sort in one program, every pair in registers, expert loop of masked scans
op_family: moe
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [int32]
bound: latency
techniques: [single-program, register-resident, prefix-sum, stream-compaction, deterministic-order]
status: reference
launcher: moe_count_and_sort_single_program
tuning:
  num_warps: [4, 1, 8]
args:
  topk_ids: {shape: [T, TOPK], dtypes: [int32], aliases: [selected_experts]}
  num_experts: {type: int, aliases: [n_experts, experts, n_routed_experts]}
returns:
  - {name: sorted_token_ids, shape: [T * TOPK], dtype: int32}
  - {name: expert_token_counts, shape: [num_experts], dtype: int32}
  - {name: cumsum, shape: [num_experts + 1], dtype: int32}
problem:
  shapes: [{tokens: 13, top_k: 4, num_experts: 10}, {tokens: 1, top_k: 8, num_experts: 128}]
  dtypes: []
measured: []
---
atrex30's moe_count_and_sort for decode-size batches in a single launch of a single program: it
loads all N = T*k expert ids into registers once (BLOCK_N = next_power_of_2(N) lanes, at most
8192), then walks the experts in order; for expert e it forms the hit mask ids == e, its inclusive
tl.cumsum gives each hit its rank within the expert, the running total (the exclusive prefix sum,
also stored as cumsum[e]) gives the expert's base, and the destination of every hit is kept in a
register vector; counts[e] and cumsum[e + 1] are stored as it goes. One masked scatter of the flat
indices to their destinations ends the program. No atomics, no second launch, no global scratch:
the output order is the stable argsort order. Work: E masked scans over N lanes (E * N lane-ops, a
few microseconds for N <= 2K and E <= 256), bytes: N ids read once, N + 2E + 1 int32 written. When
it wins: decode batches (T <= 64, N in the hundreds) where the histogram and sort designs spend
their time on three launches. Limits: one SM does all the work, so cost grows as E * N; N above
8192 is refused (use moe_count_and_sort_histogram or the two-kernel design); ids outside [0, E)
are dropped (their slots in sorted_token_ids stay -1).
"""

import torch
import triton
import triton.language as tl

MAX_PAIRS = 8192


@triton.jit
def _count_and_sort_one_program_kernel(
    ids_ptr,  # int32 (N,), contiguous
    sorted_ptr,  # int32 (N,)
    counts_ptr,  # int32 (E,)
    cumsum_ptr,  # int32 (E + 1,)
    N,
    E,
    BLOCK_N: tl.constexpr,
):
    offs = tl.arange(0, BLOCK_N)
    mask = offs < N
    ids = tl.load(ids_ptr + offs, mask=mask, other=-1)
    dest = tl.full((BLOCK_N,), -1, dtype=tl.int32)
    base = tl.sum(tl.zeros((BLOCK_N,), dtype=tl.int32), axis=0)  # running exclusive prefix
    tl.store(cumsum_ptr, base)
    for e in range(0, E):
        hit = (ids == e).to(tl.int32)
        rank = tl.cumsum(hit, axis=0)  # inclusive: 1 for the first hit
        dest = tl.where(hit != 0, base + rank - 1, dest)
        count = tl.sum(hit, axis=0)
        tl.store(counts_ptr + e, count)
        base += count
        tl.store(cumsum_ptr + e + 1, base)
    tl.store(sorted_ptr + dest, offs, mask=mask & (dest >= 0))


def moe_count_and_sort_single_program(
    topk_ids: torch.Tensor,
    num_experts: int,
    *,
    num_warps: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Return (sorted_token_ids, expert_token_counts, cumsum) of the routed pairs, one launch.

    Args:
        topk_ids: (T, k) int32 expert ids in [0, num_experts), T * k <= 8192.
        num_experts: Number of experts E (>= 1).
        num_warps: Warps of the one program; None = 4.

    Returns:
        sorted_token_ids: (T*k,) int32 flat indices grouped by expert, ascending within each.
        expert_token_counts: (E,) int32.
        cumsum: (E + 1,) int32 exclusive prefix sum of the counts, cumsum[0] = 0.

    Raises:
        ValueError: topk_ids is not a 2D int32 tensor, it has more than 8192 pairs, or
            num_experts < 1.
    """
    if topk_ids.dim() != 2 or topk_ids.dtype != torch.int32:
        raise ValueError(
            f"need int32 topk_ids (T, k); got {tuple(topk_ids.shape)} {topk_ids.dtype}"
        )
    n = topk_ids.numel()
    if n > MAX_PAIRS:
        raise ValueError(
            f"topk_ids has {n} pairs; this single-program design holds at most {MAX_PAIRS} "
            "in registers (use moe_count_and_sort_two_kernel for larger batches)"
        )
    if num_experts < 1:
        raise ValueError(f"num_experts must be at least 1; got {num_experts}")
    device = topk_ids.device
    sorted_ids = torch.full((n,), -1, dtype=torch.int32, device=device)
    counts = torch.zeros((num_experts,), dtype=torch.int32, device=device)
    cumsum = torch.zeros((num_experts + 1,), dtype=torch.int32, device=device)
    if n == 0:
        return sorted_ids, counts, cumsum
    _count_and_sort_one_program_kernel[(1,)](
        topk_ids.contiguous(), sorted_ids, counts, cumsum, n, num_experts,
        BLOCK_N=triton.next_power_of_2(n), num_warps=num_warps or 4,
    )  # fmt: skip
    return sorted_ids, counts, cumsum


def reference(
    topk_ids: torch.Tensor, num_experts: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Return the stable argsort of the flat ids, the per-expert counts and their prefix sum."""
    flat = topk_ids.reshape(-1).long()
    counts = torch.bincount(flat, minlength=num_experts)
    cumsum = torch.zeros(num_experts + 1, dtype=torch.int32, device=flat.device)
    cumsum[1:] = torch.cumsum(counts, 0)
    return torch.argsort(flat, stable=True).to(torch.int32), counts.to(torch.int32), cumsum


def make_inputs(shape: dict, dtype: torch.dtype = torch.int32, device: str = "cpu") -> dict:
    """Return inputs for ``{"tokens", "top_k", "num_experts"}``: uniform ids (dtype unused)."""
    t, k, e = shape["tokens"], shape["top_k"], shape["num_experts"]
    ids = torch.randint(0, e, (t, k), dtype=torch.int32, device=device)
    return {"topk_ids": ids, "num_experts": e}
