"""
---
id: mxfp8_quant_block32
title: MXFP8 quantisation, e4m3 values with one E8M0 power-of-two scale per 32, 3-D tile reshape
op_family: quantization
dsl: triton
vendor: nvidia
arch: [sm_100, sm_90]
dtypes: [bf16, fp16, fp32, fp8_e4m3fn, uint8]
bound: memory
techniques: [mx-format, e8m0-scale, block32-quant, 3d-reshape-reduction, 2d-tile, exponent-bit-math]
status: reference
launcher: mxfp8_quant_block32
tuning:
  block_m: [4, 1, 2, 8, 16]
  block_n: [256, 32, 64, 128, 512]
  num_warps: [4, 1, 2, 8]
args:
  x: {shape: [M, 32*G], dtypes: [bf16, fp16, fp32], aliases: [input, hidden_states]}
returns:
  - {name: q, shape: [M, 32*G], dtype: fp8_e4m3fn}
  - {name: scales_e8m0, shape: [M, G], dtype: uint8}
problem:
  shapes: [{rows: 3, hidden: 320}, {rows: 9, hidden: 64}]
  dtypes: [fp32, bf16]
measured: []
---
OCP Microscaling MXFP8 (E4M3) quantisation along rows: every block of 32 consecutive values shares
one E8M0 scale 2^e with e = floor(log2(absmax)) - 8 (8 = the exponent of e4m3's largest normal,
448), clamped to [-126, 127]; values become q = clamp(x * 2^-e, -448, 448) in float8_e4m3fn. Because
the floor leaves absmax / 2^e in [256, 512), the largest values of a block may saturate to 448 (the
OCP rule; the UE8M0 ceiling variant never saturates). Scales are returned as their biased E8M0 byte
e + 127 (uint8, 1..254); an all-zero block gets e = -126. Design: program (i, j) owns a (BLOCK_M,
BLOCK_N) tile, reshapes it in registers to (BLOCK_M, BLOCK_N / 32, 32) and reduces the last axis, so
one program makes BLOCK_N / 32 scales per row from a single wide, coalesced load; the floor(log2)
is read straight from the fp32 exponent field and 2^-e is built from bits, so no transcendental is
evaluated. Bytes: 2 read + 1 written per bf16 element, 1/32 byte of scale. Limits: N must be a
multiple of 32; scales are row-major bytes (no swizzled 128x4 tcgen05 layout); subnormal absmax
(< 2^-126) is treated as 2^-126.
"""

import torch
import triton
import triton.language as tl

FP8_MAX = 448.0  # largest finite float8_e4m3fn
E4M3_EMAX = 8  # floor(log2(448))
MX_BLOCK = 32  # values per shared scale (OCP MX)


