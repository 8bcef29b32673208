"""
---
id: rms_norm_quant_fp8_looped
title: Residual add, RMSNorm and per-token FP8 quantisation for wide rows in two chunked passes
op_family: quantization
dsl: triton
vendor: nvidia
arch: [sm_89, sm_90]
dtypes: [bf16, fp16, fp32, fp8_e4m3fn]
bound: memory
techniques: [row-per-program, chunked-loop, two-pass, fused-residual-add, fused-norm-quant,
  absmax-reduction, fp8-e4m3]
status: reference
launcher: rms_norm_quant_fp8_looped
tuning:
  block_n: [1024, 256, 512, 2048, 4096]
  num_warps: [4, 1, 2, 8]
args:
  x: {shape: [T, N], dtypes: [bf16, fp16, fp32], aliases: [input, hidden_states]}
  residual: {shape: [T, N], like: x, aliases: [residual_in, res]}
  weight: {shape: [N], dtypes: [float], aliases: [w]}
  eps: {type: float, default: 1.0e-5, aliases: [epsilon, variance_epsilon, norm_eps, rms_norm_eps]}
returns:
  - {name: q, shape: [T, N], dtype: fp8_e4m3fn}
  - {name: scale, shape: [T, 1], dtype: fp32}
  - {name: residual_out, shape: [T, N], dtype: x}
problem:
  shapes: [{rows: 3, hidden: 700}, {rows: 5, hidden: 128}]
  dtypes: [fp32, bf16]
  atol: 0.02
  rtol: 0.02
measured: []
---
atrex30 fused_rmsnorm_quant for rows of any width: residual_out = round(x + residual) to the
activation dtype; y = r * rsqrt(mean(r^2) + eps) * w in fp32 from the rounded sum r; per row scale =
absmax(y) / 448 (1 for an all-zero row) and q = fp8_e4m3fn(clamp(y / scale, +-448)). One program
per row walks it in BLOCK_N chunks twice. The trick that saves the third pass a naive chunked
kernel needs (sum of squares, then absmax of y, then quantise): inv_rms is one positive number per
row, so absmax(y) = absmax(r * w) * inv_rms, and pass 1 accumulates both sum(r^2) and max|r * w|
(element-wise fp32 running vectors, one tree reduction each after the loop) while it stores
residual_out. Pass 2 recomputes r from x and residual (L2 hits for rows up to a few MB; it does not
read residual_out back, which other threads of the program wrote), scales, quantises and stores q.
Bytes per bf16 element: 4 read twice (the second from L2) + 2 + 1 written. Registers stay bounded
for any width, so this is the design past the 65536-column limit of the register-resident kernels
and for wide rows at small T. Limits: one program per row (few SMs busy at decode); scale is
rounded once more than the reference's (max|r w| * inv_rms against max|r inv_rms w|: an fp32 ulp);
e4m3fn only.
"""

import torch
import triton
import triton.language as tl

FP8_MAX = 448.0  # largest finite float8_e4m3fn


