"""
---
id: segmented_cumsum_varlen
title: Exclusive prefix sum within cu_seqlens segments, one program per segment and column block
op_family: scan
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32, int32, int64]
bound: memory
techniques: [segment-per-program, varlen-cu-seqlens, 2d-tile, carried-prefix-sum, fp32-accumulate]
status: reference
launcher: segmented_cumsum_varlen
tuning:
  block_l: [64, 16, 32, 128, 256]
  block_h: [32, 1, 8, 64, 128]
  num_warps: [4, 1, 2, 8]
args:
  x: {shape: [L, H], dtypes: [bf16, fp16, fp32, int32, int64], aliases: [values, g, gates]}
  cu_seqlens: {shape: [B1], dtypes: [int32, int64], aliases: [cu_seqlens_q, offsets]}
returns:
  - {name: y, shape: [L, H], dtype: x}
problem:
  shapes: [{seqlens: [5, 0, 70, 33], heads: 3}, {seqlens: [100, 1], heads: 0}]
  dtypes: [fp32, bf16]
  atol: 0.02
  rtol: 0.02
measured: []
---
For packed variable-length sequences (segment b is rows cu_seqlens[b] .. cu_seqlens[b + 1] - 1 of
x), y[t, h] = sum of x[s, h] over the rows s of t's segment that come before t: an exclusive
cumsum that restarts at 0 at every segment start (per-token offsets inside a request, or the
cumulative log-gates of chunked linear attention per head). The grid is (segments, H / BLOCK_H);
each program reads its segment's bounds from cu_seqlens and walks its rows in (BLOCK_L x BLOCK_H)
tiles: tl.cumsum along the rows, minus the tile itself (exclusive), plus a per-column carry that
then grows by the tile's column sums. The trip count is the segment's own length, so programs of
short segments finish early; there is no search for segment boundaries. Bytes: one read and one
write per element; cu_seqlens is read twice per program. Floats accumulate in fp32 (rounded once at
the store); integers in int64 and return int64 (as torch.cumsum). Limits: cu_seqlens must start at
0, be non-decreasing and end at L (not checked on the device; rows past the end are left unwritten);
one long segment is serialised in one program per column block (a decoupled look-back would split
it); a 1-D x is taken as (L, 1).
"""

import torch
import triton
import triton.language as tl

_FLOATS = (torch.bfloat16, torch.float16, torch.float32)
_INTS = (torch.int32, torch.int64)


@triton.jit
def _segmented_cumsum_varlen_kernel(
    # pointers
    x_ptr,
    y_ptr,
    cu_ptr,  # (B + 1,) segment starts, then the total length
    # sizes
    H,
    # strides (elements)
    stride_xl,
    stride_xh,
    stride_yl,
    stride_yh,
    # meta
    IS_INT: tl.constexpr,
    BLOCK_L: tl.constexpr,
    BLOCK_H: tl.constexpr,
):
    seg = tl.program_id(0)
    offs_h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    mask_h = offs_h < H
    acc_dtype = tl.int64 if IS_INT else tl.float32  # int64 for ints, fp32 for floats
    # int64 row indices: row * stride can pass 2^31 elements
    seg_start = tl.load(cu_ptr + seg).to(tl.int64)
    seg_len = tl.load(cu_ptr + seg + 1).to(tl.int64) - seg_start

    carry = tl.zeros((BLOCK_H,), acc_dtype)  # per-column sum of the segment's earlier tiles
    for start in range(0, seg_len, BLOCK_L):
        offs_l = start + tl.arange(0, BLOCK_L)
        mask = (offs_l < seg_len)[:, None] & mask_h[None, :]
        rows = seg_start + offs_l
        x_ptrs = x_ptr + rows[:, None] * stride_xl + offs_h[None, :] * stride_xh
        x = tl.load(x_ptrs, mask=mask, other=0).to(acc_dtype)
        y = tl.cumsum(x, axis=0) - x + carry[None, :]  # exclusive scan of the tile plus the carry
        y_ptrs = y_ptr + rows[:, None] * stride_yl + offs_h[None, :] * stride_yh
        tl.store(y_ptrs, y.to(y_ptr.dtype.element_ty), mask=mask)
        carry += tl.sum(x, axis=0)  # masked rows loaded 0


