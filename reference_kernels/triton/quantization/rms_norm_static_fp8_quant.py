"""
---
id: rms_norm_static_fp8_quant
title: RMSNorm then fp8 quantisation with a static per-tensor scale, row loop in two chunked passes
op_family: quantization
dsl: triton
vendor: nvidia
arch: [sm_89, sm_90]
dtypes: [bf16, fp16, fp32, fp8_e4m3fn]
bound: memory
techniques: [static-scale, fused-norm-quant, chunked-loop, two-pass-row, fp8-e4m3, fp32-accumulate]
status: reference
launcher: rms_norm_static_fp8_quant
tuning:
  block_n: [1024, 256, 512, 2048, 4096]
  num_warps: [4, 1, 2, 8]
args:
  x: {shape: [..., N], dtypes: [bf16, fp16, fp32], aliases: [input, hidden_states]}
  weight: {shape: [N], dtypes: [float], aliases: [w]}
  scale: {shape: [1], dtypes: [fp32], aliases: [input_scale, act_scale]}
  eps: {type: float, default: 1.0e-6, aliases: [epsilon, variance_epsilon, rms_norm_eps]}
returns:
  - {name: q, shape: [..., N], dtype: fp8_e4m3fn}
problem:
  shapes: [{rows: 3, hidden: 1000}, {rows: 17, hidden: 64}]
  dtypes: [fp32, bf16]
measured: []
---
vLLM-style rms_norm_static_fp8_quant: q = clamp(x * rsqrt(mean(x^2) + eps) * w / scale, -448, 448)
as float8_e4m3fn, where scale is a calibrated per-tensor fp32 scalar given as a one-element device
tensor (read by the kernel, so a CUDA graph can replay with a new value and no host sync). Because
the scale is known there is no absmax reduction and no scale output: unlike the dynamic per-token
kernels the row's values never need to be held together, so one program per row walks the row in
BLOCK_N chunks twice: pass 1 accumulates the sum of squares in an fp32 vector, pass 2 reloads each
chunk (from L2 for rows of up to a few hundred KB), multiplies by rsqrt(...) * w * (1 / scale) and
stores fp8. Any row width runs at a fixed register footprint. Bytes: 2 x 2 read (the second mostly
from L2) + 1 written per bf16 element. Limits: one row per program, so decode batches use few SMs;
values beyond the calibrated range saturate at +-448 by design; no residual add (see
rms_norm_quant_fp8_fused for the dynamic, fused-add variant).
"""

import torch
import triton
import triton.language as tl

FP8_MAX = 448.0  # largest finite float8_e4m3fn


@triton.jit
def _rms_norm_static_fp8_kernel(
    # pointers
    x_ptr,
    w_ptr,
    scale_ptr,
    q_ptr,
    # sizes
    N,
    # strides (elements; the last dim is contiguous)
    stride_xm,
    stride_qm,
    # scalars
    eps,
    fp8_max,
    # meta
    BLOCK_N: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride can pass 2^31 elements
    offs = tl.arange(0, BLOCK_N)
    x_row = x_ptr + row * stride_xm

    # pass 1: sum of squares in an fp32 vector, reduced once at the end
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        cols = start + offs
        x = tl.load(x_row + cols, mask=cols < N, other=0.0).to(tl.float32)
        acc += x * x
    inv_rms = tl.rsqrt(tl.sum(acc, axis=0) / N + eps)
    factor = inv_rms / tl.load(scale_ptr).to(tl.float32)  # one division per row

    # pass 2: normalise, apply the weight and the static scale, store fp8
    for start in range(0, N, BLOCK_N):
        cols = start + offs
        mask = cols < N
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        q = tl.clamp(x * factor * w, -fp8_max, fp8_max)
        tl.store(q_ptr + row * stride_qm + cols, q.to(q_ptr.dtype.element_ty), mask=mask)


def rms_norm_static_fp8_quant(
    x: torch.Tensor,
    weight: torch.Tensor,
    scale: torch.Tensor,
    eps: float = 1e-6,
    *,
    block_n: int = 1024,
    num_warps: int = 4,
) -> torch.Tensor:
    """Return float8_e4m3fn clamp(rms_norm(x) * weight / scale) with a given per-tensor scale.

    Args:
        x: (..., N) bf16/fp16/fp32, last dimension contiguous.
        weight: (N,) float RMSNorm weight.
        scale: One-element fp32 tensor, the static quantisation scale (dequant: q * scale).
        eps: Added to mean(x^2) before the reciprocal square root.
        block_n: Chunk width of the row loop (power of two).
        num_warps: Warps per program.

    Returns:
        q: same shape as x, float8_e4m3fn, contiguous.

    Raises:
        ValueError: weight or scale has the wrong shape or dtype, or block_n is bad.
    """
    n = x.shape[-1]
    if weight.shape != (n,):
        raise ValueError(
            f"weight must be ({n},) to match x {tuple(x.shape)}; got {tuple(weight.shape)}"
        )
    if scale.numel() != 1 or scale.dtype != torch.float32:
        raise ValueError(
            f"scale must be a one-element fp32 tensor; got {scale.dtype} {tuple(scale.shape)}"
        )
    if block_n <= 0 or block_n & (block_n - 1):
        raise ValueError(f"block_n {block_n} must be a power of two")
    x2 = x.reshape(-1, n)
    x2 = x2 if x2.stride(-1) == 1 else x2.contiguous()
    q = torch.empty(x2.shape, dtype=torch.float8_e4m3fn, device=x.device)
    if q.numel() == 0:
        return q.reshape(x.shape)
    _rms_norm_static_fp8_kernel[(x2.shape[0],)](
        x2, weight.contiguous(), scale, q,
        n,
        x2.stride(0), q.stride(0),
        eps, FP8_MAX,
        BLOCK_N=block_n,
        num_warps=num_warps,
    )  # fmt: skip
    return q.reshape(x.shape)


def reference(
    x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor, eps: float = 1e-6
) -> torch.Tensor:
    """Return the fp8 output computed in fp32 PyTorch."""
    xf = x.float()
    normed = xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps) * weight.float()
    return (normed / scale.float()).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return kwargs for ``shape = {"rows", "hidden"}``: N(0, 1) x and weight, scale 0.01."""
    n = shape["hidden"]
    return {
        "x": torch.randn(shape["rows"], n, device=device).to(dtype),
        "weight": torch.randn(n, device=device).to(dtype),
        "scale": torch.tensor([shape.get("scale", 0.01)], device=device),
    }
