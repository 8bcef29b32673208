"""
---
id: moe_align_block_size_sort
title: MoE align-block-size by chunk histograms, one-program prefix scan, deterministic scatter
op_family: moe
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [int32]
bound: latency
techniques: [histogram, prefix-sum, counting-sort, deterministic-scatter, padding-sentinel]
status: reference
launcher: moe_align_block_size_sort
tuning:
  chunk: [128, 32, 256]
  num_warps: [4, 1, 8]
args:
  topk_ids: {shape: [T, TOPK], dtypes: [int32], aliases: [selected_experts]}
  block_size: {type: int, aliases: [block_m]}
  num_experts: {type: int, aliases: [n_experts, experts, n_routed_experts]}
returns:
  - {name: sorted_token_ids, shape: ['?'], dtype: int32}
  - {name: expert_ids, shape: ['?'], dtype: int32}
  - {name: num_tokens_post_pad, shape: [1], dtype: int32}
problem:
  shapes: [{tokens: 5, top_k: 2, experts: 4, block_size: 16}, {tokens: 1, top_k: 8, experts: 128, block_size: 128}]
  dtypes: []
measured: []
---
Counting sort of the T*k (token, slot) routing pairs by expert, in three launches and without
atomics, so the output is exactly the stable order a reference sort gives: (1) one program per CHUNK
flat indices builds that chunk's expert histogram with tl.histogram into a (chunks, E) table; (2) a
single program scans the table in tiles of CHUNK_TILE chunks, turning it in place into per-chunk
exclusive offsets, pads each expert's total to a multiple of block_size (experts with no pairs get
no block), writes expert start offsets, num_tokens_post_pad and the expert id of every block (the
number of experts whose last block ends at or before it); (3) one program per chunk ranks each pair
among the earlier pairs of the same expert in its chunk (a CHUNK x CHUNK comparison) and scatters
its flat index to start[e] + chunk_offset[e] + rank. Padding slots hold the sentinel T*k (filled by
the allocation). Bytes: topk_ids read twice (4 B each), sorted ids written once, the table is chunks
* E * 4 B. Limits: step (2) is one program (about chunks / CHUNK_TILE dependent steps), the rank
matrix costs CHUNK^2 compares per chunk, ids must lie in [0, E), and trimming the variable-length
outputs reads num_tokens_post_pad back to the host (one sync).
"""

import torch
import triton
import triton.language as tl

CHUNK_TILE = 16  # chunk rows of the histogram table scanned per step of the prefix kernel
BLOCK_TILE = 64  # blocks whose expert id is resolved per step


@triton.jit
def _moe_align_count_kernel(
    ids_ptr,  # int32 (T * k,) flat expert ids
    counts_ptr,  # int32 (num_chunks, E) per-chunk histograms
    NUM_PAIRS,  # T * k
    E,
    CHUNK: tl.constexpr,
    BLOCK_E: tl.constexpr,  # power of two > E: bin E collects the masked lanes
):
    chunk = tl.program_id(0)
    offs = chunk * CHUNK + tl.arange(0, CHUNK)
    ids = tl.load(ids_ptr + offs, mask=offs < NUM_PAIRS, other=E)  # tail lanes land in spare bin E
    hist = tl.histogram(ids, BLOCK_E)
    offs_e = tl.arange(0, BLOCK_E)
    tl.store(counts_ptr + chunk * E + offs_e, hist, mask=offs_e < E)


