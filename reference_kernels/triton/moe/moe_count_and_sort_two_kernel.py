"""
---
id: moe_count_and_sort_two_kernel
title: MoE count-and-sort in two launches, per-chunk histogram table then offsets and ranked scatter
op_family: moe
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [int32]
bound: latency
techniques: [chunk-histogram, atomic-free, prefix-sum, pairwise-rank, deterministic-order]
status: reference
launcher: moe_count_and_sort_two_kernel
tuning:
  chunk: [128, 32, 256]
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
atrex30's moe_count_and_sort without atomics in two launches. Kernel 1: program p histograms its
CHUNK flat ids with tl.histogram into row p of a (P, BLOCK_E) int32 table (BLOCK_E =
next_power_of_2(E + 1); bin E collects masked and out-of-range lanes). Kernel 2, again one program
per chunk: it sums the table's rows (all P for the totals, the first p for its own chunk's prefix),
turns the totals into the exclusive prefix sum with tl.cumsum, so its chunk's first pair of expert e
goes to cumsum[e] + (pairs of e in earlier chunks); within the chunk, a pair's rank among the
earlier pairs of the same expert is a row sum of a CHUNK x CHUNK equality-and-before matrix, and
its base offset a row sum of a CHUNK x BLOCK_E one-hot select; then one scatter of the flat
indices. Program 0 also writes counts and cumsum. The order is the stable argsort order and
identical on every run. Bytes: ids read twice, the table P * BLOCK_E * 4 B written once and read P
times (from L2). When it wins: mid-size batches (N = T*k in the thousands to ~100K) where the table
stays in L2 and the per-expert re-reads of the histogram design cost more. Limits: kernel 2 reads
P table rows per program (P^2 work overall), the rank matrix is CHUNK^2 lanes (keep CHUNK <= 256),
E is bounded by BLOCK_E registers per lane row; ids outside [0, E) are dropped (slots stay -1).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _chunk_histogram_kernel(ids_ptr, table_ptr, N, E, CHUNK: tl.constexpr,
                            BLOCK_E: tl.constexpr):  # fmt: skip
    pid = tl.program_id(0)
    offs = pid * CHUNK + tl.arange(0, CHUNK)
    ids = tl.load(ids_ptr + offs, mask=offs < N, other=E)
    ids = tl.where((ids >= 0) & (ids < E), ids, E)  # spare bin E for padding and bad ids
    hist = tl.histogram(ids, BLOCK_E)
    tl.store(table_ptr + pid * BLOCK_E + tl.arange(0, BLOCK_E), hist)


@triton.jit
def _offsets_scatter_kernel(
    ids_ptr, table_ptr, sorted_ptr, counts_ptr, cumsum_ptr,
    N, E, P,
    CHUNK: tl.constexpr, BLOCK_E: tl.constexpr,
):  # fmt: skip
    pid = tl.program_id(0)
    offs_e = tl.arange(0, BLOCK_E)
    total = tl.zeros((BLOCK_E,), dtype=tl.int32)
    before = tl.zeros((BLOCK_E,), dtype=tl.int32)
    for q in range(0, P):
        row = tl.load(table_ptr + q * BLOCK_E + offs_e)
        total += row
        before += tl.where(q < pid, row, 0)
    start = tl.cumsum(total, axis=0) - total  # exclusive prefix; start[E] = valid pair count
    if pid == 0:
        tl.store(counts_ptr + offs_e, total, mask=offs_e < E)
        tl.store(cumsum_ptr + offs_e, start, mask=offs_e <= E)
    base = start + before

    lane = tl.arange(0, CHUNK)
    offs = pid * CHUNK + lane
    ids = tl.load(ids_ptr + offs, mask=offs < N, other=E)
    ids = tl.where((ids >= 0) & (ids < E), ids, E)
    same_before = (ids[:, None] == ids[None, :]) & (lane[None, :] < lane[:, None])
    rank = tl.sum(same_before.to(tl.int32), axis=1)
    mine = tl.sum(tl.where(ids[:, None] == offs_e[None, :], base[None, :], 0), axis=1)
    tl.store(sorted_ptr + mine + rank, offs, mask=(offs < N) & (ids < E))


def moe_count_and_sort_two_kernel(
    topk_ids: torch.Tensor,
    num_experts: int,
    *,
    chunk: int | None = None,
    num_warps: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Return (sorted_token_ids, expert_token_counts, cumsum) of the routed pairs.

    Args:
        topk_ids: (T, k) int32 expert ids in [0, num_experts).
        num_experts: Number of experts E (>= 1).
        chunk: Flat ids per program (power of two, <= 256); None = 128.
        num_warps: Warps per program; None = 4.

    Returns:
        sorted_token_ids: (T*k,) int32 flat indices grouped by expert, ascending within each.
        expert_token_counts: (E,) int32.
        cumsum: (E + 1,) int32 exclusive prefix sum of the counts, cumsum[0] = 0.

    Raises:
        ValueError: topk_ids is not a 2D int32 tensor, num_experts < 1, or chunk is not a power
            of two in [1, 256].
    """
    if topk_ids.dim() != 2 or topk_ids.dtype != torch.int32:
        raise ValueError(
            f"need int32 topk_ids (T, k); got {tuple(topk_ids.shape)} {topk_ids.dtype}"
        )
    if num_experts < 1:
        raise ValueError(f"num_experts must be at least 1; got {num_experts}")
    ch = chunk or 128
    if ch & (ch - 1) or not 1 <= ch <= 256:
        raise ValueError(f"chunk must be a power of two in [1, 256]; got {ch}")
    n = topk_ids.numel()
    device = topk_ids.device
    sorted_ids = torch.full((n,), -1, dtype=torch.int32, device=device)
    counts = torch.zeros((num_experts,), dtype=torch.int32, device=device)
    cumsum = torch.zeros((num_experts + 1,), dtype=torch.int32, device=device)
    if n == 0:
        return sorted_ids, counts, cumsum
    ids = topk_ids.contiguous()
    block_e = triton.next_power_of_2(num_experts + 1)
    p = triton.cdiv(n, ch)
    table = torch.empty((p, block_e), dtype=torch.int32, device=device)
    warps = num_warps or 4
    _chunk_histogram_kernel[(p,)](
        ids, table, n, num_experts, CHUNK=ch, BLOCK_E=block_e, num_warps=warps
    )
    _offsets_scatter_kernel[(p,)](
        ids, table, sorted_ids, counts, cumsum, n, num_experts, p,
        CHUNK=ch, BLOCK_E=block_e, num_warps=warps,
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
