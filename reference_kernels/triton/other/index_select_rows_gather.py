"""
---
id: index_select_rows_gather
title: Row gather by an index tensor over 2-D (rows x columns) tiles, any dtype
op_family: other
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32, fp8_e4m3fn, int8, uint8, int32, int64, bool]
bound: memory
techniques: [gather, 2d-tile, index-load-once, dtype-agnostic, int64-offsets]
status: reference
launcher: index_select_rows_gather
tuning:
  block_r: [8, 1, 2, 4, 16, 32]
  block_c: [256, 64, 128, 512, 1024]
  num_warps: [4, 1, 2, 8]
args:
  src: {shape: [R, C], dtypes: [any], aliases: [input, weight, table, x]}
  index: {shape: [M], dtypes: [int32, int64], aliases: [indices, ids, idx]}
returns:
  - {name: out, shape: [M, C], dtype: src}
problem:
  shapes: [{rows: 50, cols: 300, picks: 37}, {rows: 7, cols: 5, picks: 20}]
  dtypes: [fp32, bf16]
measured: []
---
out[i, :] = src[index[i], :] (torch.index_select(src, 0, index)) for any element type: hidden
states of selected tokens (last-token logits, MoE dispatch, speculative-decoding accepts), KV-cache
compaction, embedding-like lookups of int or fp8 tables. Design: program (i, j) owns a (BLOCK_R,
BLOCK_C) output tile: it loads BLOCK_R indices once, then moves BLOCK_R row segments of BLOCK_C
columns; a row-per-program embedding kernel instead reloads its index and launches one program per
row, which wastes most lanes when C is small (e.g. 64-wide rows or int8 tables). The kernel only
moves bits (load and store in the source dtype; bool is moved as bytes), so it is exact. Bytes:
read + write of each gathered element plus 4-8 per index. Limits: indices must lie in [0, R) (not
checked on the device: out-of-range indices read out of bounds; the launcher does not synchronise
to check them); rows must have a contiguous last dimension; negative (from the end) indices are
not supported.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _index_select_rows_kernel(
    # pointers
    src_ptr,
    idx_ptr,
    out_ptr,
    # sizes
    M,
    C,
    # strides (elements; the last dims are contiguous)
    stride_src,
    stride_out,
    # meta
    BLOCK_R: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    rmask = rows < M
    mask = rmask[:, None] & (cols < C)[None, :]
    src_rows = tl.load(idx_ptr + rows, mask=rmask, other=0).to(tl.int64)  # one load per row
    vals = tl.load(src_ptr + src_rows[:, None] * stride_src + cols[None, :], mask=mask)
    tl.store(out_ptr + rows.to(tl.int64)[:, None] * stride_out + cols[None, :], vals, mask=mask)


def index_select_rows_gather(
    src: torch.Tensor,
    index: torch.Tensor,
    *,
    block_r: int = 8,
    block_c: int = 256,
    num_warps: int = 4,
) -> torch.Tensor:
    """Return src[index] for a 2-D src and 1-D index (torch.index_select along dim 0).

    Args:
        src: (R, C) tensor of any dtype, last dimension contiguous.
        index: (M,) int32/int64 row ids in [0, R).
        block_r: Output rows per program (power of two).
        block_c: Columns per program (power of two).
        num_warps: Warps per program.

    Returns:
        out: (M, C) in src's dtype, contiguous.

    Raises:
        ValueError: src is not 2-D, index is not a 1-D int32/int64 tensor, or a block is bad.
    """
    if src.dim() != 2:
        raise ValueError(f"src must be 2-D (R, C); got {tuple(src.shape)}")
    if index.dim() != 1 or index.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"index must be 1-D int32/int64; got {index.dtype} {tuple(index.shape)}")
    for name, value in (("block_r", block_r), ("block_c", block_c)):
        if value <= 0 or value & (value - 1):
            raise ValueError(f"{name} {value} must be a power of two")
    src = src if src.stride(-1) == 1 else src.contiguous()
    m, c = index.shape[0], src.shape[1]
    out = torch.empty((m, c), dtype=src.dtype, device=src.device)
    if out.numel() == 0:
        return out
    moved = (
        (src.view(torch.uint8), out.view(torch.uint8)) if src.dtype == torch.bool else (src, out)
    )
    _index_select_rows_kernel[(triton.cdiv(m, block_r), triton.cdiv(c, block_c))](
        moved[0], index.contiguous(), moved[1],
        m, c,
        src.stride(0), out.stride(0),
        BLOCK_R=block_r, BLOCK_C=block_c,
        num_warps=num_warps,
    )  # fmt: skip
    return out


def reference(src: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Return torch.index_select(src, 0, index)."""
    return torch.index_select(src, 0, index.long())


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return kwargs for ``shape = {"rows", "cols", "picks"}``: random rows, repeats allowed."""
    r, c = shape["rows"], shape["cols"]
    if dtype.is_floating_point:
        src = torch.randn(r, c, device=device).to(dtype)
    else:
        src = torch.randint(-100, 100, (r, c), device=device).to(dtype)
    index = torch.randint(0, r, (shape["picks"],), device=device, dtype=torch.int32)
    return {"src": src, "index": index}
