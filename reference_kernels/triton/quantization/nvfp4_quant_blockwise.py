"""
---
id: nvfp4_quant_blockwise
title: NVFP4-style quantisation, fp4 e2m1 codes packed two per byte, one e4m3 scale per 16 values
op_family: quantization
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90, sm_100]
dtypes: [bf16, fp16, fp32, uint8]
bound: memory
techniques: [block-scaling, microscaling, fp4-e2m1, magic-number-rounding, nibble-packing,
  even-odd-loads]
status: reference
launcher: nvfp4_quant_blockwise
tuning:
  block_g: [64, 16, 32, 128]
  num_warps: [4, 1, 2, 8]
args:
  x: {shape: [M, 16*G], dtypes: [bf16, fp16, fp32], aliases: [input, hidden_states]}
  global_scale: {type: float, default: 1.0, aliases: [input_global_scale]}
returns:
  - {name: codes, shape: [M, 8*G], dtype: uint8}
  - {name: scales, shape: [M, G], dtype: fp32}
problem:
  shapes: [{rows: 3, hidden: 512}, {rows: 2, hidden: 48, global_scale: 100.0}]
  dtypes: [fp32, bf16]
measured: []
---
NVFP4-style block quantisation (the format of Blackwell's FP4 tensor cores): every 16 consecutive
values of a row share one scale, and each value becomes a 4-bit e2m1 code (sign bit 8, magnitudes 0,
0.5, 1, 1.5, 2, 3, 4, 6 as codes 0..7). Exactly: s = e4m3(min(amax16 * global_scale / 6, 448))
(rounded to the nearest float8_e4m3fn value); v = x * global_scale / s (v = 0 where s == 0); code =
nearest e2m1 magnitude of |v| with ties to the even code, |v| > 6 saturating to 6, plus 8 when v <
0; byte k of a row holds element 2k in its low nibble and 2k + 1 in its high nibble. Dequantise as x
~ e2m1(code) * s / global_scale. The scales are e4m3-representable but stored as fp32 (M, N / 16) so
the format needs no fp8 storage or swizzled scale layout (real NVFP4 GEMMs want the scales as e4m3
in a 128x4 swizzle; that is a re-layout, not a re-quantisation). Program (r, j) handles BLOCK_G
groups of row r as a (BLOCK_G, 8) tile of even elements and one of odd elements (two stride-2 loads
that share cache lines), so the two nibbles of each byte are already in matching lanes; the group
amax is a row reduction of the tile, the scale is rounded to e4m3 in fp32 arithmetic (add and
subtract 1.5 * 2^(k + 23), k the e4m3 exponent step: no fp8 conversion instruction, so it also runs
before sm_89), the e2m1 rounding is 7 threshold comparisons, and the packed bytes are stored as 8
contiguous bytes per group. Bytes per element: 2 read (bf16) + 0.5 written + 0.25 for the scale.
Limits: N must be a multiple of 16; no swizzled scale layout; the global scale is a host float (not
a device tensor).
"""

import torch
import triton
import triton.language as tl

E2M1_MAX = 6.0
E4M3_MAX = 448.0
GROUP = 16


@triton.jit
def _round_to_e4m3(s):
    """Round fp32 s in [0, 448] to the nearest float8_e4m3fn value (ties to even), in fp32.

    Adding and subtracting 1.5 * 2^(k + 23) rounds s to a multiple of 2^k with fp32's own
    round-to-nearest-even, where 2^k is the e4m3 spacing of s's binade (2^-9 below 2^-6).
    """
    exponent = ((s.to(tl.int32, bitcast=True) >> 23) & 0xFF) - 127
    k = tl.maximum(exponent, -6) - 3
    magic = ((k + 150) << 23).to(tl.float32, bitcast=True) * 1.5  # 1.5 * 2^(k + 23)
    return (s + magic) - magic


@triton.jit
def _e2m1_code(v):
    """Return the e2m1 code (0..15) of fp32 v: nearest magnitude, ties to even, saturating."""
    a = tl.abs(v)
    # each comparison passes one midpoint of the grid 0, .5, 1, 1.5, 2, 3, 4, 6; '>=' where the
    # upper neighbour has the even code, '>' where the lower one has
    idx = (a > 0.25).to(tl.int32) + (a >= 0.75).to(tl.int32) + (a > 1.25).to(tl.int32)
    idx += (a >= 1.75).to(tl.int32) + (a > 2.5).to(tl.int32) + (a >= 3.5).to(tl.int32)
    idx += (a > 5.0).to(tl.int32)
    return idx + tl.where(v < 0, 8, 0)


