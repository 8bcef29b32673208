"""
---
id: softmax_multirow
title: Row softmax for short rows, several rows per program in one 2-D register tile
op_family: softmax
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [fp32, fp16, bf16]
bound: memory
techniques: [multi-row-tile, 2d-tile, max-subtraction, fp32-accumulate, single-read]
status: reference
launcher: softmax_multirow
tuning:
  block_m: [8, 1, 2, 4, 16, 32]
  num_warps: [4, 1, 2, 8]
args:
  x: {shape: [..., N], dtypes: [fp32, fp16, bf16], aliases: [logits, input, scores]}
returns:
  - {name: y, shape: [..., N], dtype: x}
problem:
  shapes: [{rows: 7, cols: 300}, {rows: 33, cols: 64}]
  dtypes: [fp32, bf16]
  atol: 0.02
  rtol: 0.02
measured: []
---
Softmax over the last dimension when rows are short (attention scores of a few hundred keys, MoE
router logits, per-head gates): each program loads a BLOCK_M x BLOCK_N tile holding BLOCK_M whole
rows, takes the row max and the row sum of exp(x - max) along axis 1 in fp32, and stores
exp(x - max) / sum. x is read once and y written once (4 bytes per element in bf16, 8 in fp32), one
exponential per element. With one row per program a 64-wide row keeps a program busy for a few
hundred cycles and the launch grid has millions of entries; packing rows gives each warp full
vectors and amortises the program start. Limits: the whole tile lives in registers, so BLOCK_M *
next_pow2(N) is capped at 16384 elements (rows wider than 8192 need softmax_online); logits below
-inf behave like -inf rows, and an all -inf row gives NaN as torch does.
"""

import torch
import triton
import triton.language as tl

MAX_TILE = 16384  # elements of the register tile (BLOCK_M * BLOCK_N)
MAX_N = 8192


@triton.jit
def _softmax_multirow_kernel(
    # pointers
    x_ptr,
    y_ptr,
    # sizes
    M,
    N,
    # strides (elements; the last dim is contiguous)
    stride_xm,
    stride_ym,
    # meta
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    pid = tl.program_id(0)
    rows = (pid * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)  # int64: row * stride may pass 2^31
    cols = tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    x = tl.load(
        x_ptr + rows[:, None] * stride_xm + cols[None, :], mask=mask, other=float("-inf")
    ).to(tl.float32)
    row_max = tl.max(x, axis=1)
    # padded rows (beyond M) are all -inf: max 0 and sum 1 keep them NaN-free; they are never stored
    live = rows < M
    row_max = tl.where(live, row_max, 0.0)
    e = tl.exp(x - row_max[:, None])
    denom = tl.where(live, tl.sum(e, axis=1), 1.0)
    y = e / denom[:, None]
    tl.store(
        y_ptr + rows[:, None] * stride_ym + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask
    )


def softmax_multirow(
    x: torch.Tensor,
    *,
    block_m: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return softmax(x) over the last dimension, BLOCK_M rows per program.

    Args:
        x: (..., N) fp32/fp16/bf16 with N <= 8192.
        block_m: Rows per program (a power of two); None picks to fill a ~4096-element tile.
        num_warps: Warps per program; None = 4.

    Returns:
        y: same shape and dtype as ``x``, contiguous.

    Raises:
        ValueError: Unsupported dtype, a 0-d x, N > 8192, or a tile over 16384 elements.
    """
    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise ValueError(f"x must be fp32/fp16/bf16; got {x.dtype}")
    if x.dim() == 0:
        raise ValueError("x must be at least 1-D (softmax runs over the last dimension)")
    n = x.shape[-1]
    if n > MAX_N:
        raise ValueError(f"row width {n} > {MAX_N}: use softmax_online for wide rows")
    block_n = triton.next_power_of_2(max(n, 1))
    if block_m is None:
        block_m = max(1, min(32, 4096 // block_n))
    if block_m < 1 or block_m & (block_m - 1):
        raise ValueError(f"block_m must be a power of two >= 1; got {block_m}")
    if block_m * block_n > MAX_TILE:
        raise ValueError(
            f"block_m {block_m} x row block {block_n} = {block_m * block_n} elements > {MAX_TILE}; "
            "lower block_m"
        )
    x2 = x.reshape(-1, n)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    m = x2.shape[0]
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if y.numel() == 0:
        return y.reshape(x.shape)
    grid = (triton.cdiv(m, block_m),)
    _softmax_multirow_kernel[grid](
        x2, y,
        m, n,
        x2.stride(0), y.stride(0),
        BLOCK_M=block_m, BLOCK_N=block_n,
        num_warps=num_warps or 4,
    )  # fmt: skip
    return y.reshape(x.shape)


def reference(x: torch.Tensor) -> torch.Tensor:
    """Return softmax over the last dimension computed in fp32 and cast to x's dtype."""
    return torch.softmax(x.float(), dim=-1).to(x.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"x"}`` for ``shape = {"rows", "cols"}``: x ~ 3 * N(0, 1) (attention scores)."""
    return {"x": (3.0 * torch.randn(shape["rows"], shape["cols"], device=device)).to(dtype)}
