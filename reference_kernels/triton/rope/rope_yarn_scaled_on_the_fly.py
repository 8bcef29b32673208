"""
---
id: rope_yarn_scaled_on_the_fly
title: YaRN context-extended neox RoPE, ramped inv_freq and mscale computed in the kernel
op_family: rope
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [yarn-scaling, ntk-by-parts-ramp, attention-mscale, in-kernel-cos-sin, exp2,
  head-tile, neox-rotation, fp32-accumulate]
status: reference
launcher: rope_yarn_scaled_on_the_fly
tuning:
  block_h: [4, 1, 2, 8, 16]
  num_warps: [4, 1, 2, 8]
args:
  positions: {shape: [T], dtypes: [int32, int64], aliases: [position_ids, pos]}
  q: {shape: [T, H, D], dtypes: [bf16, fp16, fp32], flattened: true, aliases: [query]}
  k: {shape: [T, HKV, D], like: q, flattened: true, aliases: [key]}
  scaling_factor: {type: float, default: 4.0, aliases: [factor, rope_scaling_factor]}
  original_max_position: {type: int, default: 4096,
    aliases: [original_max_position_embeddings, max_position_embeddings]}
  base: {type: float, default: 10000.0, aliases: [rope_theta, theta, rope_base]}
  beta_fast: {type: float, default: 32.0}
  beta_slow: {type: float, default: 1.0}
returns:
  - {name: q_out, shape: [T, H, D], dtype: q}
  - {name: k_out, shape: [T, HKV, D], dtype: q}
dims:
  D: [head_dim, head_size]
  H: [num_heads, num_q_heads, n_heads]
  HKV: [num_kv_heads, n_kv_heads]
problem:
  shapes: [{tokens: 4, heads: 3, kv_heads: 2, head_dim: 64}, {tokens: 2, heads: 1, kv_heads: 1, head_dim: 128}]
  dtypes: [fp32, bf16]
  atol: 0.03
  rtol: 0.03
measured: []
---
YaRN RoPE (Peng et al. 2023, "YaRN: Efficient Context Window Extension"; the scheme of
DeepSeek-V2/V3, Qwen2 long-context and vLLM's YaRN rotary embedding), neox halves over the full head
dim D. Each frequency pair i blends extrapolation (the original base^(-2i / D)) with interpolation
(that divided by scaling_factor s): inv_freq_i = interp_i * ramp_i + extrap_i * (1 - ramp_i), ramp_i
= clamp((i - low) / (high - low), 0, 1), where low = floor(dim_of(beta_fast)), high =
ceil(dim_of(beta_slow)) and dim_of(b) = D * ln(L / (2 pi b)) / (2 ln base) for the original context
L (low clamped to >= 0, high to <= D - 1; high is nudged by 0.001 when equal). High-frequency pairs
(many rotations within L) keep their frequency, low-frequency pairs are interpolated, and cos and
sin are scaled by mscale = 0.1 ln(s) + 1 (attention temperature). Design: the launcher derives only
the scalars low, high and mscale; program (t, j) of a (T, ceil((H + HKV) / BLOCK_H)) grid computes
the D/2 blended frequencies, angles and mscale-scaled cos/sin once in fp32 with exp2 (no cache;
changing s or L needs no table rebuild) and applies them to a tile of BLOCK_H heads of the
concatenated q | k head list, writing new q and k tensors. Bytes: one read and one write per
element; transcendentals D/2 per program. Limits: neox layout, full rotary dim; inputs must be
contiguous (outputs are new).
"""

import math

import torch
import triton
import triton.language as tl


@triton.jit
def _rope_yarn_kernel(
    # pointers
    pos_ptr,
    q_ptr,
    k_ptr,
    qo_ptr,
    ko_ptr,
    # sizes
    H,
    HKV,
    # scalars
    neg_log2_base_over_d,
    inv_scaling,
    low,
    inv_span,
    mscale,
    # meta
    HALF: tl.constexpr,
    BLOCK_HALF: tl.constexpr,
    BLOCK_H: tl.constexpr,
):
    t = tl.program_id(0).to(tl.int64)  # int64: t * heads * D can pass 2^31
    heads = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    i = tl.arange(0, BLOCK_HALF)
    extrap = tl.exp2((2 * i).to(tl.float32) * neg_log2_base_over_d)  # base^(-2i / D)
    ramp = tl.minimum(tl.maximum((i.to(tl.float32) - low) * inv_span, 0.0), 1.0)
    inv_freq = extrap * inv_scaling * ramp + extrap * (1.0 - ramp)
    angle = tl.load(pos_ptr + t).to(tl.float32) * inv_freq
    cos = (tl.cos(angle) * mscale)[None, :]
    sin = (tl.sin(angle) * mscale)[None, :]

    # heads [0, H) are q's, [H, H + HKV) are k's; a tile may straddle both
    is_q = heads < H
    in_k = (heads >= H) & (heads < H + HKV)
    imask = (i < HALF)[None, :]
    q_off = (t * H + heads)[:, None] * (2 * HALF) + i[None, :]
    k_off = (t * HKV + heads - H)[:, None] * (2 * HALF) + i[None, :]
    qm = is_q[:, None] & imask
    km = in_k[:, None] & imask
    x1 = tl.load(q_ptr + q_off, mask=qm, other=0.0).to(tl.float32)
    x2 = tl.load(q_ptr + q_off + HALF, mask=qm, other=0.0).to(tl.float32)
    x1 += tl.load(k_ptr + k_off, mask=km, other=0.0).to(tl.float32)
    x2 += tl.load(k_ptr + k_off + HALF, mask=km, other=0.0).to(tl.float32)
    y1 = (x1 * cos - x2 * sin).to(qo_ptr.dtype.element_ty)
    y2 = (x2 * cos + x1 * sin).to(qo_ptr.dtype.element_ty)
    tl.store(qo_ptr + q_off, y1, mask=qm)
    tl.store(qo_ptr + q_off + HALF, y2, mask=qm)
    tl.store(ko_ptr + k_off, y1, mask=km)
    tl.store(ko_ptr + k_off + HALF, y2, mask=km)


