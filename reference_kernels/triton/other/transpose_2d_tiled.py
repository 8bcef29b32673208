"""
---
id: transpose_2d_tiled
title: Tiled 2-D transpose with coalesced loads and stores (tile transposed in registers)
op_family: other
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [2d-tile, register-transpose, coalesced-store, grouped-tile-order]
status: reference
launcher: transpose_2d_tiled
tuning:
  block_m: [64, 16, 32, 128]
  block_n: [64, 16, 32, 128]
  num_warps: [4, 1, 2, 8]
args:
  x: {shape: [M, N], dtypes: [bf16, fp16, fp32, int32, int8], aliases: [input]}
returns:
  - {name: y, shape: [N, M], dtype: x}
problem:
  shapes: [{rows: 70, cols: 33}, {rows: 1, cols: 130}]
  dtypes: [fp32, bf16]
measured: []
---
y = x.T materialised contiguously. A naive element-wise transpose reads rows and writes columns, so
one side of every warp access is strided by the row length and each 4-byte element costs a 32-byte
sector. Here each program loads a BLOCK_M x BLOCK_N tile of x with rows along the fast axis
(coalesced), transposes it in registers with tl.trans (the compiler routes it through shared
memory), and stores the BLOCK_N x BLOCK_M result with y's rows along the fast axis (coalesced
again). Bytes per element: one read and one write, the minimum. Tiles are visited column-block
major within each row block so neighbouring programs share DRAM pages on both sides. Wins for any
matrix wider than a few dozen elements; a 64 x 64 fp32 tile is 16 KB of shared memory per program.
Limits: 2-D only (batch by reshaping); strides are arbitrary on input but the output is contiguous;
exact for every dtype (a copy).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _transpose_2d_kernel(
    # pointers
    x_ptr,
    y_ptr,
    # sizes
    M,
    N,
    # strides (elements)
    stride_xm,
    stride_xn,
    stride_yn,
    # meta
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rows = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)  # int64: offsets may pass 2^31
    cols = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)).to(tl.int64)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    tile = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :] * stride_xn, mask=mask)
    # y[c, r] = x[r, c]: the transposed tile has x's columns as rows, stored along y's fast axis
    mask_t = (cols[:, None] < N) & (rows[None, :] < M)
    tl.store(y_ptr + cols[:, None] * stride_yn + rows[None, :], tl.trans(tile), mask=mask_t)


def transpose_2d_tiled(
    x: torch.Tensor,
    *,
    block_m: int = 64,
    block_n: int = 64,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return x.T as a new contiguous tensor.

    Args:
        x: (M, N) of any float or integer dtype, any strides.
        block_m: Tile rows of x (a power of two >= 16).
        block_n: Tile columns of x (a power of two >= 16).
        num_warps: Warps per program; None picks by tile size.

    Returns:
        y: (N, M), dtype of ``x``, contiguous.

    Raises:
        ValueError: x is not 2-D, is bool, or a block size is not a power of two >= 16.
    """
    if x.dim() != 2:
        raise ValueError(f"x must be 2-D; got shape {tuple(x.shape)} (reshape batches first)")
    if x.dtype == torch.bool:
        raise ValueError("x must not be bool; view it as uint8 first")
    for name, value in (("block_m", block_m), ("block_n", block_n)):
        if value < 16 or value & (value - 1):
            raise ValueError(f"{name} must be a power of two >= 16; got {value}")
    m, n = x.shape
    y = torch.empty((n, m), dtype=x.dtype, device=x.device)
    if y.numel() == 0:
        return y
    grid = (triton.cdiv(m, block_m), triton.cdiv(n, block_n))
    _transpose_2d_kernel[grid](
        x, y,
        m, n,
        x.stride(0), x.stride(1), y.stride(0),
        BLOCK_M=block_m, BLOCK_N=block_n,
        num_warps=num_warps or (8 if block_m * block_n >= 8192 else 4),
    )  # fmt: skip
    return y


def reference(x: torch.Tensor) -> torch.Tensor:
    """Return x.T contiguous."""
    return x.t().contiguous()


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"x"}`` for ``shape = {"rows", "cols"}``."""
    return {"x": torch.randn(shape["rows"], shape["cols"], device=device).to(dtype)}
