"""
---
id: moe_count_and_sort_sort_based
title: MoE count-and-sort by per-block tl.sort of packed (expert, flat index) keys and a rank merge
op_family: moe
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [int32]
bound: latency
techniques: [packed-key-sort, bitonic-sort, merge-by-rank, binary-search, deterministic-order]
status: reference
launcher: moe_count_and_sort_sort_based
tuning:
  chunk: [128, 32, 512]
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
atrex30's moe_count_and_sort as a real sort. Every pair f = t * k + j becomes one int32 key
expert * N + f (unique, and ascending keys are exactly the stable expert order). Kernel 1: program
p sorts its CHUNK keys in registers with tl.sort (a bitonic network) and writes the sorted block to
a (P, CHUNK) scratch. Kernel 2 merges without a tree of passes: a key's final position is its lane
in its own sorted block plus, for every other block, the number of that block's keys below it,
found by a vectorised binary search (log2(CHUNK) + 1 gathered probes per lane and block); the flat
index (key mod N) is stored there. One extra program of kernel 2 ranks the probe keys e * N for
every expert e (and e + 1) the same way, which gives cumsum[e] and counts[e] directly, without a
histogram. Out-of-range ids sort after every valid key and are dropped. Bytes: ids read once, the
scratch written once and probed P * log2(CHUNK) times per key (L2 resident); no atomics, the order
is deterministic. When it wins: very many experts (E in the thousands, where histograms need E-wide
registers) and moderate N; the key does not depend on E's size beyond E * N < 2^31. Limits: the
merge costs P^2 * CHUNK * log2(CHUNK) probes, so long prefills (P in the thousands) should use the
histogram or two-kernel designs; E * N must stay below 2^31 (checked).
"""

import torch
import triton
import triton.language as tl

KEY_LIMIT = 2**31 - 1


@triton.jit
def _sort_blocks_kernel(ids_ptr, blocks_ptr, N, E, CHUNK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * CHUNK + tl.arange(0, CHUNK)
    mask = offs < N
    ids = tl.load(ids_ptr + offs, mask=mask, other=E)
    ids = tl.where((ids >= 0) & (ids < E), ids, E)  # bad ids sort after every valid key
    keys = tl.where(mask, ids * N + offs, 2147483647)
    tl.store(blocks_ptr + offs, tl.sort(keys))


@triton.jit
def _count_below(block_ptr, probe, CHUNK: tl.constexpr, LOG_STEPS: tl.constexpr):
    # lower bound: how many of the CHUNK sorted keys at block_ptr are < probe (per lane)
    lo = tl.zeros(probe.shape, dtype=tl.int32)
    hi = tl.full(probe.shape, CHUNK, dtype=tl.int32)
    for _ in tl.static_range(LOG_STEPS):
        mid = (lo + hi) // 2
        val = tl.load(block_ptr + mid, mask=mid < CHUNK, other=2147483647)
        below = (val < probe) & (lo < hi)
        lo = tl.where(below, mid + 1, lo)
        hi = tl.where(below | (lo >= hi), hi, mid)
    return lo


@triton.jit
def _merge_by_rank_kernel(
    blocks_ptr, sorted_ptr, counts_ptr, cumsum_ptr,
    N, E, P,
    CHUNK: tl.constexpr, BLOCK_E: tl.constexpr, LOG_STEPS: tl.constexpr,
):  # fmt: skip
    pid = tl.program_id(0)
    if pid < P:
        lane = tl.arange(0, CHUNK)
        keys = tl.load(blocks_ptr + pid * CHUNK + lane)
        pos = lane
        for q in range(0, P):
            if q != pid:
                pos += _count_below(blocks_ptr + q * CHUNK, keys, CHUNK, LOG_STEPS)
        valid = keys < E * N
        tl.store(sorted_ptr + pos, keys % N, mask=valid)
    else:  # the extra program: cumsum[e] = number of keys below e * N
        offs_e = tl.arange(0, BLOCK_E)
        lo_probe = offs_e * N
        start = tl.zeros((BLOCK_E,), dtype=tl.int32)
        end = tl.zeros((BLOCK_E,), dtype=tl.int32)
        for q in range(0, P):
            start += _count_below(blocks_ptr + q * CHUNK, lo_probe, CHUNK, LOG_STEPS)
            end += _count_below(blocks_ptr + q * CHUNK, lo_probe + N, CHUNK, LOG_STEPS)
        tl.store(cumsum_ptr + offs_e, start, mask=offs_e <= E)
        tl.store(counts_ptr + offs_e, end - start, mask=offs_e < E)


def moe_count_and_sort_sort_based(
    topk_ids: torch.Tensor,
    num_experts: int,
    *,
    chunk: int | None = None,
    num_warps: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Return (sorted_token_ids, expert_token_counts, cumsum) of the routed pairs.

    Args:
        topk_ids: (T, k) int32 expert ids in [0, num_experts).
        num_experts: Number of experts E (>= 1); (E + 1) * T * k must stay below 2^31.
        chunk: Keys sorted per program (power of two >= 2); None = 128.
        num_warps: Warps per program; None = 4.

    Returns:
        sorted_token_ids: (T*k,) int32 flat indices grouped by expert, ascending within each.
        expert_token_counts: (E,) int32.
        cumsum: (E + 1,) int32 exclusive prefix sum of the counts, cumsum[0] = 0.

    Raises:
        ValueError: topk_ids is not a 2D int32 tensor, num_experts < 1, the packed keys would
            overflow int32, or chunk is not a power of two >= 2.
    """
    if topk_ids.dim() != 2 or topk_ids.dtype != torch.int32:
        raise ValueError(
            f"need int32 topk_ids (T, k); got {tuple(topk_ids.shape)} {topk_ids.dtype}"
        )
    if num_experts < 1:
        raise ValueError(f"num_experts must be at least 1; got {num_experts}")
    n = topk_ids.numel()
    if (num_experts + 1) * n >= KEY_LIMIT:
        raise ValueError(
            f"(num_experts + 1) * T * k = {(num_experts + 1) * n} overflows the int32 sort key; "
            "use moe_count_and_sort_two_kernel"
        )
    ch = chunk or 128
    if ch & (ch - 1) or ch < 2:
        raise ValueError(f"chunk must be a power of two >= 2; got {ch}")
    device = topk_ids.device
    sorted_ids = torch.full((n,), -1, dtype=torch.int32, device=device)
    counts = torch.zeros((num_experts,), dtype=torch.int32, device=device)
    cumsum = torch.zeros((num_experts + 1,), dtype=torch.int32, device=device)
    if n == 0:
        return sorted_ids, counts, cumsum
    p = triton.cdiv(n, ch)
    blocks = torch.empty((p * ch,), dtype=torch.int32, device=device)
    warps = num_warps or 4
    _sort_blocks_kernel[(p,)](topk_ids.contiguous(), blocks, n, num_experts, CHUNK=ch,
                              num_warps=warps)  # fmt: skip
    _merge_by_rank_kernel[(p + 1,)](
        blocks, sorted_ids, counts, cumsum, n, num_experts, p,
        CHUNK=ch, BLOCK_E=triton.next_power_of_2(num_experts + 1),
        LOG_STEPS=ch.bit_length(), num_warps=warps,
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
