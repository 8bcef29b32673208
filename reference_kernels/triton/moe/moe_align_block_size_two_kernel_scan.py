"""
---
id: moe_align_block_size_two_kernel_scan
title: MoE align-block-size in two launches, histogram counts then one scan-and-scatter program
op_family: moe
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [int32]
bound: latency
techniques: [tl-histogram, vector-atomic-add, padded-prefix-sum, one-hot-rank-scan,
  running-cursor-scatter, padding-sentinel, two-launches]
status: reference
launcher: moe_align_block_size_two_kernel_scan
tuning:
  chunk: [64, 16, 32, 128]
  num_warps: [4, 1, 2, 8]
args:
  topk_ids: {shape: [T, TOPK], dtypes: [int32], aliases: [selected_experts]}
  block_size: {type: int, aliases: [block_m]}
  num_experts: {type: int, aliases: [n_experts, experts, n_routed_experts]}
returns:
  - {name: sorted_token_ids, shape: ['?'], dtype: int32}
  - {name: expert_ids, shape: ['?'], dtype: int32}
  - {name: num_tokens_post_pad, shape: [1], dtype: int32}
problem:
  shapes: [{tokens: 11, top_k: 4, num_experts: 9, block_size: 8}, {tokens: 1, top_k: 8, num_experts: 128, block_size: 128}]
  dtypes: []
measured: []
---
atrex30's moe_align_block_size: the T*k flat (token, slot) indices grouped by expert in ascending
order, ascending inside a group, each group padded with the sentinel T*k to a multiple of
block_size (empty experts take no block), plus each block's expert and the padded total. Two
launches. Kernel 1 (one program per CHUNK of flat indices) builds the chunk's expert histogram with
tl.histogram in registers and adds it to the global counts with one vector atomic (E adds per
program instead of one per pair). Kernel 2 is a single program that does everything else: it
rounds the counts up to blocks, scans them (tl.cumsum) into padded starts, writes the expert id of
every block, then walks the flat indices in CHUNK pieces keeping a per-expert cursor vector in
registers: a (CHUNK x E) one-hot matrix, scanned down its rows, gives each pair its rank among the
pairs of the same expert in the piece; the pair goes to start[e] + cursor[e] + rank, and the
cursor advances by the piece's histogram. Ranks come from scans, not atomics, so the order is
exactly the stable sort's. Compared with the per-expert compaction design this reads topk_ids twice
in total (not E times) and needs no third launch; compared with the chunk-table design no
(chunks x E) table goes through memory. Cost: kernel 2 does CHUNK * E compares per piece on one
SM, so it suits decode and medium batches (T*k up to tens of thousands) with E <= 512. Limits: one
program serialises long prefills; ids outside [0, E) are dropped; trimming the outputs reads the
padded total back to the host (one sync).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _align_hist_kernel(ids_ptr, counts_ptr, N, E, CHUNK: tl.constexpr, BLOCK_E: tl.constexpr):
    offs = tl.program_id(0) * CHUNK + tl.arange(0, CHUNK)
    e = tl.load(ids_ptr + offs, mask=offs < N, other=-1)
    ok = (e >= 0) & (e < E)
    hist = tl.histogram(tl.where(ok, e, BLOCK_E - 1), BLOCK_E)  # invalid ids land in a spare bin
    bins = tl.arange(0, BLOCK_E)
    # the spare bin BLOCK_E - 1 is a real expert only when E == BLOCK_E: remove the invalid ones
    hist -= tl.where(bins == BLOCK_E - 1, tl.sum((~ok).to(tl.int32), axis=0), 0)
    tl.atomic_add(counts_ptr + bins, hist, mask=(bins < E) & (hist > 0))


@triton.jit
def _align_scan_scatter_kernel(
    ids_ptr,
    counts_ptr,
    sorted_ptr,
    expert_ids_ptr,
    num_post_ptr,
    N,
    E,
    BS,
    CHUNK: tl.constexpr,
    BLOCK_E: tl.constexpr,
):
    experts = tl.arange(0, BLOCK_E)
    counts = tl.load(counts_ptr + experts, mask=experts < E, other=0)
    blocks = (counts + BS - 1) // BS
    block_end = tl.cumsum(blocks, axis=0)
    start = (block_end - blocks) * BS  # padded start of every expert
    total_blocks = tl.sum(blocks, axis=0)
    tl.store(num_post_ptr, total_blocks * BS)
    # expert of each block: the number of experts whose blocks end at or before it
    for b0 in range(0, total_blocks, CHUNK):
        bi = b0 + tl.arange(0, CHUNK)
        owner = tl.sum((block_end[None, :] <= bi[:, None]).to(tl.int32), axis=1)
        tl.store(expert_ids_ptr + bi, owner, mask=bi < total_blocks)

    cursor = tl.zeros((BLOCK_E,), dtype=tl.int32)  # pairs placed so far per expert
    for off in range(0, N, CHUNK):
        offs = off + tl.arange(0, CHUNK)
        e = tl.load(ids_ptr + offs, mask=offs < N, other=-1)
        onehot = (e[:, None] == experts[None, :]).to(tl.int32)  # (CHUNK, BLOCK_E)
        rank = tl.sum(tl.cumsum(onehot, axis=0) * onehot, axis=1) - 1  # rank in the piece
        base = tl.sum(onehot * (start + cursor)[None, :], axis=1)
        ok = (e >= 0) & (e < E)
        tl.store(sorted_ptr + base + rank, offs, mask=ok)
        cursor += tl.sum(onehot, axis=0)


def moe_align_block_size_two_kernel_scan(
    topk_ids: torch.Tensor,
    block_size: int,
    num_experts: int,
    *,
    chunk: int | None = None,
    num_warps: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Group the (token, slot) pairs by expert, each expert padded to whole blocks.

    Args:
        topk_ids: (T, k) int32 expert ids in [0, num_experts), contiguous.
        block_size: Slots per block of the grouped GEMM that consumes the result (>= 1).
        num_experts: Number of experts E (1..4096).
        chunk: Flat indices per piece (power of two >= 16); None = 64.
        num_warps: Warps per program; None = 4.

    Returns:
        sorted_token_ids: (num_tokens_post_pad,) int32, grouped by expert, sentinel T * k padding.
        expert_ids: (num_tokens_post_pad // block_size,) int32.
        num_tokens_post_pad: (1,) int32.

    Raises:
        ValueError: topk_ids is not a contiguous (T, k) int32 tensor, a size is out of range, or
            chunk is not a power of two >= 16.
    """
    if topk_ids.dim() != 2 or topk_ids.dtype != torch.int32 or not topk_ids.is_contiguous():
        raise ValueError(
            f"need topk_ids as a contiguous (T, k) int32 tensor; got {topk_ids.dtype} "
            f"{tuple(topk_ids.shape)}"
        )
    if block_size < 1 or not 1 <= num_experts <= 4096:
        raise ValueError(
            f"need block_size >= 1 and 1 <= num_experts <= 4096; got {block_size}, {num_experts}"
        )
    ch = chunk or 64
    if ch < 16 or ch & (ch - 1):
        raise ValueError(f"chunk must be a power of two >= 16; got {ch}")
    n = topk_ids.numel()
    device, warps = topk_ids.device, num_warps or 4
    block_e = max(16, triton.next_power_of_2(num_experts))
    max_len = n + min(num_experts, n) * (block_size - 1)
    sorted_ids = torch.full((max(max_len, 1),), n, dtype=torch.int32, device=device)
    expert_ids = torch.empty((max(triton.cdiv(max_len, block_size), 1),), dtype=torch.int32,
                             device=device)  # fmt: skip
    counts = torch.zeros((num_experts,), dtype=torch.int32, device=device)
    num_post = torch.zeros((1,), dtype=torch.int32, device=device)
    if n:
        _align_hist_kernel[(triton.cdiv(n, ch),)](
            topk_ids, counts, n, num_experts, CHUNK=ch, BLOCK_E=block_e, num_warps=warps
        )
        _align_scan_scatter_kernel[(1,)](
            topk_ids, counts, sorted_ids, expert_ids, num_post, n, num_experts, block_size,
            CHUNK=ch, BLOCK_E=block_e, num_warps=warps,
        )  # fmt: skip
    total = int(num_post.item())  # one sync: the outputs' lengths depend on the data
    return sorted_ids[:total], expert_ids[: total // block_size], num_post


def reference(
    topk_ids: torch.Tensor, block_size: int, num_experts: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Return (sorted_token_ids, expert_ids, num_tokens_post_pad) by a stable PyTorch sort."""
    flat = topk_ids.reshape(-1).long()
    sentinel = flat.numel()
    counts = torch.bincount(flat, minlength=num_experts)
    padded = (counts + block_size - 1) // block_size * block_size
    padded_start = torch.cumsum(padded, 0) - padded
    count_start = torch.cumsum(counts, 0) - counts
    order = torch.argsort(flat, stable=True)
    expert_of = flat[order]
    rank = torch.arange(sentinel, device=flat.device) - count_start[expert_of]
    total = int(padded.sum())
    sorted_ids = torch.full((total,), sentinel, dtype=torch.int32, device=flat.device)
    sorted_ids[padded_start[expert_of] + rank] = order.to(torch.int32)
    experts = torch.arange(num_experts, device=flat.device, dtype=torch.int32)
    expert_ids = experts.repeat_interleave(padded // block_size)
    return sorted_ids, expert_ids, torch.tensor([total], dtype=torch.int32, device=flat.device)


def make_inputs(shape: dict, dtype: torch.dtype = torch.int32, device: str = "cpu") -> dict:
    """Return inputs for ``{"tokens", "top_k", "num_experts", "block_size"}`` (dtype unused)."""
    t, k, e = shape["tokens"], shape["top_k"], shape["num_experts"]
    ids = torch.randint(0, e, (t, k), dtype=torch.int32, device=device)
    return {"topk_ids": ids, "block_size": shape["block_size"], "num_experts": e}
