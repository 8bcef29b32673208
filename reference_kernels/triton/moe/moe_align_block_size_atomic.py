"""
---
id: moe_align_block_size_atomic
title: MoE align-block-size by atomic expert counts, padded scan and per-expert compaction
op_family: moe
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [int32]
bound: latency
techniques:
  [atomic-histogram, padded-prefix-sum, stream-compaction, expert-parallel, padding-sentinel]
status: reference
launcher: moe_align_block_size_atomic
tuning:
  chunk: [1024, 128, 256, 4096]
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
  shapes: [{tokens: 13, top_k: 4, num_experts: 10, block_size: 16}, {tokens: 1, top_k: 8, num_experts: 128, block_size: 128}]
  dtypes: [int32]
measured: []
---
The routing step before a grouped MoE GEMM (atrex30's moe_align_block_size): the T*k (token, slot)
pairs are grouped by expert in ascending order, ascending flat index f = t * k + j inside a group,
and each group is padded with the sentinel T*k to a multiple of block_size (an expert with no pairs
takes no block); expert_ids names the expert of every block and num_tokens_post_pad the padded
total. Three launches: (1) programs over CHUNK flat indices build the global expert histogram with
tl.atomic_add on vectors of expert ids (one read of topk_ids); (2) one program rounds each count up
to whole blocks and takes the exclusive prefix sum of the padded counts with tl.cumsum, giving every
expert's padded start and num_tokens_post_pad; (3) one program per expert writes the ids of its own
blocks and compacts its pairs: it walks topk_ids in CHUNK pieces, turns the match mask into write
positions with a scan and stores the flat indices at start[e] + the running count. Positions never
come from atomics, so the order is deterministic and equals the stable sort of the reference;
padding slots keep the sentinel written by the allocation. Unlike moe_align_block_size_sort there is
no (chunks x E) table and no CHUNK^2 rank matrix. Bytes: topk_ids read once for the counts and once
per expert for the compaction (L2 hits while T*k*4 B fits in L2). When it wins: decode and medium
batches with E <= 256. Limits: the E-fold re-read dominates long prefills; ids outside [0, E) are
dropped; trimming the variable-length outputs reads num_tokens_post_pad back to the host (one sync).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _align_count_kernel(ids_ptr, counts_ptr, N, E, CHUNK: tl.constexpr):
    offs = tl.program_id(0) * CHUNK + tl.arange(0, CHUNK)
    e = tl.load(ids_ptr + offs, mask=offs < N, other=-1)
    ok = (e >= 0) & (e < E)
    tl.atomic_add(counts_ptr + tl.where(ok, e, 0), tl.full((CHUNK,), 1, tl.int32), mask=ok)


@triton.jit
def _align_scan_kernel(counts_ptr, start_ptr, num_post_ptr, E, BS, BLOCK_E: tl.constexpr):
    offs = tl.arange(0, BLOCK_E)
    counts = tl.load(counts_ptr + offs, mask=offs < E, other=0)
    padded = (counts + BS - 1) // BS * BS
    ends = tl.cumsum(padded, axis=0)
    tl.store(start_ptr + offs, ends - padded, mask=offs < E)
    tl.store(num_post_ptr, tl.sum(padded, axis=0))


@triton.jit
def _align_compact_kernel(
    ids_ptr, counts_ptr, start_ptr, sorted_ptr, expert_ids_ptr, N, BS, CHUNK: tl.constexpr
):
    expert = tl.program_id(0)
    start = tl.load(start_ptr + expert)
    blocks = (tl.load(counts_ptr + expert) + BS - 1) // BS
    first_block = start // BS
    for b in range(0, blocks, CHUNK):  # this expert's block ids
        offs = b + tl.arange(0, CHUNK)
        tl.store(
            expert_ids_ptr + first_block + offs, tl.zeros_like(offs) + expert, mask=offs < blocks
        )
    base = start
    for off in range(0, N, CHUNK):  # stable compaction of the pairs that chose this expert
        offs = off + tl.arange(0, CHUNK)
        e = tl.load(ids_ptr + offs, mask=offs < N, other=-1)
        hit = (e == expert).to(tl.int32)
        pos = base + tl.cumsum(hit, axis=0) - hit
        tl.store(sorted_ptr + pos, offs, mask=hit != 0)
        base += tl.sum(hit, axis=0)


def moe_align_block_size_atomic(
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
        num_experts: Number of experts E (>= 1).
        chunk: Flat indices per program step (power of two); None = 1024 (fewer for tiny inputs).
        num_warps: Warps per program; None = 4.

    Returns:
        sorted_token_ids: (num_tokens_post_pad,) int32 flat indices grouped by expert, each group
            padded with the sentinel T * k.
        expert_ids: (num_tokens_post_pad // block_size,) int32 expert of each block.
        num_tokens_post_pad: (1,) int32.

    Raises:
        ValueError: topk_ids is not a contiguous (T, k) int32 tensor, a size is below 1, or chunk
            is not a power of two.
    """
    if topk_ids.dim() != 2 or topk_ids.dtype != torch.int32 or not topk_ids.is_contiguous():
        raise ValueError(
            f"need topk_ids as a contiguous (T, k) int32 tensor; got {topk_ids.dtype} "
            f"{tuple(topk_ids.shape)}"
        )
    if block_size < 1 or num_experts < 1:
        raise ValueError(f"need block_size, num_experts >= 1; got {block_size}, {num_experts}")
    n = topk_ids.numel()
    ch = chunk or min(1024, triton.next_power_of_2(max(n, 16)))
    if ch & (ch - 1):
        raise ValueError(f"chunk must be a power of two; got {ch}")
    device, warps = topk_ids.device, num_warps or 4
    # worst case: every pair plus block_size - 1 padding for each expert that can be non-empty
    max_len = n + min(num_experts, n) * (block_size - 1)
    sorted_ids = torch.full((max(max_len, 1),), n, dtype=torch.int32, device=device)
    expert_ids = torch.empty((max(triton.cdiv(max_len, block_size), 1),), dtype=torch.int32,
                             device=device)  # fmt: skip
    counts = torch.zeros((num_experts,), dtype=torch.int32, device=device)
    start = torch.empty((num_experts,), dtype=torch.int32, device=device)
    num_post = torch.zeros((1,), dtype=torch.int32, device=device)
    if n:
        _align_count_kernel[(triton.cdiv(n, ch),)](
            topk_ids, counts, n, num_experts, CHUNK=ch, num_warps=warps
        )
        _align_scan_kernel[(1,)](
            counts, start, num_post, num_experts, block_size,
            BLOCK_E=triton.next_power_of_2(num_experts), num_warps=warps,
        )  # fmt: skip
        _align_compact_kernel[(num_experts,)](
            topk_ids, counts, start, sorted_ids, expert_ids, n, block_size,
            CHUNK=ch, num_warps=warps,
        )  # fmt: skip
    total = int(num_post.item())  # one sync: the outputs' lengths depend on the data
    return sorted_ids[:total], expert_ids[: total // block_size], num_post


def reference(
    topk_ids: torch.Tensor, block_size: int, num_experts: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Return (sorted_token_ids, expert_ids, num_tokens_post_pad) by a stable PyTorch sort."""
    device = topk_ids.device
    flat = topk_ids.reshape(-1).long()
    sentinel = flat.numel()
    counts = torch.bincount(flat, minlength=num_experts)
    padded = (counts + block_size - 1) // block_size * block_size
    padded_start = torch.cumsum(padded, 0) - padded
    count_start = torch.cumsum(counts, 0) - counts
    order = torch.argsort(flat, stable=True)
    expert_of = flat[order]
    rank = torch.arange(sentinel, device=device) - count_start[expert_of]
    total = int(padded.sum())
    sorted_ids = torch.full((total,), sentinel, dtype=torch.int32, device=device)
    sorted_ids[padded_start[expert_of] + rank] = order.to(torch.int32)
    experts = torch.arange(num_experts, device=device, dtype=torch.int32)
    expert_ids = experts.repeat_interleave(padded // block_size)
    return sorted_ids, expert_ids, torch.tensor([total], dtype=torch.int32, device=device)


def make_inputs(shape: dict, dtype: torch.dtype = torch.int32, device: str = "cpu") -> dict:
    """Return inputs for ``{"tokens", "top_k", "num_experts", "block_size"}`` (dtype unused)."""
    t, k, e = shape["tokens"], shape["top_k"], shape["num_experts"]
    ids = torch.randint(0, e, (t, k), dtype=torch.int32, device=device)
    return {"topk_ids": ids, "block_size": shape["block_size"], "num_experts": e}