def yarn_params(
    head_dim: int,
    scaling_factor: float,
    original_max_position: int,
    base: float,
    beta_fast: float,
    beta_slow: float,
) -> tuple[float, float, float]:
    """Return (low, high, mscale): the ramp's ends in pair index and the cos/sin scale."""

    def dim_of(rotations: float) -> float:
        return (
            head_dim
            * math.log(original_max_position / (rotations * 2 * math.pi))
            / (2 * math.log(base))
        )

    low = max(math.floor(dim_of(beta_fast)), 0)
    high = min(math.ceil(dim_of(beta_slow)), head_dim - 1)
    high = high + 0.001 if high == low else high
    mscale = 0.1 * math.log(scaling_factor) + 1.0 if scaling_factor > 1 else 1.0
    return float(low), float(high), mscale


def rope_yarn_scaled_on_the_fly(
    positions: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    scaling_factor: float = 4.0,
    original_max_position: int = 4096,
    base: float = 10000.0,
    beta_fast: float = 32.0,
    beta_slow: float = 1.0,
    *,
    block_h: int = 4,
    num_warps: int = 4,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (q_out, k_out): q and k rotated by YaRN-scaled neox RoPE.

    Args:
        positions: (T,) int32/int64 token positions.
        q: (T, H, D) bf16/fp16/fp32 (made contiguous).
        k: (T, HKV, D), same dtype and D as q.
        scaling_factor: Context extension factor s (>= 1).
        original_max_position: The model's original context length L.
        base: RoPE theta.
        beta_fast: Rotations within L above which a pair keeps its frequency.
        beta_slow: Rotations within L below which a pair is fully interpolated.
        block_h: Heads per program (a power of two).
        num_warps: Warps per program.

    Returns:
        (q_out, k_out): new tensors shaped and typed like q and k.

    Raises:
        ValueError: Shapes, dtypes, D, scaling_factor or block_h do not fit.
    """
    if q.dim() != 3 or k.dim() != 3 or k.shape[0] != q.shape[0] or k.shape[2] != q.shape[2]:
        raise ValueError(f"q (T, H, D) and k (T, HKV, D) must share T and D; got {tuple(q.shape)}, "
                         f"{tuple(k.shape)}")  # fmt: skip
    if q.dtype != k.dtype or not q.is_floating_point():
        raise ValueError(f"q and k must share a float dtype; got {q.dtype}, {k.dtype}")
    t, h, d = q.shape
    if d % 2:
        raise ValueError(f"head_dim {d} must be even")
    if positions.shape != (t,) or positions.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"positions must be ({t},) int32/int64; got {tuple(positions.shape)} "
                         f"{positions.dtype}")  # fmt: skip
    if scaling_factor < 1.0:
        raise ValueError(f"scaling_factor {scaling_factor} must be >= 1")
    if block_h < 1 or block_h & (block_h - 1):
        raise ValueError(f"block_h {block_h} must be a power of two")
    q, k = q.contiguous(), k.contiguous()
    q_out, k_out = torch.empty_like(q), torch.empty_like(k)
    if t == 0:
        return q_out, k_out
    low, high, mscale = yarn_params(d, scaling_factor, original_max_position, base, beta_fast,
                                    beta_slow)  # fmt: skip
    hkv = k.shape[1]
    _rope_yarn_kernel[(t, triton.cdiv(h + hkv, block_h))](
        positions.contiguous(), q, k, q_out, k_out,
        h, hkv,
        -math.log2(base) / d, 1.0 / scaling_factor, low, 1.0 / (high - low), mscale,
        HALF=d // 2, BLOCK_HALF=triton.next_power_of_2(d // 2), BLOCK_H=block_h,
        num_warps=num_warps,
    )  # fmt: skip
    return q_out, k_out


def reference(
    positions: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    scaling_factor: float = 4.0,
    original_max_position: int = 4096,
    base: float = 10000.0,
    beta_fast: float = 32.0,
    beta_slow: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return YaRN-rotated q and k with the inv_freq table built in fp64 PyTorch, math in fp32."""
    d = q.shape[-1]
    low, high, mscale = yarn_params(d, scaling_factor, original_max_position, base, beta_fast,
                                    beta_slow)  # fmt: skip
    extrap = 1.0 / base ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    ramp = ((torch.arange(d // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
    inv_freq = extrap / scaling_factor * ramp + extrap * (1 - ramp)
    angle = (positions.double()[:, None] * inv_freq.to(positions.device)).float()[:, None, :]
    cos, sin = angle.cos() * mscale, angle.sin() * mscale

    def rotate(x: torch.Tensor) -> torch.Tensor:
        x1, x2 = x.float().chunk(2, dim=-1)
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).to(x.dtype)

    return rotate(q), rotate(k)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return inputs for ``shape = {"tokens", "heads", "kv_heads", "head_dim"}``."""
    t, d = shape["tokens"], shape["head_dim"]
    return {
        "positions": torch.randint(0, 8192, (t,), device=device),
        "q": torch.randn(t, shape["heads"], d, device=device).to(dtype),
        "k": torch.randn(t, shape["kv_heads"], d, device=device).to(dtype),
    }
