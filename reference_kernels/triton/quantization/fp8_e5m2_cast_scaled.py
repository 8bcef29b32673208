"""
---
id: fp8_e5m2_cast_scaled
title: Scaled saturating cast to fp8 e5m2 and the dequantised round trip, flat vectorised
op_family: quantization
dsl: triton
vendor: nvidia
arch: [sm_89, sm_90]
dtypes: [fp32, bf16, fp16]
bound: memory
techniques: [flat-1d, vectorised, static-scale, fp8-e5m2, saturation, quant-dequant-round-trip]
status: reference
launcher: fp8_e5m2_cast_scaled
tuning:
  block: [1024, 256, 512, 2048, 4096]
  num_warps: [4, 1, 2, 8]
args:
  x: {shape: [...], dtypes: [fp32, bf16, fp16], aliases: [input, grad]}
  scale: {shape: [1], dtypes: [fp32], aliases: [x_scale]}
returns:
  - {name: q, shape: [...], dtype: fp8_e5m2}
  - {name: x_hat, shape: [...], dtype: x}
problem:
  shapes: [{size: [3, 1000]}, {size: [17]}]
  dtypes: [fp32, bf16]
measured: []
---
Casts x to float8_e5m2 with a given per-tensor scale: q = fp8_e5m2(clamp(x / scale, -57344, 57344)),
and returns the round trip x_hat = q * scale in x's dtype as well (the value a consumer of the fp8
tensor will see, used to measure or simulate the quantisation error). e5m2 has 2 mantissa bits and
the exponent range of fp16, which suits gradients and other wide-range, low-precision tensors; the
clamp saturates to the largest finite value instead of letting large values become inf, and NaN
stays NaN. The tensor is treated as a flat array: each program handles BLOCK contiguous elements,
loads the scale once, and does one divide, clamp, convert, convert back and multiply per element.
Bytes per bf16 element: 2 read, 1 + 2 written. Limits: the scale is static (computing it needs an
absmax pass: see max_abs_atomic); the cast rounds to nearest even on the GPU, but Triton's CPU
interpreter may round a value next to a binade edge one step differently; sm_89+ for native fp8.
"""

import torch
import triton
import triton.language as tl

E5M2_MAX = 57344.0  # largest finite float8_e5m2
_E5M2_MAX = tl.constexpr(E5M2_MAX)  # a jit function may read only constexpr globals


@triton.jit
def _fp8_e5m2_cast_scaled_kernel(
    # pointers
    x_ptr,
    scale_ptr,
    q_ptr,
    xhat_ptr,
    # sizes
    numel,
    # meta
    BLOCK: tl.constexpr,
):
    start = tl.program_id(0).to(tl.int64) * BLOCK  # int64: numel may pass 2^31
    offs = start + tl.arange(0, BLOCK)
    mask = offs < numel
    scale = tl.load(scale_ptr)
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    y = x / scale
    y = tl.where(y != y, y, tl.minimum(tl.maximum(y, -_E5M2_MAX), _E5M2_MAX))  # saturate, keep NaN
    q = y.to(tl.float8e5)
    tl.store(q_ptr + offs, q, mask=mask)
    x_hat = tl.where(y != y, y, q.to(tl.float32) * scale)  # NaN passed through explicitly
    tl.store(xhat_ptr + offs, x_hat.to(xhat_ptr.dtype.element_ty), mask=mask)


def fp8_e5m2_cast_scaled(
    x: torch.Tensor,
    scale: torch.Tensor,
    *,
    block: int = 1024,
    num_warps: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (q, x_hat): the saturating scaled e5m2 cast of x and its dequantised value.

    Args:
        x: Any shape, fp32/bf16/fp16.
        scale: (1,) fp32, > 0; q ~ x / scale.
        block: Elements per program (a power of two >= 16).
        num_warps: Warps per program; None picks by block.

    Returns:
        q: x's shape, float8_e5m2. x_hat: x's shape and dtype, q * scale.

    Raises:
        ValueError: Unsupported dtypes, a scale that is not one fp32 value, or a bad block.
    """
    if x.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise ValueError(f"x must be fp32/bf16/fp16; got {x.dtype}")
    if scale.numel() != 1 or scale.dtype != torch.float32:
        raise ValueError(f"scale must hold one fp32 value; got {tuple(scale.shape)} {scale.dtype}")
    if block < 16 or block & (block - 1):
        raise ValueError(f"block must be a power of two >= 16; got {block}")
    xc = x.contiguous()
    q = torch.empty(x.shape, dtype=torch.float8_e5m2, device=x.device)
    x_hat = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    n = xc.numel()
    if n == 0:
        return q, x_hat
    _fp8_e5m2_cast_scaled_kernel[(triton.cdiv(n, block),)](
        xc, scale.reshape(1).contiguous(), q, x_hat, n,
        BLOCK=block, num_warps=num_warps or min(max(block // 256, 1), 8),
    )  # fmt: skip
    return q, x_hat


def reference(x: torch.Tensor, scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (q, x_hat) in fp32 PyTorch (round to nearest even, saturating, NaN kept)."""
    y = x.float() / scale.float().reshape(())
    y = torch.where(torch.isnan(y), y, y.clamp(-E5M2_MAX, E5M2_MAX))
    q = y.to(torch.float8_e5m2)
    return q, (q.float() * scale.float().reshape(())).to(x.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"x", "scale"}`` for ``shape = {"size": [...]}``: wide-range x, some saturating."""
    x = torch.randn(shape["size"], device=device) * torch.exp2(torch.randint(-8, 8, shape["size"]))
    scale = torch.tensor([2.0**-8], device=device)  # |x| / scale reaches 2^16 > 57344: saturates
    return {"x": x.to(dtype), "scale": scale}
