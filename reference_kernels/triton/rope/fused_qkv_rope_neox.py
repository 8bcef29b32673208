"""
---
id: fused_qkv_rope_neox
title: Split fused QKV and apply neox RoPE to q and k, with cos/sin computed in the kernel
op_family: rope
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [fused-split, neox-rope, in-kernel-cos-sin, head-tile, exp2, fp32-accumulate]
status: reference
launcher: fused_qkv_rope_neox
tuning:
  block_h: [4, 1, 2, 8, 16]
  num_warps: [4, 1, 2, 8]
args:
  qkv: {shape: [T, C], dtypes: [bf16, fp16, fp32], aliases: [qkv_proj, hidden_states]}
  positions: {shape: [T], dtypes: [int32, int64], aliases: [position_ids, pos]}
  num_heads: {type: int, aliases: [n_heads, num_attention_heads, num_q_heads]}
  num_kv_heads: {type: int, aliases: [n_kv_heads, num_key_value_heads]}
  head_dim: {type: int, default: 128, aliases: [head_size]}
  base: {type: float, default: 10000.0, aliases: [rope_theta, theta, rope_base]}
returns:
  - {name: q, shape: [T, num_heads, head_dim], dtype: qkv}
  - {name: k, shape: [T, num_kv_heads, head_dim], dtype: qkv}
  - {name: v, shape: [T, num_kv_heads, head_dim], dtype: qkv}
problem:
  shapes: [{tokens: 1, heads: 4, kv_heads: 2, head_dim: 128}, {tokens: 33, heads: 3, kv_heads: 1, head_dim: 32, pos_int64: true}]
  dtypes: [fp32, bf16]
measured: []
---
Takes the (T, (H + 2 * Hkv) * D) output of the fused QKV projection and writes q (T, H, D), k and v
(T, Hkv, D) with neox-style rotary embedding (the two halves of each head rotate together) applied
to q and k; v is a plain copy. Program (t, j) owns a tile of BLOCK_H consecutive heads of token t,
loaded as two (BLOCK_H, D / 2) half-tiles; each head's role (q, k or v) comes from its index, so one
launch covers the split. The angles pos * base^(-2i / D) are computed in fp32 in the kernel (exp2,
sin, cos once per program, shared by the tile's heads), so no cos/sin cache is read. Bytes: read and
write each qkv element once (4 bytes per element in bf16). Limits: full-width rotation (rot_dim = D)
and neox style only (see rope_cos_sin_cache for partial rotary and GPT-J style); the in-kernel
frequencies differ from a precomputed fp32 table by ~1 ulp, i.e. ~1e-4 rad at position 10^3; no RoPE
scaling variants (YaRN, NTK, mrope).
"""

import math

import torch
import triton
import triton.language as tl


@triton.jit
def _fused_qkv_rope_neox_kernel(
    # pointers
    qkv_ptr,
    pos_ptr,
    q_ptr,
    k_ptr,
    v_ptr,
    # sizes
    H,
    HKV,
    D,
    # strides (elements; heads are contiguous runs of D inside a token row)
    stride_qkv_t,
    stride_q_t,
    stride_k_t,
    stride_v_t,
    # scalars
    log2_base,
    # meta
    BLOCK_H: tl.constexpr,
    BLOCK_HALF: tl.constexpr,
):
    token = tl.program_id(0).to(tl.int64)  # int64: token * stride can pass 2^31 elements
    heads = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    half = D // 2
    offs = tl.arange(0, BLOCK_HALF)

    # angles for this token: theta_i = pos * base^(-2i/D), fp32, shared by every head of the tile
    pos = tl.load(pos_ptr + token).to(tl.float32)
    inv_freq = tl.exp2(-(2.0 * offs.to(tl.float32) / D) * log2_base)
    cos = tl.cos(pos * inv_freq)[None, :]
    sin = tl.sin(pos * inv_freq)[None, :]

    # each head's role comes from its index in the fused row: [q heads | k heads | v heads]
    is_q = heads < H
    is_k = (heads >= H) & (heads < H + HKV)
    is_v = (heads >= H + HKV) & (heads < H + 2 * HKV)
    lane = (offs < half)[None, :]
    src = qkv_ptr + token * stride_qkv_t + heads[:, None] * D + offs[None, :]
    in_mask = (heads < H + 2 * HKV)[:, None] & lane
    x1 = tl.load(src, mask=in_mask, other=0.0).to(tl.float32)  # first halves, fp32
    x2 = tl.load(src + half, mask=in_mask, other=0.0).to(tl.float32)  # second halves

    # neox rotation of the pair (x1[i], x2[i]); v heads keep x1, x2 unchanged
    rotate = (is_q | is_k)[:, None]
    o1 = tl.where(rotate, x1 * cos - x2 * sin, x1)
    o2 = tl.where(rotate, x2 * cos + x1 * sin, x2)

    # three masked stores: a head lands in exactly one output
    o1 = o1.to(q_ptr.dtype.element_ty)
    o2 = o2.to(q_ptr.dtype.element_ty)
    col = offs[None, :]
    q_dst = q_ptr + token * stride_q_t + heads[:, None] * D + col
    tl.store(q_dst, o1, mask=is_q[:, None] & lane)
    tl.store(q_dst + half, o2, mask=is_q[:, None] & lane)
    k_dst = k_ptr + token * stride_k_t + (heads - H)[:, None] * D + col
    tl.store(k_dst, o1, mask=is_k[:, None] & lane)
    tl.store(k_dst + half, o2, mask=is_k[:, None] & lane)
    v_dst = v_ptr + token * stride_v_t + (heads - H - HKV)[:, None] * D + col
    tl.store(v_dst, o1, mask=is_v[:, None] & lane)
    tl.store(v_dst + half, o2, mask=is_v[:, None] & lane)


