"""
---
id: stream_compaction_mask_scan
title: Order-keeping stream compaction of masked rows, block counts then an in-block exclusive scan
op_family: other
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32, fp8_e4m3fn, int8, uint8, int32, int64]
bound: memory
techniques: [stream-compaction, two-kernel, exclusive-scan, block-prefix, 2d-tile, dtype-agnostic]
status: reference
launcher: stream_compaction_mask_scan
tuning:
  block_m: [128, 16, 32, 64, 256, 1024]
  block_c: [128, 32, 64, 256, 512]
  num_warps: [4, 1, 2, 8]
args:
  x: {shape: [M, C], dtypes: [any], aliases: [input, src, values]}
  mask: {shape: [M], dtypes: [bool], aliases: [keep, valid, flags]}
  num_kept: {type: int, aliases: [size, num_selected, num_valid]}
returns:
  - {name: out, shape: [num_kept, C], dtype: x}
  - {name: indices, shape: [num_kept], dtype: int64}
problem:
  shapes: [{rows: 300, cols: 3}]
  dtypes: [fp32]
measured: []
---
out = x[mask] and indices = mask.nonzero() (the rows whose flag is set, in their original order),
for a (M, C) tensor of any dtype; pass a 1-D tensor as (M, 1) to compact elements. The output size
is the caller's num_kept, as in torch.nonzero_static: the launcher never reads the mask on the host
(no sync, so the launch can be graph-captured); with num_kept = mask.sum() the result is exactly
x[mask], fewer kept rows leave the tail filled with zeros (index -1), more are cut at num_kept. Two
kernels. Kernel 1, one program per BLOCK_M rows, counts the set flags of its block (one byte read
per row). Kernel 2, one program per (row block, column block), sums the counts of the blocks before
it (its block-level exclusive prefix, from L2: the counts array is tiny), adds the in-block
exclusive scan of its flags (tl.cumsum minus the flag) to get every kept row's destination, and
copies the kept rows' column tile there (dropped rows are never loaded); the last row block, which
sees the total, fills rows [total, num_kept). Bytes: the mask twice, kept rows read and written
once, plus 8 bytes per kept index. It is exact (bits are moved). Limits: the per-program prefix loop
is O(number of blocks), so a launch with 10^5+ blocks should use a third scan kernel instead.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _block_count_kernel(
    mask_ptr,  # (M,) uint8 flags
    counts_ptr,  # (num_blocks,) int32
    M,
    BLOCK_M: tl.constexpr,
):
    pid = tl.program_id(0)
    rows = pid.to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    flag = tl.load(mask_ptr + rows, mask=rows < M, other=0) != 0
    tl.store(counts_ptr + pid, tl.sum(flag.to(tl.int32), axis=0))


@triton.jit
def _compact_kernel(
    # pointers
    x_ptr,
    mask_ptr,
    counts_ptr,
    out_ptr,
    idx_ptr,
    # sizes
    M,
    C,
    num_kept,  # rows of out: kept rows past it are cut, rows past the total are filled
    # strides (elements; the last dim is contiguous)
    stride_xm,
    stride_om,
    # meta
    BLOCK_M: tl.constexpr,
    BLOCK_C: tl.constexpr,
    PREFIX_BLOCK: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_c = tl.program_id(1)
    # block-level exclusive prefix: the kept rows of every earlier block
    base = tl.zeros((), dtype=tl.int64)
    offs_p = tl.arange(0, PREFIX_BLOCK)
    for start in range(0, pid_m, PREFIX_BLOCK):
        blocks = start + offs_p
        base += tl.sum(tl.load(counts_ptr + blocks, mask=blocks < pid_m, other=0), axis=0)
    rows = pid_m.to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    flag = (tl.load(mask_ptr + rows, mask=rows < M, other=0) != 0).to(tl.int64)
    dest = base + tl.cumsum(flag, axis=0) - flag  # in-block exclusive scan
    keep = (flag != 0) & (dest < num_kept)
    if pid_c == 0:
        tl.store(idx_ptr + dest, rows, mask=keep)
    cols = pid_c * BLOCK_C + tl.arange(0, BLOCK_C)
    mask_c = (cols < C)[None, :]
    tile_mask = keep[:, None] & mask_c
    vals = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :], mask=tile_mask)
    tl.store(out_ptr + dest[:, None] * stride_om + cols[None, :], vals, mask=tile_mask)
    if pid_m == tl.num_programs(0) - 1:  # the last block knows the total: fill the unused tail
        offs_m = tl.arange(0, BLOCK_M)
        zeros = tl.zeros([BLOCK_M, BLOCK_C], dtype=out_ptr.dtype.element_ty)
        for fill in range(base + tl.sum(flag, axis=0), num_kept, BLOCK_M):
            tail = fill + offs_m
            tl.store(out_ptr + tail[:, None] * stride_om + cols[None, :], zeros,
                     mask=(tail < num_kept)[:, None] & mask_c)  # fmt: skip
            if pid_c == 0:
                tl.store(idx_ptr + tail, tl.full([BLOCK_M], -1, tl.int64), mask=tail < num_kept)


def _launch_config(c: int) -> dict[str, int]:
    """Return rows per block, columns per tile (<= 128, >= the row) and warps."""
    return {"block_m": 128, "block_c": min(triton.next_power_of_2(c), 128), "num_warps": 4}


def stream_compaction_mask_scan(
    x: torch.Tensor,
    mask: torch.Tensor,
    num_kept: int,
    *,
    block_m: int | None = None,
    block_c: int | None = None,
    num_warps: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return ``(x[mask], mask.nonzero()[:, 0])``: the flagged rows in order, and their indices.

    Args:
        x: (M, C) any dtype, last dimension contiguous.
        mask: (M,) bool.
        num_kept: Output rows, the caller's host-side count of set flags (mask.sum()).
        block_m: Rows per scan block (power of two); None = 128.
        block_c: Columns per copy tile (power of two); None = min(next_pow2(C), 128).
        num_warps: Warps per program; None = 4.

    Returns:
        out: (num_kept, C) with x's dtype; indices: (num_kept,) int64. Rows past mask.sum()
        are zeros with index -1.

    Raises:
        ValueError: x is not 2D, mask is not a bool vector of length M, or num_kept < 0.
    """
    if x.dim() != 2:
        raise ValueError(f"x must be (M, C); got {tuple(x.shape)} (pass a vector as (M, 1))")
    if mask.dtype != torch.bool or mask.shape != (x.shape[0],):
        raise ValueError(f"mask must be ({x.shape[0]},) bool; got {tuple(mask.shape)} {mask.dtype}")
    if num_kept < 0:
        raise ValueError(f"num_kept must be >= 0; got {num_kept}")
    m, c = x.shape
    cfg = _launch_config(c)
    given = {"block_m": block_m, "block_c": block_c, "num_warps": num_warps}
    cfg.update({key: value for key, value in given.items() if value is not None})
    out = torch.empty((num_kept, c), dtype=x.dtype, device=x.device)
    indices = torch.empty(num_kept, dtype=torch.int64, device=x.device)
    if num_kept == 0 or c == 0:
        return out, indices
    x = x if x.stride(-1) == 1 else x.contiguous()
    flags = mask.contiguous().view(torch.uint8)
    num_blocks = max(1, triton.cdiv(m, cfg["block_m"]))  # M = 0: one block fills the output
    counts = torch.empty(num_blocks, dtype=torch.int32, device=x.device)
    _block_count_kernel[(num_blocks,)](flags, counts, m, BLOCK_M=cfg["block_m"])
    grid = (num_blocks, triton.cdiv(c, cfg["block_c"]))
    _compact_kernel[grid](
        x, flags, counts, out, indices,
        m, c, num_kept,
        x.stride(0), out.stride(0),
        BLOCK_M=cfg["block_m"], BLOCK_C=cfg["block_c"],
        PREFIX_BLOCK=min(triton.next_power_of_2(num_blocks), 1024),
        num_warps=cfg["num_warps"],
    )  # fmt: skip
    return out, indices


def reference(
    x: torch.Tensor, mask: torch.Tensor, num_kept: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return ``(x[mask], mask.nonzero()[:, 0])`` cut or padded (zeros, -1) to num_kept rows."""
    out = torch.zeros((num_kept, x.shape[1]), dtype=x.dtype, device=x.device)
    indices = torch.full((num_kept,), -1, dtype=torch.int64, device=x.device)
    kept, idx = x[mask][:num_kept], mask.nonzero()[:num_kept, 0]
    out[: kept.shape[0]] = kept
    indices[: idx.shape[0]] = idx
    return out, indices


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"x", "mask", "num_kept"}`` for ``shape = {"rows", "cols", "keep"}``.

    Exactly round(keep * rows) flags are set (keep = 0.5 by default), at random rows, so num_kept
    depends on the shape only, not on the seed.
    """
    rows = shape["rows"]
    num_kept = round(shape.get("keep", 0.5) * rows)
    x = torch.randn(rows, shape["cols"], device=device).to(dtype)
    mask = torch.zeros(rows, dtype=torch.bool, device=device)
    mask[torch.randperm(rows, device=device)[:num_kept]] = True
    return {"x": x, "mask": mask, "num_kept": num_kept}
