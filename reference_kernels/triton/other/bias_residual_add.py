"""
---
id: bias_residual_add
title: out = x + bias + residual with a broadcast bias, flat vectorised with a 2-D row x column grid
op_family: other
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [2d-grid, broadcast-bias, vectorised, fp32-accumulate, bias-reuse]
status: reference
launcher: bias_residual_add
tuning:
  block_n: [1024, 256, 512, 2048, 4096]
  rows_per_program: [4, 1, 2, 8, 16]
  num_warps: [4, 1, 2, 8]
args:
  x: {shape: [..., N], dtypes: [bf16, fp16, fp32], aliases: [input, hidden_states]}
  bias: {shape: [N], dtypes: [bf16, fp16, fp32]}
  residual: {shape: [..., N], dtypes: [bf16, fp16, fp32]}
returns:
  - {name: out, shape: [..., N], dtype: x}
problem:
  shapes: [{rows: 7, hidden: 300}, {rows: 33, hidden: 64}]
  dtypes: [fp32, bf16]
  atol: 0.02
  rtol: 0.02
measured: []
---
The epilogue of a linear layer without a fused bias: out = x + bias + residual, bias broadcast over
all leading dimensions, summed in fp32 and rounded once (torch's x + bias + residual in bf16 rounds
twice). The grid is (column blocks, row groups): each program loads one BLOCK_N slice of the bias
once, keeps it in registers, and streams ROWS_PER_PROGRAM rows of x and residual through it with
contiguous BLOCK_N-wide vector loads, so the bias is read once per row group instead of once per
element and no modulo is needed to find a bias index. Bytes per bf16 element: 4 read, 2 written; one
add pair. Limits: the last dimension of x, residual and out is contiguous (others may be strided);
no in-place mode (out is a new tensor); the bias dtype may differ from
x's (it is read in its own dtype and upcast).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _bias_residual_add_kernel(
    # pointers
    x_ptr,
    bias_ptr,
    res_ptr,
    out_ptr,
    # sizes
    M,
    N,
    # strides (elements; the last dim is contiguous)
    stride_xm,
    stride_rm,
    stride_om,
    # meta
    BLOCK_N: tl.constexpr,
    ROWS_PER_PROGRAM: tl.constexpr,
):
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < N
    bias = tl.load(bias_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)  # once per program
    row0 = tl.program_id(1).to(tl.int64) * ROWS_PER_PROGRAM  # int64: row * stride may pass 2^31
    for i in range(ROWS_PER_PROGRAM):
        row = row0 + i
        mask = col_mask & (row < M)
        x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
        r = tl.load(res_ptr + row * stride_rm + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(
            out_ptr + row * stride_om + cols, (x + bias + r).to(out_ptr.dtype.element_ty), mask=mask
        )


def bias_residual_add(
    x: torch.Tensor,
    bias: torch.Tensor,
    residual: torch.Tensor,
    *,
    block_n: int | None = None,
    rows_per_program: int = 4,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return x + bias + residual summed in fp32, in x's dtype.

    Args:
        x: (..., N) bf16/fp16/fp32.
        bias: (N,) bf16/fp16/fp32.
        residual: same shape as ``x``, bf16/fp16/fp32.
        block_n: Columns per program (a power of two); None = min(next_pow2(N), 1024).
        rows_per_program: Rows each program streams through its bias slice (>= 1).
        num_warps: Warps per program; None picks by block_n.

    Returns:
        out: x's shape and dtype, contiguous.

    Raises:
        ValueError: Shapes that do not match, unsupported dtypes or bad tuning values.
    """
    floats = (torch.bfloat16, torch.float16, torch.float32)
    for name, tensor in (("x", x), ("bias", bias), ("residual", residual)):
        if tensor.dtype not in floats:
            raise ValueError(f"{name} must be bf16/fp16/fp32; got {tensor.dtype}")
    if x.dim() == 0 or residual.shape != x.shape:
        raise ValueError(
            f"residual must match x's shape {tuple(x.shape)} (>= 1-D); got {tuple(residual.shape)}"
        )
    n = x.shape[-1]
    if bias.shape != (n,):
        raise ValueError(
            f"bias must be ({n},) for x of shape {tuple(x.shape)}; got {tuple(bias.shape)}"
        )
    if block_n is None:
        block_n = min(triton.next_power_of_2(max(n, 1)), 1024)
    if block_n < 1 or block_n & (block_n - 1):
        raise ValueError(f"block_n must be a power of two; got {block_n}")
    if rows_per_program < 1:
        raise ValueError(f"rows_per_program must be >= 1; got {rows_per_program}")
    x2 = x.reshape(-1, n)
    r2 = residual.reshape(-1, n)
    x2 = x2 if x2.stride(-1) == 1 else x2.contiguous()
    r2 = r2 if r2.stride(-1) == 1 else r2.contiguous()
    m = x2.shape[0]
    out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if out.numel() == 0:
        return out.reshape(x.shape)
    grid = (triton.cdiv(n, block_n), triton.cdiv(m, rows_per_program))
    _bias_residual_add_kernel[grid](
        x2, bias.contiguous(), r2, out,
        m, n,
        x2.stride(0), r2.stride(0), out.stride(0),
        BLOCK_N=block_n, ROWS_PER_PROGRAM=rows_per_program,
        num_warps=num_warps or min(max(block_n // 256, 1), 8),
    )  # fmt: skip
    return out.reshape(x.shape)


def reference(x: torch.Tensor, bias: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    """Return (x + bias + residual) summed in fp32 and cast to x's dtype."""
    return (x.float() + bias.float() + residual.float()).to(x.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"x", "bias", "residual"}`` for ``shape = {"rows", "hidden"}``."""
    size = (shape["rows"], shape["hidden"])
    return {
        "x": torch.randn(size, device=device).to(dtype),
        "bias": torch.randn(shape["hidden"], device=device).to(dtype),
        "residual": torch.randn(size, device=device).to(dtype),
    }
