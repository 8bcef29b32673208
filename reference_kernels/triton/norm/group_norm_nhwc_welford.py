"""
---
id: group_norm_nhwc_welford
title: Group norm on channels-last (N, HW, C) with per-tile statistics merged by Chan/Welford
op_family: norm
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques:
  [channels-last, two-kernel, partial-statistics, welford-merge, split-reduction, fp32-accumulate]
status: reference
launcher: group_norm_nhwc_welford
tuning:
  block_s: [64, 8, 16, 32, 128, 256]
  num_warps: [4, 1, 2, 8]
args:
  x: {shape: [B, S, C], dtypes: [bf16, fp16, fp32], aliases: [input, hidden_states]}
  weight: {shape: [C], dtypes: [float], optional: true, aliases: [gamma, w]}
  bias: {shape: [C], dtypes: [float], optional: true, aliases: [beta, b]}
  num_groups: {type: int, default: 32, aliases: [groups, num_norm_groups, G]}
  eps: {type: float, default: 1.0e-5, aliases: [epsilon, norm_eps]}
returns:
  - {name: y, shape: [B, S, C], dtype: x}
problem:
  shapes: [{batch: 2, hw: 150, channels: 24, num_groups: 4}, {batch: 1, hw: 7, channels: 64, num_groups: 32}]
  dtypes: [fp32, bf16]
  atol: 0.02
  rtol: 0.02
measured: []
---
GroupNorm for channels-last activations (diffusion UNets and VAEs keep (N, H*W, C)): the C channels
split into G groups of C / G adjacent channels, each (sample, group) is normalised over its HW x C /
G values with biased variance, then y = (x - mean) * rsqrt(var + eps) * weight[c] + bias[c]. In
NHWC a group is a strided column block, and one (sample, group) may hold millions of values, so the
reduction is split over HW. Kernel 1, grid (B * G, tiles): program (bg, t) loads a (BLOCK_S, C / G)
tile (each row a short contiguous channel run), and writes the tile's exact mean and centred sum of
squares M2 (two passes over registers, no E[x^2] - E[x]^2 cancellation). Kernel 2, same grid: each
program loads all tiles' (mean, M2) of its (sample, group) as one vector and merges them in closed
form with Chan's parallel Welford rule (mean = sum n_i mean_i / n, M2 = sum M2_i + n_i (mean_i -
mean)^2), then normalises its own tile, applying weight and bias per channel. Bytes: 2 reads + 1
write per element (the second read often hits L2) plus 8 bytes per tile of statistics; every SM is
busy even when B * G is small. Limits: at most 16384 tiles per (sample, group) (raise block_s);
C / G up to 1024 channels; the merge is recomputed by every tile program (cheap, T values).
"""

import torch
import triton
import triton.language as tl

MAX_TILES = 16384


