"""
---
id: fused_qkv_rope_gptj_interleaved
title: Split packed QKV and apply GPT-J (interleaved pairs) RoPE to q and k, one program per token
op_family: rope
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [fused-split, gptj-rope, interleaved-pairs, split-join, in-kernel-cos-sin, head-loop]
status: reference
launcher: fused_qkv_rope_gptj_interleaved
tuning:
  block_h: [8, 1, 2, 4, 16]
  num_warps: [4, 1, 2, 8]
args:
  qkv: {shape: [T, C], dtypes: [bf16, fp16, fp32], aliases: [qkv_proj, hidden_states]}
  positions: {shape: [T], dtypes: [int32, int64], aliases: [position_ids, pos]}
  num_heads: {type: int, aliases: [n_heads, num_attention_heads, num_q_heads]}
  num_kv_heads: {type: int, aliases: [n_kv_heads, num_key_value_heads]}
  head_dim: {type: int, default: 128, aliases: [head_size]}
  rope_dim: {type: int, default: 0, aliases: [rotary_dim, rot_dim]}
  base: {type: float, default: 10000.0, aliases: [rope_theta, theta, rope_base]}
returns:
  - {name: q, shape: [T, num_heads, head_dim], dtype: qkv}
  - {name: k, shape: [T, num_kv_heads, head_dim], dtype: qkv}
  - {name: v, shape: [T, num_kv_heads, head_dim], dtype: qkv}
problem:
  shapes: [{tokens: 5, heads: 6, kv_heads: 2, head_dim: 64}, {tokens: 3, heads: 3, kv_heads: 1, head_dim: 32, rope_dim: 16}]
  dtypes: [fp32, bf16]
  atol: 0.02
  rtol: 0.02
measured: []
---
Takes the (T, (H + 2 * Hkv) * D) output of a fused QKV projection and writes q (T, H, D), k and v
(T, Hkv, D) with GPT-J style rotary embedding on q and k: adjacent dims (2i, 2i + 1) form a pair
rotated by the angle pos * base^(-2i / R) for 2i < R (rope_dim, 0 = all of D); dims past R and all
of v are copied. One program per token: it computes the D / 2 cosines and sines once (exp2 of the
frequency exponent, then cos/sin in fp32; pairs past R get cos 1 and sin 0, so partial rotary needs
no branch) and walks the token's H + 2 * Hkv heads in BLOCK_H-head tiles. Each tile is loaded as one
contiguous (BLOCK_H, D) block, reshaped to (BLOCK_H, D / 2, 2) and tl.split into its even and odd
lanes; the rotated halves are tl.join-ed back into interleaved order and stored with one contiguous
store, so no strided (stride-2) global access is issued. A tile's heads may straddle the q / k / v
boundaries: each head's role comes from its index. Bytes: every qkv element read and written once (4
B per element in bf16). Limits: D must be a power of two (the reshape); no bias; no RoPE scaling
(YaRN, NTK); in-kernel frequencies differ from a precomputed fp32 table by ~1 ulp (~1e-4 rad at
position 10^3).
"""

import math

import torch
import triton
import triton.language as tl