@triton.jit
def _mxfp8_quant_kernel(
    # pointers
    x_ptr,
    q_ptr,
    s_ptr,
    # sizes
    M,
    N,
    # strides (elements; the last dim is contiguous)
    stride_xm,
    stride_qm,
    stride_sm,
    # scalars
    fp8_max,
    # meta
    EMAX: tl.constexpr,
    BLOCK: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows < M)[:, None] & (cols < N)[None, :]
    rows64 = rows.to(tl.int64)  # int64: rows * stride can pass 2^31 elements
    x = tl.load(x_ptr + rows64[:, None] * stride_xm + cols[None, :], mask=mask, other=0.0)
    x3 = tl.reshape(x.to(tl.float32), (BLOCK_M, BLOCK_N // BLOCK, BLOCK))
    amax = tl.max(tl.abs(x3), axis=2)  # (BLOCK_M, BLOCK_N // BLOCK)

    # floor(log2(amax)) is the unbiased exponent field; e = that - EMAX, clamped to [-126, 127]
    field = (amax.to(tl.int32, bitcast=True) >> 23) & 0xFF
    biased = tl.minimum(tl.maximum(field - EMAX, 1), 254)  # e + 127
    inv_scale = ((254 - biased) << 23).to(tl.float32, bitcast=True)  # 2^-e, exact
    q3 = tl.clamp(x3 * inv_scale[:, :, None], -fp8_max, fp8_max)
    q = tl.reshape(q3, (BLOCK_M, BLOCK_N))
    tl.store(q_ptr + rows64[:, None] * stride_qm + cols[None, :], q.to(q_ptr.dtype.element_ty),
             mask=mask)  # fmt: skip

    sblocks = tl.program_id(1) * (BLOCK_N // BLOCK) + tl.arange(0, BLOCK_N // BLOCK)
    smask = (rows < M)[:, None] & (sblocks < N // BLOCK)[None, :]
    tl.store(s_ptr + rows64[:, None] * stride_sm + sblocks[None, :], biased.to(tl.uint8),
             mask=smask)  # fmt: skip


def mxfp8_quant_block32(
    x: torch.Tensor,
    *,
    block_m: int = 4,
    block_n: int = 256,
    num_warps: int = 4,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantise x to MXFP8: float8_e4m3fn values and one biased E8M0 byte per 32 values.

    Args:
        x: (M, N) bf16/fp16/fp32, last dimension contiguous, N a multiple of 32.
        block_m: Rows per program (power of two).
        block_n: Columns per program (power of two, >= 32).
        num_warps: Warps per program.

    Returns:
        (q, scales_e8m0): q (M, N) float8_e4m3fn; scales_e8m0 (M, N / 32) uint8 with
        x[:, 32*j:32*(j+1)] ~ q[...] * 2^(scales_e8m0[:, j:j+1] - 127).

    Raises:
        ValueError: x is not 2-D floating point with N % 32 == 0, or a block size is bad.
    """
    if x.dim() != 2 or not x.is_floating_point() or x.shape[1] % MX_BLOCK:
        raise ValueError(f"x must be a 2-D float (M, N) with N % 32 == 0; got {tuple(x.shape)}")
    for name, value, low in (("block_m", block_m, 1), ("block_n", block_n, MX_BLOCK)):
        if value < low or value & (value - 1):
            raise ValueError(f"{name} {value} must be a power of two >= {low}")
    x = x if x.stride(-1) == 1 else x.contiguous()
    m, n = x.shape
    q = torch.empty((m, n), dtype=torch.float8_e4m3fn, device=x.device)
    scales = torch.empty((m, n // MX_BLOCK), dtype=torch.uint8, device=x.device)
    if q.numel() == 0:
        return q, scales
    grid = (triton.cdiv(m, block_m), triton.cdiv(n, block_n))
    _mxfp8_quant_kernel[grid](
        x, q, scales,
        m, n,
        x.stride(0), q.stride(0), scales.stride(0),
        FP8_MAX,
        EMAX=E4M3_EMAX, BLOCK=MX_BLOCK, BLOCK_M=block_m, BLOCK_N=block_n,
        num_warps=num_warps,
    )  # fmt: skip
    return q, scales


def reference(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (q, scales_e8m0) in fp32 PyTorch, floor(log2(absmax)) found with frexp."""
    m, n = x.shape
    xb = x.float().view(m, n // MX_BLOCK, MX_BLOCK)
    amax = xb.abs().amax(dim=-1)
    _, exponent = torch.frexp(amax)  # amax = mantissa * 2^exponent, mantissa in [0.5, 1)
    floor_log2 = torch.where(amax > 0, exponent - 1, torch.full_like(exponent, -127))
    e = (floor_log2 - E4M3_EMAX).clamp(-126, 127)
    q = (xb * torch.ldexp(torch.ones_like(amax), -e)[..., None]).clamp(-FP8_MAX, FP8_MAX)
    return q.to(torch.float8_e4m3fn).view(m, n), (e + 127).to(torch.uint8)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"x"}`` for ``shape = {"rows", "hidden"}``: N(0, 1), a zero and a large block."""
    x = torch.randn(shape["rows"], shape["hidden"], device=device)
    x[0, :MX_BLOCK] = 0.0
    x[-1, -MX_BLOCK:] *= 1e4
    return {"x": x.to(dtype)}