@triton.jit
def _gn_partial_stats_kernel(
    # pointers
    x_ptr,
    mean_ptr,
    m2_ptr,
    # sizes
    S,
    C,
    CG,
    G,
    T,
    # meta
    BLOCK_S: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    bg = tl.program_id(0)
    tile = tl.program_id(1)
    b = (bg // G).to(tl.int64)
    s = tile * BLOCK_S + tl.arange(0, BLOCK_S)
    c = (bg % G) * CG + tl.arange(0, BLOCK_C)
    mask = (s < S)[:, None] & (tl.arange(0, BLOCK_C) < CG)[None, :]
    x = tl.load(x_ptr + (b * S + s)[:, None] * C + c[None, :], mask=mask, other=0.0)
    x = x.to(tl.float32)
    count = (tl.minimum(S - tile * BLOCK_S, BLOCK_S) * CG).to(tl.float32)
    mean = tl.sum(tl.sum(x, axis=1), axis=0) / count
    d = tl.where(mask, x - mean, 0.0)
    tl.store(mean_ptr + bg * T + tile, mean)
    tl.store(m2_ptr + bg * T + tile, tl.sum(tl.sum(d * d, axis=1), axis=0))


@triton.jit
def _gn_merge_normalize_kernel(
    # pointers
    x_ptr,
    w_ptr,
    b_ptr,
    mean_ptr,
    m2_ptr,
    y_ptr,
    # sizes
    S,
    C,
    CG,
    G,
    T,
    # scalars
    eps,
    # meta
    HAS_WEIGHT: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    BLOCK_S: tl.constexpr,
    BLOCK_C: tl.constexpr,
    BLOCK_T: tl.constexpr,
):
    bg = tl.program_id(0)
    tile = tl.program_id(1)
    # Chan merge of all T tiles of this (sample, group)
    ts = tl.arange(0, BLOCK_T)
    tmask = ts < T
    n_i = (tl.minimum(S - ts * BLOCK_S, BLOCK_S) * CG).to(tl.float32)
    n_i = tl.where(tmask, n_i, 0.0)
    mean_i = tl.load(mean_ptr + bg * T + ts, mask=tmask, other=0.0)
    m2_i = tl.load(m2_ptr + bg * T + ts, mask=tmask, other=0.0)
    n = tl.sum(n_i, axis=0)
    mean = tl.sum(n_i * mean_i, axis=0) / n
    delta = mean_i - mean
    var = (tl.sum(m2_i, axis=0) + tl.sum(n_i * delta * delta, axis=0)) / n
    rstd = tl.rsqrt(var + eps)

    b = (bg // G).to(tl.int64)
    s = tile * BLOCK_S + tl.arange(0, BLOCK_S)
    cl = tl.arange(0, BLOCK_C)
    c = (bg % G) * CG + cl
    cmask = cl < CG
    mask = (s < S)[:, None] & cmask[None, :]
    offs = (b * S + s)[:, None] * C + c[None, :]
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    y = (x - mean) * rstd
    if HAS_WEIGHT:
        y = y * tl.load(w_ptr + c, mask=cmask, other=0.0).to(tl.float32)[None, :]
    if HAS_BIAS:
        y = y + tl.load(b_ptr + c, mask=cmask, other=0.0).to(tl.float32)[None, :]
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


def group_norm_nhwc_welford(
    x: torch.Tensor,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    num_groups: int = 32,
    eps: float = 1e-5,
    *,
    block_s: int = 64,
    num_warps: int = 4,
) -> torch.Tensor:
    """Return GroupNorm of channels-last x (B, S = H*W, C) over num_groups channel groups.

    Args:
        x: (B, S, C) bf16/fp16/fp32 (copied if not contiguous).
        weight: Optional (C,) per-channel scale.
        bias: Optional (C,) per-channel shift.
        num_groups: Channel groups G; C must be a multiple of G.
        eps: Added to the biased variance.
        block_s: Spatial positions per tile (power of two).
        num_warps: Warps per program.

    Returns:
        y: (B, S, C) in x's dtype.

    Raises:
        ValueError: x is not 3-D, C % num_groups != 0, C / G > 1024, weight or bias has the wrong
            shape, block_s is not a power of two or leaves more than 16384 tiles.
    """
    if x.dim() != 3 or not x.is_floating_point():
        raise ValueError(f"x must be a float (B, H*W, C) tensor; got {x.dtype} {tuple(x.shape)}")
    bsz, s, c = x.shape
    if num_groups <= 0 or c % num_groups or c // num_groups > 1024:
        raise ValueError(f"C = {c} must split into num_groups = {num_groups} of <= 1024 channels")
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and t.shape != (c,):
            raise ValueError(f"{name} must be ({c},); got {tuple(t.shape)}")
    if block_s <= 0 or block_s & (block_s - 1):
        raise ValueError(f"block_s {block_s} must be a power of two")
    tiles = triton.cdiv(s, block_s)
    if tiles > MAX_TILES:
        raise ValueError(f"{tiles} tiles of block_s {block_s} exceed {MAX_TILES}; raise block_s")
    x = x.contiguous()
    y = torch.empty_like(x)
    if y.numel() == 0:
        return y
    cg = c // num_groups
    mean = torch.empty((bsz * num_groups, tiles), dtype=torch.float32, device=x.device)
    m2 = torch.empty_like(mean)
    grid = (bsz * num_groups, tiles)
    block_c = triton.next_power_of_2(cg)
    _gn_partial_stats_kernel[grid](
        x, mean, m2, s, c, cg, num_groups, tiles,
        BLOCK_S=block_s, BLOCK_C=block_c, num_warps=num_warps,
    )  # fmt: skip
    _gn_merge_normalize_kernel[grid](
        x, weight if weight is not None else x, bias if bias is not None else x, mean, m2, y,
        s, c, cg, num_groups, tiles,
        eps,
        HAS_WEIGHT=weight is not None, HAS_BIAS=bias is not None,
        BLOCK_S=block_s, BLOCK_C=block_c, BLOCK_T=triton.next_power_of_2(tiles),
        num_warps=num_warps,
    )  # fmt: skip
    return y


def reference(
    x: torch.Tensor,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    num_groups: int = 32,
    eps: float = 1e-5,
) -> torch.Tensor:
    """Return torch group_norm on the NCHW-permuted fp32 input, permuted back, in x's dtype."""
    xc = x.float().permute(0, 2, 1)  # (B, C, S)
    w = weight.float() if weight is not None else None
    b = bias.float() if bias is not None else None
    y = torch.nn.functional.group_norm(xc, num_groups, w, b, eps)
    return y.permute(0, 2, 1).to(x.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return kwargs for ``shape = {"batch", "hw", "channels", "num_groups"}``: x ~ N(1, 2^2)."""
    c = shape["channels"]
    return {
        "x": (torch.randn(shape["batch"], shape["hw"], c, device=device) * 2 + 1).to(dtype),
        "weight": torch.randn(c, device=device).to(dtype),
        "bias": torch.randn(c, device=device).to(dtype),
        "num_groups": shape.get("num_groups", 32),
    }