@triton.jit
def _moe_align_offsets_kernel(
    counts_ptr,  # int32 (num_chunks, E): histograms in, exclusive per-chunk offsets out
    expert_start_ptr,  # int32 (E,) first padded slot of each expert
    expert_ids_ptr,  # int32 (max_blocks,) expert of each block of block_size slots
    num_post_ptr,  # int32 (1,) num_tokens_post_pad
    NUM_CHUNKS,
    E,
    BLOCK_SIZE,
    BLOCK_E: tl.constexpr,
    CHUNK_TILE: tl.constexpr,
    BLOCK_TILE: tl.constexpr,
):
    offs_e = tl.arange(0, BLOCK_E)
    mask_e = offs_e < E

    # 1) scan the histogram table down its chunk axis, CHUNK_TILE rows per step
    running = tl.zeros((BLOCK_E,), dtype=tl.int32)  # pairs per expert in all earlier chunks
    for c0 in range(0, NUM_CHUNKS, CHUNK_TILE):
        offs_c = c0 + tl.arange(0, CHUNK_TILE)
        mask = (offs_c < NUM_CHUNKS)[:, None] & mask_e[None, :]
        ptrs = counts_ptr + offs_c[:, None] * E + offs_e[None, :]
        cnt = tl.load(ptrs, mask=mask, other=0)
        inclusive = tl.cumsum(cnt, axis=0)
        tl.store(ptrs, inclusive - cnt + running[None, :], mask=mask)
        running += tl.sum(cnt, axis=0)

    # 2) pad every expert to whole blocks; an expert with no pairs gets zero blocks
    padded = (running + BLOCK_SIZE - 1) // BLOCK_SIZE * BLOCK_SIZE
    ends = tl.cumsum(padded, axis=0)
    tl.store(expert_start_ptr + offs_e, ends - padded, mask=mask_e)
    total = tl.sum(padded, axis=0)
    tl.store(num_post_ptr, total)

    # 3) expert of block b = number of experts whose blocks end at or before b
    end_blocks = tl.where(mask_e, ends // BLOCK_SIZE, 2147483647)
    num_blocks = total // BLOCK_SIZE
    for b0 in range(0, num_blocks, BLOCK_TILE):
        offs_b = b0 + tl.arange(0, BLOCK_TILE)
        before = (end_blocks[None, :] <= offs_b[:, None]).to(tl.int32)
        tl.store(expert_ids_ptr + offs_b, tl.sum(before, axis=1), mask=offs_b < num_blocks)


@triton.jit
def _moe_align_scatter_kernel(
    ids_ptr,  # int32 (T * k,)
    counts_ptr,  # int32 (num_chunks, E) exclusive per-chunk offsets
    expert_start_ptr,  # int32 (E,)
    sorted_ptr,  # int32 (max_len,) prefilled with the sentinel T * k
    NUM_PAIRS,
    E,
    CHUNK: tl.constexpr,
):
    chunk = tl.program_id(0)
    lane = tl.arange(0, CHUNK)
    offs = chunk * CHUNK + lane
    mask = offs < NUM_PAIRS
    ids = tl.load(ids_ptr + offs, mask=mask, other=E)
    # stable rank: earlier lanes of this chunk that chose the same expert
    same = (ids[:, None] == ids[None, :]) & (lane[None, :] < lane[:, None])
    rank = tl.sum(same.to(tl.int32), axis=1)
    base = tl.load(expert_start_ptr + ids, mask=mask, other=0)
    base += tl.load(counts_ptr + chunk * E + ids, mask=mask, other=0)
    tl.store(sorted_ptr + base + rank, offs, mask=mask)


def _launch_config(num_pairs: int) -> dict[str, int]:
    """Return the chunk length and warps: 128 pairs per program, 256 for large batches."""
    if num_pairs >= 32768:
        return {"chunk": 256, "num_warps": 8}
    return {"chunk": 128, "num_warps": 4}


def moe_align_block_size_sort(
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
        block_size: Slots per block of the grouped GEMM that consumes the result.
        num_experts: E.
        chunk: Flat pairs per program of the count and scatter kernels (power of two); None picks.
        num_warps: Warps per program; None picks.

    Returns:
        sorted_token_ids: (num_tokens_post_pad,) int32 flat indices t * k + j, grouped by expert
            ascending, ascending within an expert, each group padded with the sentinel T * k.
        expert_ids: (num_tokens_post_pad // block_size,) int32 expert of each block.
        num_tokens_post_pad: (1,) int32.

    Raises:
        ValueError: The shapes, dtype or sizes do not fit.
    """
    if topk_ids.dim() != 2 or topk_ids.dtype != torch.int32:
        raise ValueError(
            f"need topk_ids (T, k) int32; got {tuple(topk_ids.shape)} {topk_ids.dtype}"
        )
    if block_size < 1 or num_experts < 1:
        raise ValueError(
            f"need block_size >= 1 and num_experts >= 1; got {block_size}, {num_experts}"
        )
    num_pairs = topk_ids.numel()
    device = topk_ids.device
    cfg = _launch_config(num_pairs)
    cfg.update({k: v for k, v in {"chunk": chunk, "num_warps": num_warps}.items() if v is not None})
    # worst case: every pair plus block_size - 1 padding for each expert that can be non-empty
    max_len = num_pairs + min(num_experts, num_pairs) * (block_size - 1)
    max_blocks = triton.cdiv(max_len, block_size)
    num_chunks = triton.cdiv(num_pairs, cfg["chunk"])
    ids = topk_ids.contiguous().view(-1)
    counts = torch.empty((max(num_chunks, 1), num_experts), dtype=torch.int32, device=device)
    expert_start = torch.empty(num_experts, dtype=torch.int32, device=device)
    expert_ids = torch.empty(max(max_blocks, 1), dtype=torch.int32, device=device)
    num_post = torch.zeros(1, dtype=torch.int32, device=device)
    sorted_ids = torch.full((max(max_len, 1),), num_pairs, dtype=torch.int32, device=device)
    block_e = triton.next_power_of_2(num_experts + 1)
    if num_chunks > 0:
        _moe_align_count_kernel[(num_chunks,)](
            ids, counts, num_pairs, num_experts,
            CHUNK=cfg["chunk"], BLOCK_E=block_e, num_warps=cfg["num_warps"],
        )  # fmt: skip
        _moe_align_offsets_kernel[(1,)](
            counts, expert_start, expert_ids, num_post, num_chunks, num_experts, block_size,
            BLOCK_E=block_e, CHUNK_TILE=CHUNK_TILE, BLOCK_TILE=BLOCK_TILE,
            num_warps=cfg["num_warps"],
        )  # fmt: skip
        _moe_align_scatter_kernel[(num_chunks,)](
            ids, counts, expert_start, sorted_ids, num_pairs, num_experts,
            CHUNK=cfg["chunk"], num_warps=cfg["num_warps"],
        )  # fmt: skip
    total = int(num_post.item())  # the outputs are variable-length: one device-to-host sync
    return sorted_ids[:total], expert_ids[: total // block_size], num_post


def reference(
    topk_ids: torch.Tensor, block_size: int, num_experts: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Return the same three outputs with a stable PyTorch sort."""
    flat = topk_ids.reshape(-1).long()
    num_pairs = flat.numel()
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=num_experts)
    padded = (counts + block_size - 1) // block_size * block_size
    starts = torch.cumsum(padded, 0) - padded
    first_in_sorted = torch.cumsum(counts, 0) - counts
    experts = flat[order]
    positions = (
        starts[experts] + torch.arange(num_pairs, device=flat.device) - first_in_sorted[experts]
    )
    total = int(padded.sum())
    sorted_ids = torch.full((total,), num_pairs, dtype=torch.int32, device=flat.device)
    sorted_ids[positions] = order.to(torch.int32)
    expert_ids = torch.repeat_interleave(
        torch.arange(num_experts, device=flat.device), padded // block_size
    )
    num_post = torch.tensor([total], dtype=torch.int32, device=flat.device)
    return sorted_ids, expert_ids.to(torch.int32), num_post


def make_inputs(shape: dict, dtype: torch.dtype = torch.int32, device: str = "cpu") -> dict:
    """Return ``{"topk_ids", "block_size", "num_experts"}`` with ids uniform over the experts.

    ``shape`` has ``tokens``, ``top_k``, ``experts`` and ``block_size``; ids are int32 and may
    repeat within a token.
    """
    if dtype != torch.int32:
        raise ValueError(f"topk_ids are int32; got dtype {dtype}")
    tokens, top_k, experts = shape["tokens"], shape["top_k"], shape["experts"]
    topk_ids = torch.randint(0, experts, (tokens, top_k), dtype=torch.int32, device=device)
    return {"topk_ids": topk_ids, "block_size": shape["block_size"], "num_experts": experts}
