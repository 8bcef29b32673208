"""
---
id: mxfp4_quant_block32
title: MXFP4 quantisation, e2m1 values packed two per byte with one E8M0 scale per 32 values
op_family: quantization
dsl: triton
vendor: nvidia
arch: [sm_100, sm_90]
dtypes: [bf16, fp16, fp32, uint8]
bound: memory
techniques: [mx-format, e8m0-scale, fp4-e2m1, nibble-packing, threshold-sum-rounding,
  3d-reshape-reduction, exponent-bit-math, 2d-tile]
status: reference
launcher: mxfp4_quant_block32
tuning:
  block_m: [4, 1, 2, 8, 16]
  block_n: [128, 32, 64, 256, 512]
  num_warps: [4, 1, 2, 8]
args:
  x: {shape: [M, 32*G], dtypes: [bf16, fp16, fp32], aliases: [input, hidden_states]}
returns:
  - {name: packed, shape: [M, 16*G], dtype: uint8}
  - {name: scales_e8m0, shape: [M, G], dtype: uint8}
problem:
  shapes: [{rows: 5, hidden: 224}]
  dtypes: [fp32, bf16]
measured: []
---
OCP Microscaling MXFP4: every block of 32 consecutive values of a row shares one E8M0 scale 2^e with
e = floor(log2(absmax)) - 2 (2 = the exponent of e2m1's largest value, 6.0), clamped to [-126, 127];
each value becomes the FP4 E2M1 code nearest to x * 2^-e (the grid 0, 0.5, 1, 1.5, 2, 3, 4, 6; ties
to the even code; saturating at 6), a sign bit (bit 3, set for x < 0) and a 3-bit magnitude. Two
codes share a byte: element 2j in the low nibble, 2j + 1 in the high one. Scales come back as biased
E8M0 bytes e + 127. Design: program (i, j) owns a (BLOCK_M, BLOCK_N) tile; absmax per 32-block comes
from a 3-D reshape and an axis-2 max, floor(log2) from the fp32 exponent field, 2^-e from bits; the
e2m1 rounding is branch-free, the magnitude code being the sum of seven comparisons against the
midpoints (strict or non-strict so ties land on the even code), and the packing reshapes the codes
to (BLOCK_M, BLOCK_N / 2, 2) and splits the pairs. Bytes: 2 read + 0.5 written per bf16 element,
1/32 byte of scale. Limits: N must be a multiple of 32; scales row-major (no swizzled tcgen05
layout); subnormal absmax (< 2^-126) is treated as 2^-126; no stochastic rounding.
"""

import torch
import triton
import triton.language as tl

E2M1_EMAX = 2  # floor(log2(6.0))
MX_BLOCK = 32  # values per shared scale (OCP MX)
E2M1_GRID = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


