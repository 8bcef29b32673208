"""
---
id: per_tensor_quant_fp8_static
title: Static per-tensor FP8 (e4m3fn) quantisation with a given device scale, flat 1-D grid
op_family: quantization
dsl: triton
vendor: nvidia
arch: [sm_89, sm_90]
dtypes: [bf16, fp16, fp32, fp8_e4m3fn]
bound: memory
techniques: [flat-grid, static-scale, device-scalar-load, saturating-clamp, fp8-e4m3,
  vectorized-loads]
status: reference
launcher: per_tensor_quant_fp8_static
tuning:
  block: [4096, 1024, 2048, 8192]
  num_warps: [8, 2, 4, 16]
args:
  x: {shape: [..., N], dtypes: [bf16, fp16, fp32], aliases: [input, hidden_states]}
  scale: {shape: ["?"], dtypes: [fp32], aliases: [x_scale, input_scale, act_scale]}
returns:
  - {name: q, shape: [..., N], dtype: fp8_e4m3fn}
problem:
  shapes: [{rows: 3, hidden: 1000}, {rows: 2, hidden: 33}]
  dtypes: [fp32, bf16]
measured: []
---
Static activation quantisation for FP8 checkpoints: the scale was calibrated offline and arrives as
a one-element fp32 device tensor, so q = float8_e4m3fn(clamp(x / scale, -448, 448)), rounded to
nearest even; the clamp saturates values outside the e4m3 range to +-448 (a plain cast would give
NaN, e4m3fn has no infinity). The tensor is one flat run: program p quantises elements [p * BLOCK,
(p + 1) * BLOCK) with contiguity hints for 16-byte loads and 4-byte (4 x fp8) stores. The scale is
read on the device by every program (one 4-byte load, an L2 hit), never copied to the host, so the
launch needs no synchronisation and can be captured in a CUDA graph. The division (not a multiply by
a reciprocal) matches a dividing reference bit for bit. Bytes per element: 2 read + 1 written in
bf16. Limits: one scale for the whole tensor (per-token scales: per_token_quant_fp8); NaN inputs
stay NaN; needs a contiguous input (a strided one is copied first).
"""

import torch
import triton
import triton.language as tl

FP8_MAX = 448.0  # largest finite float8_e4m3fn


@triton.jit
def _per_tensor_quant_fp8_static_kernel(
    # pointers
    x_ptr,
    scale_ptr,
    q_ptr,
    # sizes
    numel,
    # scalars
    fp8_max,
    # meta
    BLOCK: tl.constexpr,
    WIDE: tl.constexpr,  # numel >= 2^31: int64 offsets
):
    pid = tl.program_id(0)
    if WIDE:
        pid = pid.to(tl.int64)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    offs = tl.max_contiguous(tl.multiple_of(offs, BLOCK), BLOCK)
    mask = offs < numel
    scale = tl.load(scale_ptr)  # the static scale, read on the device
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    q = tl.clamp(x / scale, -fp8_max, fp8_max)  # saturate instead of NaN
    tl.store(q_ptr + offs, q.to(q_ptr.dtype.element_ty), mask=mask)


def per_tensor_quant_fp8_static(
    x: torch.Tensor,
    scale: torch.Tensor,
    *,
    block: int = 4096,
    num_warps: int = 8,
) -> torch.Tensor:
    """Quantise x to float8_e4m3fn with one given scale: clamp(x / scale, -448, 448).

    Args:
        x: Any shape, bf16/fp16/fp32 (copied first if not contiguous).
        scale: One-element fp32 tensor on x's device (shape (), (1,) or (1, 1)), > 0.
        block: Elements per program (power of two).
        num_warps: Warps per program.

    Returns:
        q: x's shape, float8_e4m3fn, contiguous.

    Raises:
        ValueError: x is not float, scale is not one fp32 value, or block not a power of two.
    """
    if not x.is_floating_point():
        raise ValueError(f"x must be a float tensor; got {x.dtype}")
    if scale.numel() != 1 or scale.dtype != torch.float32:
        raise ValueError(
            f"scale must be a one-element fp32 tensor; got {tuple(scale.shape)} {scale.dtype}"
        )
    if block < 1 or block & (block - 1):
        raise ValueError(f"block must be a power of two; got {block}")
    xc = x.contiguous()
    q = torch.empty(xc.shape, dtype=torch.float8_e4m3fn, device=x.device)
    numel = xc.numel()
    if numel > 0:
        _per_tensor_quant_fp8_static_kernel[(triton.cdiv(numel, block),)](
            xc, scale.reshape(1), q,
            numel, FP8_MAX,
            BLOCK=block, WIDE=numel >= 2**31 - block, num_warps=num_warps,
        )  # fmt: skip
    return q


def reference(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Return clamp(x / scale, -448, 448) in fp32, cast to float8_e4m3fn."""
    return (x.float() / scale.reshape(())).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"x", "scale"}`` for ``shape = {"rows", "hidden"}``.

    x ~ N(0, 1) with a few large outliers; the scale (amax / 448 of the bulk) saturates them.
    """
    x = torch.randn(shape["rows"], shape["hidden"], device=device)
    scale = torch.tensor([3.0 / FP8_MAX], device=device)  # calibrated for |x| <= 3
    x.view(-1)[::97] *= 10.0  # outliers beyond the calibrated range
    return {"x": x.to(dtype), "scale": scale}
