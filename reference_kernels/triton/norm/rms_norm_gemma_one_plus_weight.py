"""
---
id: rms_norm_gemma_one_plus_weight
title: Gemma RMSNorm, x * rsqrt(mean(x^2) + eps) * (1 + w) in fp32, a tile of rows per program
op_family: norm
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [multi-row-tile, one-plus-weight, fp32-accumulate, single-rounding]
status: reference
launcher: rms_norm_gemma_one_plus_weight
tuning:
  block_m: [4, 1, 2, 8, 16]
  num_warps: [4, 1, 2, 8]
args:
  x: {shape: [..., N], dtypes: [bf16, fp16, fp32], aliases: [hidden_states, input]}
  weight: {shape: [N], dtypes: [float], aliases: [w]}
  eps: {type: float, default: 1.0e-6, aliases: [epsilon, variance_epsilon, norm_eps, rms_norm_eps]}
returns:
  - {name: y, shape: [..., N], dtype: x}
problem:
  shapes: [{rows: 5, hidden: 300}, {rows: 9, hidden: 64}]
  dtypes: [fp32, bf16]
  atol: 0.02
  rtol: 0.02
measured: []
---
Gemma-style RMSNorm: the checkpoint stores the weight as an offset from one, so y = x *
rsqrt(mean(x^2) + eps) * (1 + w), and (unlike Llama's RMSNorm, which rounds x * rsqrt(...) to the
activation dtype before the weight multiply) the whole product, including 1 + w, is formed in fp32
and rounded once. Passing such a weight to a plain RMSNorm kernel gives outputs near zero, so this
is a different operator, not a tuning of rms_norm_rowwise. Design: program i owns a (BLOCK_M,
BLOCK_N) tile of BLOCK_M rows with the whole (power-of-two padded) row in registers; the weight row
is loaded and turned into 1 + w once per program and reused by its BLOCK_M rows; the sum of squares
reduces along axis 1 in fp32. Bytes: one read and one write per element (4 bytes in bf16) plus the
weight once per program. Wins on short-to-medium rows (N <= 8192) with many tokens; limits: rows
wider than 65536 do not fit, and decode batches with few rows leave SMs idle (block_m = 1 then).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _rms_norm_gemma_kernel(
    # pointers
    x_ptr,
    w_ptr,
    y_ptr,
    # sizes
    M,
    N,
    # strides (elements; the last dim is contiguous)
    stride_xm,
    stride_ym,
    # scalars
    eps,
    # meta
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    cmask = cols < N
    mask = (rows < M)[:, None] & cmask[None, :]
    rows64 = rows.to(tl.int64)  # int64: rows * stride can pass 2^31 elements
    # the Gemma weight is an offset from one; form 1 + w in fp32 once per program
    gain = 1.0 + tl.load(w_ptr + cols, mask=cmask, other=0.0).to(tl.float32)
    x = tl.load(x_ptr + rows64[:, None] * stride_xm + cols[None, :], mask=mask, other=0.0)
    x = x.to(tl.float32)
    inv_rms = tl.rsqrt(tl.sum(x * x, axis=1) / N + eps)  # padded lanes hold 0
    y = x * inv_rms[:, None] * gain[None, :]
    tl.store(y_ptr + rows64[:, None] * stride_ym + cols[None, :], y.to(y_ptr.dtype.element_ty),
             mask=mask)  # fmt: skip


def rms_norm_gemma_one_plus_weight(
    x: torch.Tensor,
    weight: torch.Tensor,
    eps: float = 1e-6,
    *,
    block_m: int = 4,
    num_warps: int = 4,
) -> torch.Tensor:
    """Return x * rsqrt(mean(x^2) + eps) * (1 + weight) over the last dimension.

    Args:
        x: (..., N) bf16/fp16/fp32, last dimension contiguous.
        weight: (N,) any float dtype; the Gemma offset-from-one weight.
        eps: Added to mean(x^2) before the reciprocal square root.
        block_m: Rows per program (a power of two).
        num_warps: Warps per program.

    Returns:
        y: same shape and dtype as ``x``.

    Raises:
        ValueError: weight is not (N,), the row is wider than 65536 or block_m is bad.
    """
    n = x.shape[-1]
    if weight.shape != (n,):
        raise ValueError(f"weight must be ({n},) for x {tuple(x.shape)}; got {tuple(weight.shape)}")
    if n > 65536:
        raise ValueError(f"row width {n} > 65536 does not fit in registers")
    if block_m < 1 or block_m & (block_m - 1):
        raise ValueError(f"block_m {block_m} must be a power of two >= 1")
    x2 = x.reshape(-1, n)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    m = x2.shape[0]
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if y.numel() == 0:
        return y.reshape(x.shape)
    _rms_norm_gemma_kernel[(triton.cdiv(m, block_m),)](
        x2, weight.contiguous(), y,
        m, n,
        x2.stride(0), y.stride(0),
        eps,
        BLOCK_M=block_m, BLOCK_N=triton.next_power_of_2(n),
        num_warps=num_warps,
    )  # fmt: skip
    return y.reshape(x.shape)


def reference(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Return the Gemma RMSNorm in fp32 PyTorch, cast to x's dtype once at the end."""
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps)
    return (y * (1.0 + weight.float())).to(x.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"x", "weight"}`` for ``shape = {"rows", "hidden"}``: x ~ N(0, 1), w ~ 0.1 N."""
    rows, hidden = shape["rows"], shape["hidden"]
    x = torch.randn(rows, hidden, device=device).to(dtype)
    weight = (0.1 * torch.randn(hidden, device=device)).to(dtype)
    return {"x": x, "weight": weight}