@triton.jit
def _mxfp4_quant_kernel(
    # pointers
    x_ptr,
    p_ptr,
    s_ptr,
    # sizes
    M,
    N,
    # strides (elements; the last dim is contiguous)
    stride_xm,
    stride_pm,
    stride_sm,
    # meta
    EMAX: tl.constexpr,
    BLOCK: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rmask = rows < M
    mask = rmask[:, None] & (cols < N)[None, :]
    rows64 = rows.to(tl.int64)  # int64: rows * stride can pass 2^31 elements
    x = tl.load(x_ptr + rows64[:, None] * stride_xm + cols[None, :], mask=mask, other=0.0)
    x3 = tl.reshape(x.to(tl.float32), (BLOCK_M, BLOCK_N // BLOCK, BLOCK))
    amax = tl.max(tl.abs(x3), axis=2)

    # e = floor(log2(amax)) - EMAX from the exponent field; 2^-e built from bits (exact)
    field = (amax.to(tl.int32, bitcast=True) >> 23) & 0xFF
    biased = tl.minimum(tl.maximum(field - EMAX, 1), 254)  # e + 127
    inv_scale = ((254 - biased) << 23).to(tl.float32, bitcast=True)
    v = x3 * inv_scale[:, :, None]
    a = tl.abs(v)
    # nearest e2m1 magnitude code, ties to even: midpoints 0.25 .75 1.25 1.75 2.5 3.5 5
    code = ((a > 0.25).to(tl.int32) + (a >= 0.75).to(tl.int32) + (a > 1.25).to(tl.int32)
            + (a >= 1.75).to(tl.int32) + (a > 2.5).to(tl.int32) + (a >= 3.5).to(tl.int32)
            + (a > 5.0).to(tl.int32))  # fmt: skip
    code = code | tl.where(v < 0, 8, 0)
    lo, hi = tl.split(tl.reshape(code, (BLOCK_M, BLOCK_N // 2, 2)))
    byte = (lo | (hi << 4)).to(tl.uint8)
    pcols = tl.program_id(1) * (BLOCK_N // 2) + tl.arange(0, BLOCK_N // 2)
    pmask = rmask[:, None] & (pcols < N // 2)[None, :]
    tl.store(p_ptr + rows64[:, None] * stride_pm + pcols[None, :], byte, mask=pmask)

    sblocks = tl.program_id(1) * (BLOCK_N // BLOCK) + tl.arange(0, BLOCK_N // BLOCK)
    smask = rmask[:, None] & (sblocks < N // BLOCK)[None, :]
    tl.store(s_ptr + rows64[:, None] * stride_sm + sblocks[None, :], biased.to(tl.uint8),
             mask=smask)  # fmt: skip


def mxfp4_quant_block32(
    x: torch.Tensor,
    *,
    block_m: int = 4,
    block_n: int = 128,
    num_warps: int = 4,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantise x to MXFP4: packed e2m1 nibbles and one biased E8M0 byte per 32 values.

    Args:
        x: (M, N) bf16/fp16/fp32, last dimension contiguous, N a multiple of 32.
        block_m: Rows per program (a power of two).
        block_n: Columns per program (a power of two >= 32).
        num_warps: Warps per program.

    Returns:
        (packed, scales_e8m0): packed (M, N / 2) uint8, element 2j in the low nibble of byte j;
        scales_e8m0 (M, N / 32) uint8, x[:, 32b:32b+32] ~ e2m1(codes) * 2^(scales[:, b] - 127).

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
    packed = torch.empty((m, n // 2), dtype=torch.uint8, device=x.device)
    scales = torch.empty((m, n // MX_BLOCK), dtype=torch.uint8, device=x.device)
    if packed.numel() == 0:
        return packed, scales
    _mxfp4_quant_kernel[(triton.cdiv(m, block_m), triton.cdiv(n, block_n))](
        x, packed, scales,
        m, n,
        x.stride(0), packed.stride(0), scales.stride(0),
        EMAX=E2M1_EMAX, BLOCK=MX_BLOCK, BLOCK_M=block_m, BLOCK_N=block_n,
        num_warps=num_warps,
    )  # fmt: skip
    return packed, scales


def reference(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (packed, scales) in PyTorch: nearest grid value by distance (fp64), ties to even."""
    m, n = x.shape
    xb = x.float().view(m, n // MX_BLOCK, MX_BLOCK)
    amax = xb.abs().amax(dim=-1)
    _, exponent = torch.frexp(amax)  # amax = mantissa * 2^exponent, mantissa in [0.5, 1)
    floor_log2 = torch.where(amax > 0, exponent - 1, torch.full_like(exponent, -127))
    e = (floor_log2 - E2M1_EMAX).clamp(-126, 127)
    v = (xb * torch.ldexp(torch.ones_like(amax), -e)[..., None]).double()
    grid = torch.tensor(E2M1_GRID, dtype=torch.float64, device=x.device)
    odd = torch.arange(8, device=x.device) % 2
    dist = (v.abs()[..., None] - grid).abs() + 1e-12 * odd  # a tie goes to the even code
    code = dist.argmin(dim=-1) + 8 * (v < 0)
    code = code.view(m, n // 2, 2)
    packed = (code[..., 0] | (code[..., 1] << 4)).to(torch.uint8)
    return packed, (e + 127).to(torch.uint8)


def dequantize(packed: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """Return the fp32 values an (packed, scales) pair encodes (for checks)."""
    m = packed.shape[0]
    codes = torch.stack([packed & 0xF, packed >> 4], dim=-1).view(m, -1).long()
    grid = torch.tensor(E2M1_GRID, device=packed.device)
    vals = grid[codes & 7] * torch.where(codes >= 8, -1.0, 1.0)
    pow2 = torch.ldexp(torch.ones(scales.shape, device=packed.device), scales.int() - 127)
    return vals * pow2.repeat_interleave(MX_BLOCK, dim=1)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"x"}`` for ``shape = {"rows", "hidden"}``: N(0, 1), a zero block, exact ties."""
    x = torch.randn(shape["rows"], shape["hidden"], device=device)
    x[0, :MX_BLOCK] = 0.0
    # a block with absmax 4 (e = 0) holding every rounding midpoint, signed: ties to even
    ties = torch.tensor([4.0, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.25, -2.5, -5.0, 0.1])
    x[-1, -MX_BLOCK : -MX_BLOCK + ties.numel()] = ties
    x[-1, -MX_BLOCK + ties.numel() :] = 0.3
    return {"x": x.to(dtype)}
