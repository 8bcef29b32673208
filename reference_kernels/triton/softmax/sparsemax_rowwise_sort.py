"""
---
id: sparsemax_rowwise_sort
title: Sparsemax per row by an in-register sort, a cumulative sum and the threshold tau
op_family: softmax
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [fp32, fp16, bf16]
bound: compute
techniques: [row-per-program, in-register-sort, bitonic-sort, prefix-sum, threshold, fp32-math]
status: reference
launcher: sparsemax_rowwise_sort
tuning:
  num_warps: [4, 1, 2, 8]
args:
  x: {shape: [..., N], dtypes: [fp32, fp16, bf16], aliases: [logits, input, z]}
returns:
  - {name: p, shape: [..., N], dtype: x}
problem:
  shapes: [{rows: 3, cols: 50}, {rows: 2, cols: 7}]
  dtypes: [fp32, bf16]
  atol: 0.02
  rtol: 0.02
measured: []
---
Sparsemax (Martins and Astudillo, 2016): the Euclidean projection of a row z onto the probability
simplex, p = max(z - tau, 0), which unlike softmax gives exact zeros. One program per row loads the
whole row (BLOCK_N = next_pow2(N), padding = -inf), sorts a copy descending with tl.sort (a bitonic
network in registers), takes the inclusive prefix sum c_k of the sorted values (tl.cumsum) and
finds the support size k* = #{k : 1 + k * z_(k) > c_k} (the condition holds exactly for k = 1..k*,
so a count suffices, no search); then tau = (c_(k*) - 1) / k* and the ORIGINAL order is written as
max(z - tau, 0). All math in fp32, rounded once. Bytes per element: 1 read + 1 write; the sort is
O(N log^2 N) compare-swaps, so the kernel is compute-bound for rows past a few hundred. Limits: N <=
8192 (the row and its sorted copy live in registers); for wide vocab rows a bisection on tau (no
sort) is the better design; NaNs are not handled.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _sparsemax_rowwise_sort_kernel(
    # pointers
    x_ptr,
    p_ptr,
    # sizes
    N,
    # strides (elements; the last dim is contiguous)
    stride_xm,
    stride_pm,
    # meta
    BLOCK_N: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride can pass 2^31 elements
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    z = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=float("-inf")).to(tl.float32)

    z_sorted = tl.sort(z, descending=True)  # padding (-inf) goes last
    # padding must not poison the prefix sum: add 0 for it (it is never in the support anyway)
    csum = tl.cumsum(tl.where(z_sorted == float("-inf"), 0.0, z_sorted), axis=0)
    k = (cols + 1).to(tl.float32)
    in_support = (1.0 + k * z_sorted > csum) & (cols < N)
    k_star = tl.sum(in_support.to(tl.int32), axis=0)  # >= 1: k = 1 always qualifies
    c_star = tl.sum(tl.where(cols == k_star - 1, csum, 0.0), axis=0)
    tau = (c_star - 1.0) / k_star.to(tl.float32)

    p = tl.maximum(z - tau, 0.0)
    tl.store(p_ptr + row * stride_pm + cols, p.to(p_ptr.dtype.element_ty), mask=mask)


def sparsemax_rowwise_sort(
    x: torch.Tensor,
    *,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return sparsemax(x) over the last dimension (rows sum to 1, with exact zeros).

    Args:
        x: (..., N) fp32/fp16/bf16, last dimension contiguous (copied otherwise); finite values.
        num_warps: Warps per program; None picks by row width.

    Returns:
        p: same shape and dtype as ``x``, contiguous; computed in fp32, rounded once.

    Raises:
        ValueError: x has no dimension, is not floating point, or N is 0 or above 8192.
    """
    if x.dim() == 0 or not x.is_floating_point():
        raise ValueError(f"x must be a float tensor with >= 1 dimension; got {x.dtype} {x.shape}")
    n = x.shape[-1]
    if not 1 <= n <= 8192:
        raise ValueError(f"row width N must be in 1..8192 (sorted in registers); got {n}")
    x2 = x.reshape(-1, n)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    p = torch.empty((x2.shape[0], n), dtype=x.dtype, device=x.device)
    if p.numel() == 0:
        return p.reshape(x.shape)
    block_n = triton.next_power_of_2(n)
    warps = num_warps if num_warps is not None else min(max(block_n // 512, 1), 8)
    _sparsemax_rowwise_sort_kernel[(x2.shape[0],)](
        x2, p,
        n,
        x2.stride(0), p.stride(0),
        BLOCK_N=block_n,
        num_warps=warps,
    )  # fmt: skip
    return p.reshape(x.shape)


def reference(x: torch.Tensor) -> torch.Tensor:
    """Return sparsemax over the last dimension by sort + cumsum in fp32, cast to x's dtype."""
    z = x.float()
    z_sorted = torch.sort(z, dim=-1, descending=True).values
    csum = z_sorted.cumsum(dim=-1)
    k = torch.arange(1, z.shape[-1] + 1, device=z.device, dtype=z.dtype)
    k_star = (1.0 + k * z_sorted > csum).sum(dim=-1, keepdim=True)
    tau = (csum.gather(-1, k_star - 1) - 1.0) / k_star.to(z.dtype)
    return torch.clamp(z - tau, min=0.0).to(x.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"x"}`` for ``shape = {"rows", "cols"}``: x ~ N(0, 1) (a support of a few)."""
    return {"x": torch.randn(shape["rows"], shape["cols"], device=device).to(dtype)}
