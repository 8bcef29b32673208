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
returns:
  - {name: out, shape: ['?', C], dtype: x}
  - {name: indices, shape: ['?'], dtype: int64}
problem:
  shapes: [{rows: 300, cols: 3}]
  dtypes: [fp32]
measured: []
---
out = x[mask] and indices = mask.nonzero() (the rows whose flag is set, in their original order),
for a (M, C) tensor of any dtype; pass a 1-D tensor as (M, 1) to compact elements. Two kernels.
Kernel 1, one program per BLOCK_M rows, counts the set flags of its block (one byte read per row).
The launcher then reads the total (one host sync: the output size depends on the data) and
allocates out. Kernel 2, one program per (row block, column block), sums the counts of the blocks
before it (its block-level exclusive prefix, from L2: the counts array is tiny), adds the in-block
exclusive scan of its flags (tl.cumsum minus the flag) to get every kept row's destination, and
copies the kept rows' column tile there (dropped rows are never loaded). Bytes: the mask twice,
kept rows read and written once, plus 8 bytes per kept index. It is exact (bits are moved). Limits:
the per-program prefix loop is O(number of blocks), so a launch with 10^5+ blocks should use a
third scan kernel instead; the host sync rules out CUDA-graph capture (a variant writing into a
max-size buffer avoids it).
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
    keep = flag != 0
    if pid_c == 0:
        tl.store(idx_ptr + dest, rows, mask=keep)
    cols = pid_c * BLOCK_C + tl.arange(0, BLOCK_C)
    tile_mask = keep[:, None] & (cols < C)[None, :]
    vals = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :], mask=tile_mask)
    tl.store(out_ptr + dest[:, None] * stride_om + cols[None, :], vals, mask=tile_mask)


def _launch_config(c: int) -> dict[str, int]:
    """Return rows per block, columns per tile (<= 128, >= the row) and warps."""
    return {"block_m": 128, "block_c": min(triton.next_power_of_2(c), 128), "num_warps": 4}


def stream_compaction_mask_scan(
    x: torch.Tensor,
    mask: torch.Tensor,
    *,
    block_m: int | None = None,
    block_c: int | None = None,
    num_warps: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return ``(x[mask], mask.nonzero()[:, 0])``: the flagged rows in order, and their indices.

    Args:
        x: (M, C) any dtype, last dimension contiguous.
        mask: (M,) bool.
        block_m: Rows per scan block (power of two); None = 128.
        block_c: Columns per copy tile (power of two); None = min(next_pow2(C), 128).
        num_warps: Warps per program; None = 4.

    Returns:
        out: (K, C) with x's dtype, K = mask.sum(); indices: (K,) int64.

    Raises:
        ValueError: x is not 2D, or mask is not a bool vector of length M.
    """
    if x.dim() != 2:
        raise ValueError(f"x must be (M, C); got {tuple(x.shape)} (pass a vector as (M, 1))")
    if mask.dtype != torch.bool or mask.shape != (x.shape[0],):
        raise ValueError(f"mask must be ({x.shape[0]},) bool; got {tuple(mask.shape)} {mask.dtype}")
    m, c = x.shape
    cfg = _launch_config(c)
    given = {"block_m": block_m, "block_c": block_c, "num_warps": num_warps}
    cfg.update({key: value for key, value in given.items() if value is not None})
    if m == 0:
        return x[:0].clone(), torch.empty(0, dtype=torch.int64, device=x.device)
    x = x if x.stride(-1) == 1 else x.contiguous()
    flags = mask.contiguous().view(torch.uint8)
    num_blocks = triton.cdiv(m, cfg["block_m"])
    counts = torch.empty(num_blocks, dtype=torch.int32, device=x.device)
    _block_count_kernel[(num_blocks,)](flags, counts, m, BLOCK_M=cfg["block_m"])
    total = int(counts.sum().item())  # host sync: the output size depends on the data
    out = torch.empty((total, c), dtype=x.dtype, device=x.device)
    indices = torch.empty(total, dtype=torch.int64, device=x.device)
    if total == 0:
        return out, indices
    grid = (num_blocks, triton.cdiv(c, cfg["block_c"]))
    _compact_kernel[grid](
        x, flags, counts, out, indices,
        m, c,
        x.stride(0), out.stride(0),
        BLOCK_M=cfg["block_m"], BLOCK_C=cfg["block_c"],
        PREFIX_BLOCK=min(triton.next_power_of_2(num_blocks), 1024),
        num_warps=cfg["num_warps"],
    )  # fmt: skip
    return out, indices


def reference(x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Return ``(x[mask], mask.nonzero()[:, 0])``."""
    return x[mask], mask.nonzero()[:, 0]


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"x", "mask"}`` for ``shape = {"rows", "cols", "keep"}``; keep = P(flag), 0.5."""
    x = torch.randn(shape["rows"], shape["cols"], device=device).to(dtype)
    mask = torch.rand(shape["rows"], device=device) < shape.get("keep", 0.5)
    return {"x": x, "mask": mask}
