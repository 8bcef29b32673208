"""
---
id: softmax_rowwise
title: Row softmax with one program per row and the whole row held in registers
op_family: softmax
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [fp32, fp16, bf16]
bound: memory
techniques: [row-per-program, single-pass, max-subtraction, fp32-accumulate]
status: reference
launcher: softmax_rowwise
tuning:
  num_warps: [4, 1, 2, 8, 16]
args:
  x: {shape: [..., N], dtypes: [fp32, fp16, bf16], aliases: [logits, input]}
returns:
  - {name: y, shape: [..., N], dtype: x}
problem:
  shapes: [{rows: 3, cols: 1000}, {rows: 33, cols: 64}]
  dtypes: [fp32, bf16]
measured: []
---
Softmax over the last dimension, y = exp(x - max(x)) / sum(exp(x - max(x))), with one program per
row: the program loads the whole row (padded to the next power of two, padding lanes -inf so they
add exp(-inf) = 0) into registers once, takes the max and the sum of exponentials in fp32, and
stores the scaled row, so each element is read once and written once (4 + 4 bytes per fp32
element). Subtracting the row max keeps exp finite for any logits. Limits: rows wider than 65536 do
not fit in registers (use softmax_online, which loops over the row); one program per row, so a few
rows (decode) leave most SMs idle; very wide rows at small num_warps spill registers.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _softmax_rowwise_kernel(
    # pointers
    x_ptr,
    y_ptr,
    # sizes
    N,
    # strides (elements; the last dim is contiguous)
    stride_xm,
    stride_ym,
    # meta
    BLOCK_N: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride can pass 2^31 elements
    offs = tl.arange(0, BLOCK_N)
    mask = offs < N

    # padding lanes are -inf: they never win the max and add exp(-inf) = 0 to the sum
    x = tl.load(x_ptr + row * stride_xm + offs, mask=mask, other=float("-inf")).to(tl.float32)
    row_max = tl.max(x, axis=0)
    num = tl.exp(x - row_max)
    den = tl.sum(num, axis=0)
    y = num * (1.0 / den)  # one division per row, a multiply per element
    tl.store(y_ptr + row * stride_ym + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


def _launch_config(n: int) -> dict[str, int]:
    """Return the row block (next power of two) and warps: about 8 to 16 elements per thread."""
    block_n = triton.next_power_of_2(n)
    num_warps = min(max(block_n // 512, 1), 16)
    return {"block_n": block_n, "num_warps": num_warps}


def softmax_rowwise(x: torch.Tensor, *, num_warps: int | None = None) -> torch.Tensor:
    """Return softmax(x) over the last dimension.

    Args:
        x: (..., N) fp32/fp16/bf16, last dimension contiguous (copied otherwise).
        num_warps: Warps per program; None picks by row width.

    Returns:
        y: same shape and dtype as ``x``, contiguous; computed in fp32, rounded once.

    Raises:
        ValueError: x has no dimension, or its row is empty or wider than 65536.
    """
    if x.dim() == 0:
        raise ValueError("x must have at least one dimension (the softmax runs over the last)")
    n = x.shape[-1]
    if n == 0 or n > 65536:
        raise ValueError(f"row width {n} must be in [1, 65536]; use softmax_online for wider rows")
    x2 = x.reshape(-1, n)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    y = torch.empty((x2.shape[0], n), dtype=x.dtype, device=x.device)
    if y.numel() == 0:
        return y.reshape(x.shape)
    cfg = _launch_config(n)
    if num_warps is not None:
        cfg["num_warps"] = num_warps
    _softmax_rowwise_kernel[(x2.shape[0],)](
        x2, y,
        n,
        x2.stride(0), y.stride(0),
        BLOCK_N=cfg["block_n"],
        num_warps=cfg["num_warps"],
    )  # fmt: skip
    return y.reshape(x.shape)


def reference(x: torch.Tensor) -> torch.Tensor:
    """Return softmax(x) over the last dimension computed in fp32 and cast to x's dtype."""
    return torch.softmax(x.float(), dim=-1).to(x.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"x"}`` for ``shape = {"rows", "cols"}``: logits 3 * N(0, 1) + a per-row offset."""
    rows, cols = shape["rows"], shape["cols"]
    x = 3.0 * torch.randn(rows, cols, device=device) + 10.0 * torch.randn(rows, 1, device=device)
    return {"x": x.to(dtype)}