def _launch_config(heads: int, d: int) -> dict[str, int]:
    """Return heads per program (about 512 pairs per tile) and warps."""
    block_half = triton.next_power_of_2(d // 2)
    block_h = max(1, min(triton.next_power_of_2(heads), 512 // block_half))
    return {"block_h": block_h, "block_half": block_half, "num_warps": 4 if block_h >= 4 else 2}


def fused_qkv_rope_neox(
    qkv: torch.Tensor,
    positions: torch.Tensor,
    num_heads: int,
    num_kv_heads: int,
    head_dim: int = 128,
    base: float = 10000.0,
    *,
    block_h: int | None = None,
    num_warps: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Split qkv into q, k, v and apply neox RoPE to q and k.

    Args:
        qkv: (T, (H + 2 * Hkv) * D) bf16/fp16/fp32, last dimension contiguous.
        positions: (T,) int32/int64 token positions.
        num_heads: H, query heads.
        num_kv_heads: Hkv, key/value heads.
        head_dim: D, even; rotated over its full width.
        base: RoPE frequency base (theta_i = pos * base^(-2i/D)).
        block_h: Heads per program (power of two); None picks about 512 pairs per tile.
        num_warps: Warps per program; None picks by tile size.

    Returns:
        (q, k, v): (T, H, D), (T, Hkv, D), (T, Hkv, D) in qkv's dtype, contiguous.

    Raises:
        ValueError: The shapes do not fit or D is odd.
    """
    t = qkv.shape[0]
    width = (num_heads + 2 * num_kv_heads) * head_dim
    if qkv.dim() != 2 or qkv.shape[1] != width or head_dim % 2:
        raise ValueError(f"qkv must be (T, {width}) with even head_dim; got {tuple(qkv.shape)}")
    if positions.shape != (t,) or positions.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"positions must be int32/int64 ({t},); got {tuple(positions.shape)}")
    if qkv.stride(1) != 1:
        qkv = qkv.contiguous()
    q = torch.empty((t, num_heads, head_dim), dtype=qkv.dtype, device=qkv.device)
    k = torch.empty((t, num_kv_heads, head_dim), dtype=qkv.dtype, device=qkv.device)
    v = torch.empty_like(k)
    if t == 0:
        return q, k, v
    total = num_heads + 2 * num_kv_heads
    cfg = _launch_config(total, head_dim)
    given = {"block_h": block_h, "num_warps": num_warps}
    cfg.update({key: value for key, value in given.items() if value is not None})
    grid = (t, triton.cdiv(total, cfg["block_h"]))
    _fused_qkv_rope_neox_kernel[grid](
        qkv, positions, q, k, v,
        num_heads, num_kv_heads, head_dim,
        qkv.stride(0), q.stride(0), k.stride(0), v.stride(0),
        math.log2(base),
        BLOCK_H=cfg["block_h"], BLOCK_HALF=cfg["block_half"],
        num_warps=cfg["num_warps"],
    )  # fmt: skip
    return q, k, v


def reference(
    qkv: torch.Tensor,
    positions: torch.Tensor,
    num_heads: int,
    num_kv_heads: int,
    head_dim: int = 128,
    base: float = 10000.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Return (q, k, v) with neox RoPE on q and k, computed in fp32 and cast to qkv's dtype."""
    t = qkv.shape[0]
    x = qkv.float().view(t, num_heads + 2 * num_kv_heads, head_dim)
    q, k, v = x.split([num_heads, num_kv_heads, num_kv_heads], dim=1)
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, device=qkv.device).float() / head_dim))
    angles = positions.float()[:, None, None] * inv_freq  # (T, 1, D/2)
    cos, sin = angles.cos(), angles.sin()

    def rotate(y: torch.Tensor) -> torch.Tensor:
        y1, y2 = y.chunk(2, dim=-1)
        return torch.cat([y1 * cos - y2 * sin, y2 * cos + y1 * sin], dim=-1)

    return tuple(y.to(qkv.dtype).contiguous() for y in (rotate(q), rotate(k), v))


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return launcher kwargs for ``shape = {"tokens", "heads", "kv_heads", "head_dim"}``.

    qkv ~ N(0, 1); positions are random in [0, 256) as int32 (int64 with ``"pos_int64": True``).
    """
    t, h, hkv, d = shape["tokens"], shape["heads"], shape["kv_heads"], shape["head_dim"]
    qkv = torch.randn(t, (h + 2 * hkv) * d, device=device).to(dtype)
    pos_dtype = torch.int64 if shape.get("pos_int64") else torch.int32
    positions = torch.randint(0, 256, (t,), device=device, dtype=pos_dtype)
    return {"qkv": qkv, "positions": positions, "num_heads": h, "num_kv_heads": hkv, "head_dim": d}