@triton.jit
def _qkv_rope_gptj_kernel(
    # pointers
    qkv_ptr,
    pos_ptr,
    q_ptr,
    k_ptr,
    v_ptr,
    # sizes
    H,
    HKV,
    stride_qkv_t,
    ROT_HALF,  # R / 2 pairs rotate
    neg_log2_base_over_r,  # -log2(base) * 2 / R
    # meta
    D: tl.constexpr,
    BLOCK_H: tl.constexpr,
):
    token = tl.program_id(0).to(tl.int64)
    pos = tl.load(pos_ptr + token).to(tl.float32)
    pair = tl.arange(0, D // 2)
    angle = pos * tl.exp2(pair.to(tl.float32) * neg_log2_base_over_r)
    rotates = pair < ROT_HALF
    cos = tl.where(rotates, tl.cos(angle), 1.0)[None, :]
    sin = tl.where(rotates, tl.sin(angle), 0.0)[None, :]
    dims = tl.arange(0, D)[None, :]
    total = H + 2 * HKV
    for h0 in range(0, total, BLOCK_H):
        head = h0 + tl.arange(0, BLOCK_H)[:, None]  # (BLOCK_H, 1)
        m = (head < total) & (dims < D)
        x = tl.load(qkv_ptr + token * stride_qkv_t + head * D + dims, mask=m, other=0.0)
        x = x.to(tl.float32)
        even, odd = tl.split(tl.reshape(x, (BLOCK_H, D // 2, 2)))
        is_v = head >= H + HKV  # v heads pass through unchanged
        c = tl.where(is_v, 1.0, cos)
        s = tl.where(is_v, 0.0, sin)
        y = tl.reshape(tl.join(even * c - odd * s, odd * c + even * s), (BLOCK_H, D))
        y = y.to(q_ptr.dtype.element_ty)
        in_q = head < H
        in_k = (head >= H) & ~is_v
        tl.store(q_ptr + (token * H + head) * D + dims, y, mask=m & in_q)
        tl.store(k_ptr + (token * HKV + head - H) * D + dims, y, mask=m & in_k)
        tl.store(v_ptr + (token * HKV + head - H - HKV) * D + dims, y, mask=m & is_v)


def fused_qkv_rope_gptj_interleaved(
    qkv: torch.Tensor,
    positions: torch.Tensor,
    num_heads: int,
    num_kv_heads: int,
    head_dim: int = 128,
    rope_dim: int = 0,
    base: float = 10000.0,
    *,
    block_h: int | None = None,
    num_warps: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Split qkv into q, k, v heads and rotate q and k with GPT-J (interleaved) RoPE.

    Args:
        qkv: (T, (num_heads + 2 * num_kv_heads) * head_dim) bf16/fp16/fp32, last dim contiguous.
        positions: (T,) int32/int64 token positions.
        num_heads: Query heads H.
        num_kv_heads: Key/value heads Hkv.
        head_dim: D, a power of two.
        rope_dim: Rotated dims R (even, <= D); 0 rotates all of D.
        base: RoPE base theta.
        block_h: Heads per loop step (power of two); None = min(8, next_pow2(H + 2 * Hkv)).
        num_warps: Warps per program; None = 4.

    Returns:
        (q, k, v): contiguous (T, H, D), (T, Hkv, D), (T, Hkv, D) in qkv's dtype.

    Raises:
        ValueError: The shapes or sizes do not fit.
    """
    total = num_heads + 2 * num_kv_heads
    if qkv.dim() != 2 or qkv.shape[1] != total * head_dim or qkv.stride(1) != 1:
        raise ValueError(
            f"need qkv (T, {total * head_dim}) with a contiguous last dim for {num_heads} + 2 x "
            f"{num_kv_heads} heads of {head_dim}; got {tuple(qkv.shape)}"
        )
    if head_dim < 2 or head_dim & (head_dim - 1):
        raise ValueError(f"head_dim must be a power of two >= 2; got {head_dim}")
    rot = rope_dim or head_dim
    if rot % 2 or not 0 < rot <= head_dim:
        raise ValueError(f"rope_dim must be even and in (0, {head_dim}]; got {rope_dim}")
    if tuple(positions.shape) != (qkv.shape[0],):
        raise ValueError(f"positions must be ({qkv.shape[0]},); got {tuple(positions.shape)}")
    t = qkv.shape[0]
    bh = block_h or min(8, triton.next_power_of_2(total))
    if bh & (bh - 1):
        raise ValueError(f"block_h must be a power of two; got {bh}")
    q = torch.empty((t, num_heads, head_dim), dtype=qkv.dtype, device=qkv.device)
    k = torch.empty((t, num_kv_heads, head_dim), dtype=qkv.dtype, device=qkv.device)
    v = torch.empty((t, num_kv_heads, head_dim), dtype=qkv.dtype, device=qkv.device)
    if t == 0:
        return q, k, v
    _qkv_rope_gptj_kernel[(t,)](
        qkv, positions, q, k, v,
        num_heads, num_kv_heads, qkv.stride(0), rot // 2, -math.log2(base) * 2.0 / rot,
        D=head_dim, BLOCK_H=bh, num_warps=num_warps or 4,
    )  # fmt: skip
    return q, k, v


def reference(
    qkv: torch.Tensor,
    positions: torch.Tensor,
    num_heads: int,
    num_kv_heads: int,
    head_dim: int = 128,
    rope_dim: int = 0,
    base: float = 10000.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Return (q, k, v) with GPT-J RoPE on q and k, computed in fp32 PyTorch."""
    t, d, rot = qkv.shape[0], head_dim, rope_dim or head_dim
    x = qkv.float()
    q = x[:, : num_heads * d].view(t, num_heads, d)
    k = x[:, num_heads * d : (num_heads + num_kv_heads) * d].view(t, num_kv_heads, d)
    v = x[:, (num_heads + num_kv_heads) * d :].view(t, num_kv_heads, d)
    inv_freq = 1.0 / (base ** (torch.arange(0, rot, 2, device=qkv.device).float() / rot))
    angles = positions.float()[:, None] * inv_freq  # (T, R / 2)
    cos, sin = angles.cos()[:, None, :], angles.sin()[:, None, :]

    def rotate(h: torch.Tensor) -> torch.Tensor:
        out = h.clone()
        even, odd = h[..., 0:rot:2], h[..., 1:rot:2]
        out[..., 0:rot:2] = even * cos - odd * sin
        out[..., 1:rot:2] = odd * cos + even * sin
        return out.to(qkv.dtype)

    return rotate(q), rotate(k), v.to(qkv.dtype).contiguous()


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return inputs for ``{"tokens", "heads", "kv_heads", "head_dim"}`` (+ ``"rope_dim"``).

    qkv ~ N(0, 1); positions start + arange(T) with start uniform in [0, 64).
    """
    t, h, hkv, d = shape["tokens"], shape["heads"], shape["kv_heads"], shape["head_dim"]
    start = int(torch.randint(0, 64, ()))
    return {
        "qkv": torch.randn(t, (h + 2 * hkv) * d, device=device).to(dtype),
        "positions": torch.arange(start, start + t, dtype=torch.int32, device=device),
        "num_heads": h,
        "num_kv_heads": hkv,
        "head_dim": d,
        "rope_dim": shape.get("rope_dim", 0),
    }
