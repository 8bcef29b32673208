"""
---
id: l2_norm_looped
title: Row-wise L2 normalisation for very wide rows, one program per row in two chunked passes
op_family: norm
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [row-per-program, chunked-loop, two-pass, fp32-accumulate]
status: reference
launcher: l2_norm_looped
tuning:
  block_n: [2048, 512, 1024, 4096, 8192]
  num_warps: [4, 1, 2, 8]
args:
  x: {shape: [..., N], dtypes: [bf16, fp16, fp32], aliases: [hidden_states, input]}
  eps: {type: float, default: 1.0e-6, aliases: [epsilon, variance_epsilon, norm_eps, rms_norm_eps]}
returns:
  - {name: y, shape: [..., N], dtype: x}
problem:
  shapes: [{rows: 3, hidden: 3000}, {rows: 9, hidden: 200}]
  dtypes: [fp32, bf16]
  atol: 0.02
  rtol: 0.02
measured: []
---
atrex30 l2_norm: y = x * rsqrt(sum(x^2) + eps) per row (no weight, eps inside the root), fp32
math, one rounding to x's dtype. One program per row walks the row in BLOCK_N chunks twice: pass 1
accumulates x^2 into an element-wise fp32 vector (one tree reduction after the loop, so the sum's
rounding does not depend on the chunk count beyond the lane split), pass 2 reloads each chunk
(an L2 hit for rows up to a few MB), scales and stores. Registers hold one chunk whatever N is, so
rows of 64k..1M elements work at any num_warps without spilling, which the register-resident
l2_norm_rowwise / l2_norm_multirow cannot do past 65536. Bytes per bf16 element: 2 read twice (the
second from L2) + 2 written. Limits: one program per row, so a few wide rows use few SMs (the
split-row design spreads a row over many programs); for rows that fit in registers the second
read is pure overhead.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _l2_norm_looped_kernel(
    # pointers
    x_ptr,
    y_ptr,
    # sizes
    N,
    # strides (elements; the last dim is contiguous)
    stride_xm,
    stride_ym,
    # scalars
    eps,
    # meta
    BLOCK_N: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride can pass 2^31 elements
    offs = tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        cols = start + offs
        x = tl.load(x_ptr + row * stride_xm + cols, mask=cols < N, other=0.0).to(tl.float32)
        acc += x * x
    inv_norm = tl.rsqrt(tl.sum(acc, axis=0) + eps)
    for start in range(0, N, BLOCK_N):
        cols = start + offs
        mask = cols < N
        x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(
            y_ptr + row * stride_ym + cols, (x * inv_norm).to(y_ptr.dtype.element_ty), mask=mask
        )


def l2_norm_looped(
    x: torch.Tensor,
    eps: float = 1e-6,
    *,
    block_n: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return x * rsqrt(sum(x^2) + eps) over the last dimension, for rows of any width.

    Args:
        x: (..., N) bf16/fp16/fp32, last dimension contiguous.
        eps: Added to sum(x^2) before the reciprocal square root.
        block_n: Chunk width (power of two); None = min(next_pow2(N), 2048).
        num_warps: Warps per program; None picks by chunk width.

    Returns:
        y: same shape and dtype as ``x``, contiguous.

    Raises:
        ValueError: x has no dimension, or block_n is not a power of two.
    """
    if x.dim() == 0:
        raise ValueError("x must have at least one dimension (..., N); got a scalar")
    if block_n is not None and (block_n < 1 or block_n & (block_n - 1)):
        raise ValueError(f"block_n must be a power of two; got {block_n}")
    n = x.shape[-1]
    x2 = x.reshape(-1, n)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    y = torch.empty((x2.shape[0], n), dtype=x.dtype, device=x.device)
    if y.numel() == 0:
        return y.reshape(x.shape)
    bn = min(triton.next_power_of_2(n), 2048) if block_n is None else block_n
    warps = min(max(bn // 256, 1), 8) if num_warps is None else num_warps
    _l2_norm_looped_kernel[(x2.shape[0],)](
        x2, y,
        n,
        x2.stride(0), y.stride(0),
        eps,
        BLOCK_N=bn,
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
