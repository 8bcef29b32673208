"""
---
id: l2_norm_split_row_two_kernel
title: Row-wise L2 normalisation split over (row tile, chunk) programs in two launches
op_family: norm
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [split-row, two-kernel, partial-sums, 2d-tile, deterministic-reduction, fp32-accumulate]
status: reference
launcher: l2_norm_split_row_two_kernel
tuning:
  block_n: [1024, 256, 512, 2048, 4096]
  block_m: [1, 2, 4, 8]
  num_warps: [4, 1, 2, 8]
args:
  x: {shape: [..., N], dtypes: [bf16, fp16, fp32], aliases: [hidden_states, input]}
  eps: {type: float, default: 1.0e-6, aliases: [epsilon, variance_epsilon, norm_eps, rms_norm_eps]}
returns:
  - {name: y, shape: [..., N], dtype: x}
problem:
  shapes: [{rows: 5, hidden: 3000}, {rows: 9, hidden: 200}]
  dtypes: [fp32, bf16]
  atol: 0.02
  rtol: 0.02
measured: []
---
atrex30 l2_norm: y = x * rsqrt(sum(x^2) + eps) per row, fp32 math, rounded once to x's dtype,
with each row spread over many programs. The rows are cut into C = cdiv(N, BLOCK_N) chunks and
both launches use the grid (cdiv(M, BLOCK_M), C), each program owning a (BLOCK_M rows, BLOCK_N
columns) tile. Launch 1 reduces its tile along the columns and writes BLOCK_M partial sums of
squares to an (M, C) fp32 scratch (no atomics: the result is bit-reproducible). Launch 2 reads the
C partials of its BLOCK_M rows as a (BLOCK_M, next_pow2(C)) tile, sums them in a fixed order, then
scales and stores its own tile. With BLOCK_M = 1 this is the few-wide-rows shape (a decode batch of
1..8 rows of 16k+ gets C programs per row instead of one); BLOCK_M > 1 keeps tiles large when M
grows, where rms_norm_split_row_two_pass stays one row per program. Bytes per bf16 element: 2 read
twice (the second often from L2) + 2 written, plus 8 C bytes per row of scratch traffic. Limits:
two launches (twice the launch floor, which dominates small problems); for many rows of
register-sized width the one-pass kernels win; C up to 65536.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _l2_partial_kernel(
    x_ptr,
    part_ptr,
    M,
    N,
    C,
    stride_xm,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    chunk = tl.program_id(1)
    cols = chunk * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    rows64 = rows.to(tl.int64)  # int64: rows * stride can pass 2^31 elements
    x = tl.load(x_ptr + rows64[:, None] * stride_xm + cols[None, :], mask=mask, other=0.0)
    x = x.to(tl.float32)
    tl.store(part_ptr + rows64 * C + chunk, tl.sum(x * x, axis=1), mask=rows < M)


@triton.jit
def _l2_scale_kernel(
    x_ptr,
    part_ptr,
    y_ptr,
    M,
    N,
    C,
    stride_xm,
    stride_ym,
    eps,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    chunk = tl.program_id(1)
    rows64 = rows.to(tl.int64)
    row_mask = rows < M
    parts_c = tl.arange(0, BLOCK_C)
    parts = tl.load(part_ptr + rows64[:, None] * C + parts_c[None, :],
                    mask=row_mask[:, None] & (parts_c[None, :] < C), other=0.0)  # fmt: skip
    inv_norm = tl.rsqrt(tl.sum(parts, axis=1) + eps)  # (BLOCK_M,)
    cols = chunk * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = row_mask[:, None] & (cols[None, :] < N)
    x = tl.load(x_ptr + rows64[:, None] * stride_xm + cols[None, :], mask=mask, other=0.0)
    y = x.to(tl.float32) * inv_norm[:, None]
    tl.store(y_ptr + rows64[:, None] * stride_ym + cols[None, :], y.to(y_ptr.dtype.element_ty),
             mask=mask)  # fmt: skip


def l2_norm_split_row_two_kernel(
    x: torch.Tensor,
    eps: float = 1e-6,
    *,
    block_n: int | None = None,
    block_m: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return x * rsqrt(sum(x^2) + eps) over the last dimension, each row split over programs.

    Args:
        x: (..., N) bf16/fp16/fp32, last dimension contiguous.
        eps: Added to sum(x^2) before the reciprocal square root.
        block_n: Columns per program (power of two); None = min(next_pow2(N), 1024).
        block_m: Rows per program (power of two); None = 1.
        num_warps: Warps per program; None picks by tile size.

    Returns:
        y: same shape and dtype as ``x``, contiguous.

    Raises:
        ValueError: x has no dimension, a block is not a power of two, or N / block_n > 65536.
    """
    if x.dim() == 0:
        raise ValueError("x must have at least one dimension (..., N); got a scalar")
    n = x.shape[-1]
    bn = min(triton.next_power_of_2(max(n, 1)), 1024) if block_n is None else block_n
    bm = 1 if block_m is None else block_m
    for name, value in (("block_n", bn), ("block_m", bm)):
        if value < 1 or value & (value - 1):
            raise ValueError(f"{name} must be a power of two; got {value}")
    chunks = triton.cdiv(n, bn)
    if chunks > 65536:
        raise ValueError(f"{chunks} chunks of {bn} per row > 65536; raise block_n")
    x2 = x.reshape(-1, n)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    m = x2.shape[0]
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if y.numel() == 0:
        return y.reshape(x.shape)
    partial = torch.empty((m, chunks), dtype=torch.float32, device=x.device)
    warps = min(max(bm * bn // 256, 1), 8) if num_warps is None else num_warps
    grid = (triton.cdiv(m, bm), chunks)
    _l2_partial_kernel[grid](
        x2, partial, m, n, chunks, x2.stride(0), BLOCK_M=bm, BLOCK_N=bn, num_warps=warps
    )
    _l2_scale_kernel[grid](
        x2, partial, y,
        m, n, chunks,
        x2.stride(0), y.stride(0),
        eps,
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_C=triton.next_power_of_2(chunks),
        num_warps=warps,
    )  # fmt: skip
    return y.reshape(x.shape)


def reference(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Return x * rsqrt(sum(x^2) + eps) computed in fp32 and cast to x's dtype."""
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).sum(dim=-1, keepdim=True) + eps)).to(x.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"x"}`` for ``shape = {"rows", "hidden"}``: x ~ N(0, 1) (atrex l2_norm scale)."""
    return {"x": torch.randn(shape["rows"], shape["hidden"], device=device).to(dtype)}
