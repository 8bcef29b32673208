"""
---
id: masked_scatter_rows
title: In-place row scatter out[index[i]] = src[i] for the rows whose validity flag is set
op_family: other
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32, fp8_e4m3fn, int8, uint8, int32, int64]
bound: memory
techniques: [scatter, 2d-tile, validity-mask, in-place, dtype-agnostic, int64-offsets]
status: reference
launcher: masked_scatter_rows
tuning:
  block_r: [8, 1, 2, 4, 16, 32]
  block_c: [256, 64, 128, 512, 1024]
  num_warps: [4, 1, 2, 8]
args:
  out: {shape: [R, C], dtypes: [any], aliases: [dst, destination, cache]}
  src: {shape: [M, C], like: out, aliases: [input, x, updates]}
  index: {shape: [M], dtypes: [int32, int64], aliases: [indices, ids, idx, slot_mapping]}
  valid: {shape: [M], dtypes: [bool], optional: true, aliases: [mask, keep]}
returns:
  - {name: out, alias: out}
problem:
  shapes: [{rows: 60, cols: 300, picks: 40}, {rows: 9, cols: 3, picks: 9}]
  dtypes: [fp32, bf16]
  in_place: [out]
measured: []
---
The inverse of a row gather, in place: for every i with valid[i] (all i when valid is None) and
index[i] >= 0, out[index[i], :] = src[i, :]; other rows of out are left untouched and out is
returned. A negative index is treated like valid[i] = False, which is how padded slots (-1) are
marked in KV-cache slot mappings and MoE un-permutation. Design: program (i, j) owns a (BLOCK_R,
BLOCK_C) tile of src: it loads BLOCK_R indices and flags once, folds them into one row mask, reads
the tile (skipped rows are not even loaded) and writes each row segment to its destination row, so
a 64-wide int8 or fp8 row still fills the lanes. Only bits are moved (exact for any dtype). Bytes:
read + write of each scattered element. Limits: duplicate valid indices race (one of the rows
wins, unspecified which, as with index_copy_ on CUDA); indices must be < R (not checked on the
device); no accumulate mode (use an atomic-add kernel for that).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _masked_scatter_rows_kernel(
    # pointers
    src_ptr,
    idx_ptr,
    valid_ptr,
    out_ptr,
    # sizes
    M,
    C,
    # strides (elements; the last dims are contiguous)
    stride_src,
    stride_out,
    # meta
    HAS_VALID: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    rmask = rows < M
    dst = tl.load(idx_ptr + rows, mask=rmask, other=-1).to(tl.int64)
    keep = rmask & (dst >= 0)
    if HAS_VALID:
        keep = keep & (tl.load(valid_ptr + rows, mask=rmask, other=0) != 0)
    mask = keep[:, None] & (cols < C)[None, :]
    vals = tl.load(src_ptr + rows.to(tl.int64)[:, None] * stride_src + cols[None, :], mask=mask)
    tl.store(out_ptr + dst[:, None] * stride_out + cols[None, :], vals, mask=mask)


def masked_scatter_rows(
    out: torch.Tensor,
    src: torch.Tensor,
    index: torch.Tensor,
    valid: torch.Tensor | None = None,
    *,
    block_r: int = 8,
    block_c: int = 256,
    num_warps: int = 4,
) -> torch.Tensor:
    """Write src rows into out at index rows where valid (in place) and return out.

    Args:
        out: (R, C) destination, any dtype, last dimension contiguous; modified in place.
        src: (M, C) rows to write, same dtype as out.
        index: (M,) int32/int64 destination rows; negative entries are skipped.
        valid: Optional (M,) bool; False rows are skipped.
        block_r: Source rows per program (power of two).
        block_c: Columns per program (power of two).
        num_warps: Warps per program.

    Returns:
        out, the same tensor object.

    Raises:
        ValueError: Shapes or dtypes disagree, out's rows are not contiguous, or a block is bad.
    """
    if out.dim() != 2 or src.dim() != 2 or src.shape[1] != out.shape[1] or src.dtype != out.dtype:
        raise ValueError(
            f"src (M, C) must match out (R, C) in C and dtype; got src {src.dtype} "
            f"{tuple(src.shape)}, out {out.dtype} {tuple(out.shape)}"
        )
    if out.stride(-1) != 1:
        raise ValueError("out must have a contiguous last dimension (it is written in place)")
    m = src.shape[0]
    if index.shape != (m,) or index.dtype not in (torch.int32, torch.int64):
        raise ValueError(
            f"index must be ({m},) int32/int64; got {index.dtype} {tuple(index.shape)}"
        )
    if valid is not None and (valid.shape != (m,) or valid.dtype != torch.bool):
        raise ValueError(f"valid must be ({m},) bool; got {valid.dtype} {tuple(valid.shape)}")
    for name, value in (("block_r", block_r), ("block_c", block_c)):
        if value <= 0 or value & (value - 1):
            raise ValueError(f"{name} {value} must be a power of two")
    if src.numel() == 0:
        return out
    src = src if src.stride(-1) == 1 else src.contiguous()
    flags = valid.contiguous().view(torch.uint8) if valid is not None else index
    _masked_scatter_rows_kernel[(triton.cdiv(m, block_r), triton.cdiv(src.shape[1], block_c))](
        src, index.contiguous(), flags, out,
        m, src.shape[1],
        src.stride(0), out.stride(0),
        HAS_VALID=valid is not None, BLOCK_R=block_r, BLOCK_C=block_c,
        num_warps=num_warps,
    )  # fmt: skip
    return out


def reference(
    out: torch.Tensor, src: torch.Tensor, index: torch.Tensor, valid: torch.Tensor | None = None
) -> torch.Tensor:
    """Write the kept src rows into out by index_copy_ (in place, as the kernel) and return out."""
    keep = index >= 0
    if valid is not None:
        keep = keep & valid
    return out.index_copy_(0, index[keep].long(), src[keep])


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return kwargs for ``shape = {"rows", "cols", "picks"}``: distinct targets, some skipped."""
    r, c, m = shape["rows"], shape["cols"], shape["picks"]

    def draw(n: int) -> torch.Tensor:
        if dtype.is_floating_point:
            return torch.randn(n, c, device=device).to(dtype)
        return torch.randint(-100, 100, (n, c), device=device).to(dtype)

    index = torch.randperm(r, device=device)[:m]
    index[::5] = -1  # padded slots
    valid = torch.rand(m, device=device) < 0.8
    return {"out": draw(r), "src": draw(m), "index": index, "valid": valid}