@triton.jit
def _rms_norm_quant_fp8_looped_kernel(
    # pointers
    x_ptr,
    res_ptr,
    w_ptr,
    q_ptr,
    scale_ptr,
    res_out_ptr,
    # sizes
    N,
    # strides (elements; the last dim is contiguous)
    stride_xm,
    stride_rm,
    stride_qm,
    stride_om,
    # scalars
    eps,
    fp8_max,
    # meta
    BLOCK_N: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride can pass 2^31 elements
    offs = tl.arange(0, BLOCK_N)

    # pass 1: residual_out, running sum of r^2 and running max of |r * w|
    sum_sq = tl.zeros((BLOCK_N,), dtype=tl.float32)
    amax_rw = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        cols = start + offs
        mask = cols < N
        x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
        r = tl.load(res_ptr + row * stride_rm + cols, mask=mask, other=0.0).to(tl.float32)
        h = (x + r).to(res_out_ptr.dtype.element_ty)  # rounded, as stored
        tl.store(res_out_ptr + row * stride_om + cols, h, mask=mask)
        h = h.to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        sum_sq += h * h
        amax_rw = tl.maximum(amax_rw, tl.abs(h * w))
    inv_rms = tl.rsqrt(tl.sum(sum_sq, axis=0) / N + eps)
    amax = tl.max(amax_rw, axis=0) * inv_rms  # inv_rms > 0 commutes with the max
    scale = tl.where(amax == 0.0, 1.0, amax / fp8_max)
    tl.store(scale_ptr + row, scale)

    # pass 2: recompute the rounded sum, normalise, quantise
    for start in range(0, N, BLOCK_N):
        cols = start + offs
        mask = cols < N
        x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
        r = tl.load(res_ptr + row * stride_rm + cols, mask=mask, other=0.0).to(tl.float32)
        h = (x + r).to(res_out_ptr.dtype.element_ty).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        q = tl.clamp(h * inv_rms * w / scale, -fp8_max, fp8_max)
        tl.store(q_ptr + row * stride_qm + cols, q.to(q_ptr.dtype.element_ty), mask=mask)


def rms_norm_quant_fp8_looped(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float = 1e-5,
    *,
    block_n: int | None = None,
    num_warps: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Return (q, scale, residual_out) for q * scale ~ rmsnorm(x + residual) * weight.

    Args:
        x: (T, N) bf16/fp16/fp32, last dimension contiguous; any N.
        residual: (T, N) same dtype as x (never written).
        weight: (N,) any float dtype.
        eps: Added to mean(r^2) before the reciprocal square root.
        block_n: Chunk width (power of two); None = min(next_pow2(N), 1024).
        num_warps: Warps per program; None picks by chunk width.

    Returns:
        (q, scale, residual_out): q (T, N) float8_e4m3fn; scale (T, 1) fp32; residual_out (T, N)
        = x + residual rounded to x's dtype.

    Raises:
        ValueError: The shapes or dtypes do not match, or block_n is not a power of two.
    """
    if x.dim() != 2 or weight.shape != (x.shape[1],):
        raise ValueError(f"need x (T, N), weight (N,); got {tuple(x.shape)}, {tuple(weight.shape)}")
    if residual.shape != x.shape or residual.dtype != x.dtype:
        raise ValueError(
            f"residual must match x {tuple(x.shape)} {x.dtype}; "
            f"got {tuple(residual.shape)} {residual.dtype}"
        )
    if block_n is not None and (block_n < 1 or block_n & (block_n - 1)):
        raise ValueError(f"block_n must be a power of two; got {block_n}")
    x = x if x.stride(-1) == 1 else x.contiguous()
    residual = residual if residual.stride(-1) == 1 else residual.contiguous()
    t, n = x.shape
    q = torch.empty((t, n), dtype=torch.float8_e4m3fn, device=x.device)
    scale = torch.empty((t, 1), dtype=torch.float32, device=x.device)
    res_out = torch.empty((t, n), dtype=x.dtype, device=x.device)
    if t == 0 or n == 0:
        return q, scale.fill_(1.0), res_out
    bn = min(triton.next_power_of_2(n), 1024) if block_n is None else block_n
    warps = min(max(bn // 256, 1), 8) if num_warps is None else num_warps
    _rms_norm_quant_fp8_looped_kernel[(t,)](
        x, residual, weight.contiguous(), q, scale, res_out,
        n,
        x.stride(0), residual.stride(0), q.stride(0), res_out.stride(0),
        eps, FP8_MAX,
        BLOCK_N=bn,
        num_warps=warps,
    )  # fmt: skip
    return q, scale, res_out


def reference(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-5
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Return (q, scale, residual_out) computed in fp32 PyTorch (atrex30 fused_rmsnorm_quant)."""
    res_out = (x.float() + residual.float()).to(x.dtype)
    h = res_out.float()
    y = h * torch.rsqrt(h.pow(2).mean(dim=-1, keepdim=True) + eps) * weight.float()
    amax = y.abs().amax(dim=-1, keepdim=True)
    scale = torch.where(amax == 0, torch.ones_like(amax), amax / FP8_MAX)
    q = (y / scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return q, scale, res_out


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"x", "residual", "weight"}`` for ``shape = {"rows", "hidden"}``, all N(0, 1)."""
    rows, hidden = shape["rows"], shape["hidden"]
    return {
        "x": torch.randn(rows, hidden, device=device).to(dtype),
        "residual": torch.randn(rows, hidden, device=device).to(dtype),
        "weight": torch.randn(hidden, device=device).to(dtype),
    }