@triton.jit
def _nvfp4_quant_blockwise_kernel(
    # pointers
    x_ptr,
    codes_ptr,
    scales_ptr,
    # sizes
    G,  # groups of 16 per row
    # strides (elements; the last dim is contiguous)
    stride_xm,
    stride_cm,
    stride_sm,
    # scalars
    global_scale,
    # meta
    BLOCK_G: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride can pass 2^31 elements
    offs_g = tl.program_id(1) * BLOCK_G + tl.arange(0, BLOCK_G)
    mask_g = offs_g < G
    pair = tl.arange(0, 8)
    mask = mask_g[:, None]
    even = x_ptr + row * stride_xm + offs_g[:, None] * 16 + 2 * pair[None, :]
    x_even = tl.load(even, mask=mask, other=0.0).to(tl.float32)
    x_odd = tl.load(even + 1, mask=mask, other=0.0).to(tl.float32)

    amax = tl.max(tl.maximum(tl.abs(x_even), tl.abs(x_odd)), axis=1)  # (BLOCK_G,)
    s = tl.minimum(tl.math.div_rn(amax * global_scale, 6.0), 448.0)  # IEEE division, as torch
    s = _round_to_e4m3(s)  # an exact e4m3 value, kept in fp32
    safe = tl.where(s > 0, s, 1.0)[:, None]
    v_even = tl.where(s[:, None] > 0, tl.math.div_rn(x_even * global_scale, safe), 0.0)
    v_odd = tl.where(s[:, None] > 0, tl.math.div_rn(x_odd * global_scale, safe), 0.0)
    packed = _e2m1_code(v_even) | (_e2m1_code(v_odd) << 4)

    codes = codes_ptr + row * stride_cm + offs_g[:, None] * 8 + pair[None, :]
    tl.store(codes, packed.to(tl.uint8), mask=mask)
    tl.store(scales_ptr + row * stride_sm + offs_g, s, mask=mask_g)


def nvfp4_quant_blockwise(
    x: torch.Tensor,
    global_scale: float = 1.0,
    *,
    block_g: int | None = None,
    num_warps: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantise x to packed fp4 e2m1 codes with one e4m3-representable scale per 16 values.

    Args:
        x: (M, N) bf16/fp16/fp32, N a multiple of 16, last dimension contiguous.
        global_scale: Multiplies x before the block scaling (> 0; NVFP4 uses 448 * 6 / amax(x)).
        block_g: Groups of 16 per program (power of two); None = min(next_pow2(N / 16), 64).
        num_warps: Warps per program; None = 4.

    Returns:
        (codes, scales): codes (M, N / 2) uint8, element 2k in the low nibble of byte k; scales
        (M, N / 16) fp32, each an exact float8_e4m3fn value.

    Raises:
        ValueError: x is not 2-D float with N % 16 == 0, global_scale <= 0, or a bad block_g.
    """
    if x.dim() != 2 or not x.is_floating_point() or x.shape[1] % GROUP:
        raise ValueError(
            f"x must be (M, N) float with N a multiple of {GROUP}; got {tuple(x.shape)} {x.dtype}"
        )
    if not global_scale > 0:
        raise ValueError(f"global_scale must be > 0; got {global_scale}")
    if block_g is not None and (block_g < 1 or block_g & (block_g - 1)):
        raise ValueError(f"block_g must be a power of two; got {block_g}")
    x = x if x.stride(-1) == 1 else x.contiguous()
    m, n = x.shape
    g = n // GROUP
    codes = torch.empty((m, n // 2), dtype=torch.uint8, device=x.device)
    scales = torch.empty((m, g), dtype=torch.float32, device=x.device)
    if m == 0 or n == 0:
        return codes, scales
    block = block_g if block_g is not None else min(triton.next_power_of_2(g), 64)
    _nvfp4_quant_blockwise_kernel[(m, triton.cdiv(g, block))](
        x, codes, scales,
        g,
        x.stride(0), codes.stride(0), scales.stride(0),
        float(global_scale),
        BLOCK_G=block, num_warps=num_warps or 4,
    )  # fmt: skip
    return codes, scales


def reference(x: torch.Tensor, global_scale: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantise in PyTorch by nearest-value search on the e2m1 grid (ties to the even code)."""
    m, n = x.shape
    xg = x.float().reshape(m, n // GROUP, GROUP)
    amax = xg.abs().amax(dim=-1)
    scaled = amax * global_scale
    s = scaled / scaled.new_tensor(E2M1_MAX)  # a device tensor: CUDA torch turns `/ float` into `* (1 / float)`, 1 ulp off IEEE division
    s = s.clamp(max=E4M3_MAX).to(torch.float8_e4m3fn).float()
    safe = torch.where(s > 0, s, torch.ones_like(s))[..., None]
    v = torch.where(s[..., None] > 0, xg * global_scale / safe, torch.zeros_like(xg))
    grid = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], device=x.device)
    dist = (v.abs()[..., None] - grid).abs()
    nearest = dist == dist.min(dim=-1, keepdim=True).values
    even = nearest & (torch.arange(8, device=x.device) % 2 == 0)
    idx = torch.where(even.any(-1), even.int().argmax(-1), nearest.int().argmax(-1))
    code = (idx + 8 * (v < 0)).reshape(m, n).to(torch.uint8)
    return code[:, 0::2] | (code[:, 1::2] << 4), s


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"x", "global_scale"}`` for ``{"rows", "hidden"}`` (+ optional ``"global_scale"``).

    x ~ N(0, 1) with group 0 of row 0 zeroed (an all-zero block) and exact grid ties planted.
    """
    x = torch.randn(shape["rows"], shape["hidden"], device=device)
    x[0, :GROUP] = 0.0
    if shape["hidden"] >= 2 * GROUP:
        # amax 6 gives scale 1: the values below sit exactly on rounding midpoints
        ties = [6.0, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.75, -2.5, -5.0, 7e-3, 0, 1, 2, 3]
        x[0, GROUP : 2 * GROUP] = torch.tensor(ties)
    return {"x": x.to(dtype), "global_scale": shape.get("global_scale", 1.0)}
