"""
---
id: bincount_histogram_tokens
title: Token / expert bincount with a per-program tl.histogram and one atomic merge per bin
op_family: other
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [int32, int64]
bound: memory
techniques: [histogram, block-local-histogram, atomic-merge, grid-stride-chunks]
status: reference
launcher: bincount_histogram_tokens
tuning:
  block: [1024, 256, 512, 2048, 4096]
  chunks_per_program: [4, 1, 2, 8, 16]
  num_warps: [4, 1, 2, 8]
args:
  ids:
    {shape: [...], dtypes: [int32, int64], layout: contiguous,
     aliases: [topk_ids, token_ids, input_ids, input]}
  num_bins: {type: int, aliases: [num_experts, minlength, vocab_size]}
returns:
  - {name: counts, shape: [num_bins], dtype: int32}
problem:
  shapes: [{tokens: 300, topk: 8, num_bins: 64}, {tokens: 5, topk: 1, num_bins: 3}]
  dtypes: [int64, int32]
measured: []
---
counts[b] = number of entries of ids equal to b, for b in [0, num_bins) (torch.bincount with
minlength = num_bins and int32 counts); ids outside [0, num_bins), e.g. -1 padding for dropped
tokens or expert slots owned by another rank, are ignored. Used for expert load statistics, MoE
routing counts and token-frequency penalties. Design: the flattened ids are split into chunks of
BLOCK; each program reduces CHUNKS_PER_PROGRAM consecutive chunks into a private NUM_BINS_P2-bin
tl.histogram in registers (out-of-range ids masked out), then merges it into the global counts with
one atomic add per non-empty bin, so global atomics scale with programs x bins rather than with the
number of ids (a plain per-id atomic kernel serialises on hot bins, e.g. a popular expert). Bytes:
4 or 8 read per id. Limits: num_bins is rounded up to a power of two in registers, practical up to
a few thousand (experts, not a 150k vocab); counts are int32; the atomic merge makes the bin
updates unordered (the result is exact).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _bincount_kernel(
    # pointers
    ids_ptr,
    counts_ptr,
    # sizes
    numel,
    num_bins,
    # meta
    NUM_BINS_P2: tl.constexpr,
    BLOCK: tl.constexpr,
    CHUNKS_PER_PROGRAM: tl.constexpr,
):
    base = tl.program_id(0).to(tl.int64) * (BLOCK * CHUNKS_PER_PROGRAM)
    offs = tl.arange(0, BLOCK)
    hist = tl.zeros((NUM_BINS_P2,), dtype=tl.int32)
    for chunk in tl.static_range(CHUNKS_PER_PROGRAM):
        idx = base + chunk * BLOCK + offs
        in_bounds = idx < numel
        ids = tl.load(ids_ptr + idx, mask=in_bounds, other=-1)
        valid = in_bounds & (ids >= 0) & (ids < num_bins)
        hist += tl.histogram(tl.where(valid, ids, 0).to(tl.int32), NUM_BINS_P2, mask=valid)
    bins = tl.arange(0, NUM_BINS_P2)
    tl.atomic_add(counts_ptr + bins, hist, mask=(bins < num_bins) & (hist > 0))


def bincount_histogram_tokens(
    ids: torch.Tensor,
    num_bins: int,
    *,
    block: int = 1024,
    chunks_per_program: int = 4,
    num_warps: int = 4,
) -> torch.Tensor:
    """Return int32 counts of each value in [0, num_bins) among ids (others ignored).

    Args:
        ids: Integer tensor of any shape (int32 or int64); flattened.
        num_bins: Number of bins (experts, classes), 1..65536.
        block: Ids per chunk (power of two).
        chunks_per_program: Chunks each program folds into its private histogram.
        num_warps: Warps per program.

    Returns:
        counts: (num_bins,) int32.

    Raises:
        ValueError: ids is not int32/int64, num_bins is out of range, or block is bad.
    """
    if ids.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"ids must be int32 or int64; got {ids.dtype}")
    if not 1 <= num_bins <= 65536:
        raise ValueError(f"num_bins = {num_bins} must be in [1, 65536]")
    if block <= 0 or block & (block - 1) or chunks_per_program <= 0:
        raise ValueError(
            f"block {block} must be a power of two and chunks_per_program {chunks_per_program} > 0"
        )
    flat = ids.reshape(-1).contiguous()
    counts = torch.zeros(num_bins, dtype=torch.int32, device=ids.device)
    if flat.numel() == 0:
        return counts
    grid = (triton.cdiv(flat.numel(), block * chunks_per_program),)
    _bincount_kernel[grid](
        flat, counts,
        flat.numel(), num_bins,
        NUM_BINS_P2=triton.next_power_of_2(num_bins), BLOCK=block,
        CHUNKS_PER_PROGRAM=chunks_per_program,
        num_warps=num_warps,
    )  # fmt: skip
    return counts


def reference(ids: torch.Tensor, num_bins: int) -> torch.Tensor:
    """Return torch.bincount of the in-range ids, length num_bins, as int32."""
    flat = ids.reshape(-1).long()
    flat = flat[(flat >= 0) & (flat < num_bins)]
    return torch.bincount(flat, minlength=num_bins).to(torch.int32)


def make_inputs(shape: dict, dtype: torch.dtype = torch.int32, device: str = "cpu") -> dict:
    """Return kwargs for ``shape = {"tokens", "topk", "num_bins"}``: skewed ids with -1 padding."""
    n = shape["num_bins"]
    skew = torch.rand(shape["tokens"], shape["topk"], device=device) ** 2  # low bins are hot
    ids = (skew * (n + 2)).long() - 1  # -1 and n are out of range: ignored
    return {"ids": ids.to(dtype), "num_bins": n}