def _launch_config(h: int) -> dict[str, int]:
    """Return the tile: up to 128 columns, rows to about 2K elements, and warps."""
    block_h = min(triton.next_power_of_2(h), 128)
    return {"block_l": max(16, 2048 // block_h), "block_h": block_h, "num_warps": 4}


def segmented_cumsum_varlen(
    x: torch.Tensor,
    cu_seqlens: torch.Tensor,
    *,
    block_l: int | None = None,
    block_h: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return the exclusive prefix sum of x along its rows, restarting at every segment.

    Args:
        x: (L, H) or (L,) bf16/fp16/fp32/int32/int64 packed segments.
        cu_seqlens: (B + 1,) int32/int64 segment boundaries: 0, ..., L, non-decreasing.
        block_l: Rows per tile (power of two); None picks by H.
        block_h: Columns per program (power of two); None = min(next_pow2(H), 128).
        num_warps: Warps per program; None = 4.

    Returns:
        y: same shape as ``x``; x's dtype for floats, int64 for integers.

    Raises:
        ValueError: Wrong ranks or dtypes, or cu_seqlens on another device.
    """
    if x.dim() not in (1, 2) or x.dtype not in _FLOATS + _INTS:
        raise ValueError(
            f"x must be (L, H) or (L,) bf16/fp16/fp32/int32/int64; got {tuple(x.shape)} {x.dtype}"
        )
    if cu_seqlens.dim() != 1 or cu_seqlens.numel() < 1 or cu_seqlens.dtype not in _INTS:
        raise ValueError(
            f"cu_seqlens must be (B + 1,) int32/int64 with B >= 0; got "
            f"{tuple(cu_seqlens.shape)} {cu_seqlens.dtype}"
        )
    if cu_seqlens.device != x.device:
        raise ValueError(f"cu_seqlens is on {cu_seqlens.device}, x on {x.device}; move one")
    x2 = x if x.dim() == 2 else x[:, None]
    is_int = x.dtype in _INTS
    y = torch.empty(x2.shape, dtype=torch.int64 if is_int else x.dtype, device=x.device)
    num_segments = cu_seqlens.numel() - 1
    if y.numel() == 0 or num_segments == 0:
        return y.reshape(x.shape)
    h = x2.shape[1]
    cfg = _launch_config(h)
    given = {"block_l": block_l, "block_h": block_h, "num_warps": num_warps}
    cfg.update({key: value for key, value in given.items() if value is not None})
    grid = (num_segments, triton.cdiv(h, cfg["block_h"]))
    _segmented_cumsum_varlen_kernel[grid](
        x2, y, cu_seqlens.contiguous(),
        h,
        x2.stride(0), x2.stride(1), y.stride(0), y.stride(1),
        IS_INT=is_int, BLOCK_L=cfg["block_l"], BLOCK_H=cfg["block_h"],
        num_warps=cfg["num_warps"],
    )  # fmt: skip
    return y.reshape(x.shape)


def reference(x: torch.Tensor, cu_seqlens: torch.Tensor) -> torch.Tensor:
    """Return the per-segment exclusive cumsum (fp32 for floats, cast back; int64 for ints)."""
    is_int = x.dtype in _INTS
    xs = x.long() if is_int else x.float()
    y = torch.empty_like(xs)
    bounds = cu_seqlens.tolist()
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        seg = xs[lo:hi]
        y[lo:hi] = torch.cumsum(seg, dim=0) - seg
    return y if is_int else y.to(x.dtype)


def make_inputs(shape: dict, dtype: torch.dtype = torch.float32, device: str = "cpu") -> dict:
    """Return ``{"x", "cu_seqlens"}`` for ``{"seqlens": [...], "heads"}``.

    Floats ~ N(0, 1), ints in [0, 100); cu_seqlens is int32. ``heads`` 0 gives a 1-D x.
    """
    lens = torch.tensor(shape["seqlens"], dtype=torch.int64)
    cu = torch.zeros(lens.numel() + 1, dtype=torch.int32)
    cu[1:] = torch.cumsum(lens, 0)
    total, heads = int(cu[-1]), shape.get("heads", 0)
    size = (total, heads) if heads else (total,)
    if dtype in _INTS:
        x = torch.randint(0, 100, size, device=device, dtype=dtype)
    else:
        x = torch.randn(size, device=device).to(dtype)
    return {"x": x, "cu_seqlens": cu.to(device)}
