"""
---
id: moe_count_and_sort_histogram
title: MoE count-and-sort by atomic expert histogram, one-program scan, per-expert stable compaction
op_family: moe
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [int32]
bound: latency
techniques: [atomic-histogram, prefix-sum, stream-compaction, expert-parallel, deterministic-order]
status: reference
launcher: moe_count_and_sort_histogram
tuning:
  chunk: [1024, 128, 256, 4096]
  num_warps: [4, 1, 2, 8]
args:
  topk_ids: {shape: [T, TOPK], dtypes: [int32], aliases: [selected_experts]}
  num_experts: {type: int, aliases: [n_experts, experts, n_routed_experts]}
returns:
  - {name: sorted_token_ids, shape: [T * TOPK], dtype: int32}
  - {name: expert_token_counts, shape: [num_experts], dtype: int32}
  - {name: cumsum, shape: [num_experts + 1], dtype: int32}
problem:
  shapes: [{tokens: 13, top_k: 4, num_experts: 10}, {tokens: 1, top_k: 8, num_experts: 128}]
  dtypes: [int32]
measured: []
---
Groups the T*k routed (token, slot) pairs by expert without padding (atrex30's moe_count_and_sort):
sorted_token_ids lists, expert by expert in ascending order, the ascending flat indices f = t * k +
j that chose it; expert_token_counts[e] counts them; cumsum (E + 1) is their exclusive prefix sum.
Three launches: (1) programs over CHUNK flat indices add 1 to counts[e] with tl.atomic_add on a
vector of expert ids (duplicates inside a vector are summed by the atomics), so the histogram costs
one read of topk_ids; (2) one program loads the E counts and writes cumsum with tl.cumsum; (3) one
program per expert walks topk_ids in CHUNK-sized pieces, marks the pairs that chose it, turns the
mask into write positions with an inclusive scan, and writes the matching flat indices at cumsum[e]
+ the running count. Step 3 is a stream compaction per expert, so the output is in the stable order
a reference argsort gives (no atomics decide positions) and needs no per-chunk table. Bytes:
topk_ids is read once by (1) and E times by (3), from L2 when T*k*4 B fits (up to ~10M pairs on an
H100's 50 MB); the E programs run in parallel. When it wins: decode and medium batches (T*k up to
~64K) with E <= 256, where one pass per expert is short. Limits: for long prefills the E-fold
re-read dominates (prefer moe_align_block_size_sort's chunk histograms); ids outside [0, E) are
dropped from the counts and the sort (the outputs are then not a permutation).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _count_kernel(ids_ptr, counts_ptr, N, E, CHUNK: tl.constexpr):
    offs = tl.program_id(0) * CHUNK + tl.arange(0, CHUNK)
    e = tl.load(ids_ptr + offs, mask=offs < N, other=-1)
    ok = (e >= 0) & (e < E)
    tl.atomic_add(counts_ptr + tl.where(ok, e, 0), tl.full((CHUNK,), 1, tl.int32), mask=ok)


@triton.jit
def _scan_kernel(counts_ptr, cumsum_ptr, E, BLOCK_E: tl.constexpr):
    offs = tl.arange(0, BLOCK_E)
    counts = tl.load(counts_ptr + offs, mask=offs < E, other=0)
    tl.store(cumsum_ptr + 1 + offs, tl.cumsum(counts, axis=0), mask=offs < E)
    tl.store(cumsum_ptr, 0)


@triton.jit
def _compact_kernel(ids_ptr, cumsum_ptr, sorted_ptr, N, CHUNK: tl.constexpr):
    expert = tl.program_id(0)
    base = tl.load(cumsum_ptr + expert)  # where this expert's run starts
    for start in range(0, N, CHUNK):
        offs = start + tl.arange(0, CHUNK)
        e = tl.load(ids_ptr + offs, mask=offs < N, other=-1)
        hit = (e == expert).to(tl.int32)
        pos = base + tl.cumsum(hit, axis=0) - hit  # exclusive scan: stable, ascending
        tl.store(sorted_ptr + pos, offs, mask=hit != 0)
        base += tl.sum(hit, axis=0)


def moe_count_and_sort_histogram(
    topk_ids: torch.Tensor,
    num_experts: int,
    *,
    chunk: int | None = None,
    num_warps: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Count the pairs routed to each expert and list their flat indices grouped by expert.

    Args:
        topk_ids: (T, k) int32 expert ids in [0, num_experts), contiguous.
        num_experts: Number of experts E.
        chunk: Flat indices per program step (power of two); None = 1024 (fewer for tiny inputs).
        num_warps: Warps per program; None = 4.

    Returns:
        (sorted_token_ids (T * k,), expert_token_counts (E,), cumsum (E + 1,)), all int32; expert
        e's pairs are sorted_token_ids[cumsum[e]:cumsum[e + 1]], ascending.

    Raises:
        ValueError: topk_ids is not a contiguous 2D int32 tensor, num_experts < 1, or chunk is not
            a power of two.
    """
    if topk_ids.dim() != 2 or topk_ids.dtype != torch.int32 or not topk_ids.is_contiguous():
        raise ValueError(
            f"need topk_ids as a contiguous (T, k) int32 tensor; got {topk_ids.dtype} "
            f"{tuple(topk_ids.shape)}"
        )
    if num_experts < 1:
        raise ValueError(f"num_experts must be at least 1; got {num_experts}")
    n = topk_ids.numel()
    ch = chunk or min(1024, triton.next_power_of_2(max(n, 16)))
    if ch & (ch - 1):
        raise ValueError(f"chunk must be a power of two; got {ch}")
    device, warps = topk_ids.device, num_warps or 4
    sorted_ids = torch.empty((n,), dtype=torch.int32, device=device)
    counts = torch.zeros((num_experts,), dtype=torch.int32, device=device)
    cumsum = torch.empty((num_experts + 1,), dtype=torch.int32, device=device)
    if n:
        _count_kernel[(triton.cdiv(n, ch),)](
            topk_ids, counts, n, num_experts, CHUNK=ch, num_warps=warps
        )
    block_e = triton.next_power_of_2(num_experts)
    _scan_kernel[(1,)](counts, cumsum, num_experts, BLOCK_E=block_e, num_warps=warps)
    if n:
        _compact_kernel[(num_experts,)](topk_ids, cumsum, sorted_ids, n, CHUNK=ch, num_warps=warps)
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
