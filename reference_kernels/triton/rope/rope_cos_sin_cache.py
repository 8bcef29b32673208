"""
---
id: rope_cos_sin_cache
title: RoPE on q and k from a cos/sin cache, one program per (token, head), partial rotary
op_family: rope
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [cos-sin-cache-lookup, partner-gather, partial-rotary, neox-and-gptj, fp32-accumulate]
status: reference
launcher: rope_cos_sin_cache
tuning:
  num_warps: [1, 2, 4]
args:
  q: {shape: [T, H, D], dtypes: [bf16, fp16, fp32], flattened: true, aliases: [query]}
  k: {shape: [T, HKV, D], like: q, flattened: true, aliases: [key]}
  cos_sin_cache: {shape: [P, R], dtypes: [float], aliases: [cos_sin, rope_cache]}
  positions: {shape: [T], dtypes: [int32, int64], aliases: [position_ids, pos]}
  is_neox: {type: bool, default: true, aliases: [is_neox_style, neox]}
returns:
  - {name: q_out, shape: [T, H, D], dtype: q}
  - {name: k_out, shape: [T, HKV, D], dtype: k}
dims:
  D: [head_dim, head_size]
  H: [num_heads, num_q_heads, n_heads]
  HKV: [num_kv_heads, n_kv_heads]
problem:
  shapes: [{tokens: 1, heads: 4, kv_heads: 2, head_dim: 128}, {tokens: 9, heads: 3, kv_heads: 1, head_dim: 80, rot_dim: 32}]
  dtypes: [fp32, bf16]
measured: []
---
Rotary embedding for separate q (T, H, D) and k (T, Hkv, D) given a precomputed cos_sin_cache
(max_position, rot_dim) whose row p holds [cos(p * f_i) | sin(p * f_i)] for i < rot_dim / 2. Program
(t, j) handles one head (j < H: q, else k) as a single D-wide vector: each lane d < rot_dim loads
its own value and its rotation partner (d +- rot_dim / 2 for neox, d ^ 1 for GPT-J interleaved; the
partner load hits L1) and the cos/sin of its frequency from the cache row of position[t], so out[d]
= x[d] * cos + sign * x[partner] * sin; lanes d >= rot_dim pass through (partial rotary). The
results go to fresh q, k tensors (no in-place update). Bytes: one read and one write per element
plus rot_dim cache values per (token, head) from L1/L2. Limits: one small program per head (H * T
programs; fine for prefill, launch-bound for decode); positions must be < max_position (not checked
on the device); no offsets / scaling variants.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _rope_cos_sin_cache_kernel(
    # pointers
    q_ptr,
    k_ptr,
    cache_ptr,
    pos_ptr,
    q_out_ptr,
    k_out_ptr,
    # sizes
    H,
    D,
    ROT,
    # strides (elements; the head dim is contiguous everywhere)
    stride_qt,
    stride_qh,
    stride_kt,
    stride_kh,
    stride_cache,
    stride_qot,
    stride_qoh,
    stride_kot,
    stride_koh,
    # meta
    IS_NEOX: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    token = tl.program_id(0).to(tl.int64)  # int64: token * stride can pass 2^31 elements
    head = tl.program_id(1)
    is_q = head < H
    # pick source and destination for this head: q heads first, then k heads
    if is_q:
        src = q_ptr + token * stride_qt + head * stride_qh
        dst = q_out_ptr + token * stride_qot + head * stride_qoh
    else:
        src = k_ptr + token * stride_kt + (head - H) * stride_kh
        dst = k_out_ptr + token * stride_kot + (head - H) * stride_koh

    d = tl.arange(0, BLOCK_D)
    in_head = d < D
    rotated = d < ROT
    half = ROT // 2
    if IS_NEOX:
        # pairs (i, i + half): the first half takes -x2 * sin, the second +x1 * sin
        freq = tl.where(d < half, d, d - half)
        partner = tl.where(d < half, d + half, d - half)
        sign = tl.where(d < half, -1.0, 1.0)
    else:
        # GPT-J: interleaved pairs (2i, 2i + 1)
        freq = d // 2
        partner = d ^ 1
        sign = tl.where(d % 2 == 0, -1.0, 1.0)

    pos = tl.load(pos_ptr + token).to(tl.int64)
    cache_row = cache_ptr + pos * stride_cache
    cos = tl.load(cache_row + freq, mask=rotated, other=1.0).to(tl.float32)
    sin = tl.load(cache_row + half + freq, mask=rotated, other=0.0).to(tl.float32)

    x = tl.load(src + d, mask=in_head, other=0.0).to(tl.float32)  # fp32 math
    x_partner = tl.load(src + partner, mask=rotated, other=0.0).to(tl.float32)
    # lanes past rot_dim: cos = 1, sin = 0 from the masked loads, so they pass through unchanged
    out = x * cos + sign * x_partner * sin
    tl.store(dst + d, out.to(q_out_ptr.dtype.element_ty), mask=in_head)


def _launch_config(d: int) -> dict[str, int]:
    """Return the head block (next power of two) and warps (one warp per 128 elements, <= 4)."""
    block_d = triton.next_power_of_2(d)
    return {"block_d": block_d, "num_warps": min(max(block_d // 128, 1), 4)}


def _check(q, k, cos_sin_cache, positions) -> None:
    """Raise ValueError unless q, k, cache and positions fit together."""
    if q.dim() != 3 or k.dim() != 3 or q.shape[0] != k.shape[0] or q.shape[2] != k.shape[2]:
        raise ValueError(
            f"q, k must be (T, H, D), (T, Hkv, D); got {tuple(q.shape)}, {tuple(k.shape)}"
        )
    rot = cos_sin_cache.shape[-1]
    if cos_sin_cache.dim() != 2 or rot % 2 or rot > q.shape[2]:
        raise ValueError(
            f"cos_sin_cache must be (max_pos, even rot_dim <= D); got {cos_sin_cache.shape}"
        )
    if positions.shape != (q.shape[0],) or positions.dtype not in (torch.int32, torch.int64):
        raise ValueError(
            f"positions must be int32/int64 ({q.shape[0]},); got {tuple(positions.shape)}"
        )
    if q.dtype != k.dtype:
        raise ValueError(f"q and k dtypes differ: {q.dtype}, {k.dtype}")


def rope_cos_sin_cache(
    q: torch.Tensor,
    k: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    positions: torch.Tensor,
    is_neox: bool = True,
    *,
    num_warps: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (q, k) rotated by the cached cos/sin at each token's position.

    Args:
        q: (T, H, D) bf16/fp16/fp32; the head dim contiguous, other strides free.
        k: (T, Hkv, D) same dtype; the head dim contiguous.
        cos_sin_cache: (max_position, rot_dim) any float dtype; row p = [cos | sin], rot_dim <= D.
        positions: (T,) int32/int64, each < max_position.
        is_neox: True rotates halves (neox); False rotates interleaved pairs (GPT-J).
        num_warps: Warps per program; None picks by head size.

    Returns:
        (q_out, k_out): fresh tensors shaped and typed like q and k, contiguous.

    Raises:
        ValueError: The shapes or dtypes do not fit.
    """
    _check(q, k, cos_sin_cache, positions)
    q = q if q.stride(2) == 1 else q.contiguous()
    k = k if k.stride(2) == 1 else k.contiguous()
    cache = cos_sin_cache if cos_sin_cache.stride(1) == 1 else cos_sin_cache.contiguous()
    t, h, d = q.shape
    q_out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    k_out = torch.empty(k.shape, dtype=k.dtype, device=k.device)
    if t == 0:
        return q_out, k_out
    cfg = _launch_config(d)
    if num_warps is not None:
        cfg["num_warps"] = num_warps
    _rope_cos_sin_cache_kernel[(t, h + k.shape[1])](
        q, k, cache, positions, q_out, k_out,
        h, d, cache.shape[1],
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), cache.stride(0),
        q_out.stride(0), q_out.stride(1), k_out.stride(0), k_out.stride(1),
        IS_NEOX=is_neox,
        BLOCK_D=cfg["block_d"],
        num_warps=cfg["num_warps"],
    )  # fmt: skip
    return q_out, k_out


def reference(
    q: torch.Tensor,
    k: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    positions: torch.Tensor,
    is_neox: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (q, k) rotated in fp32 by cos_sin_cache[positions], cast back to q's dtype."""
    rot = cos_sin_cache.shape[-1]
    cos, sin = cos_sin_cache[positions.long()].float()[:, None, :].chunk(2, dim=-1)  # (T, 1, rot/2)

    def rotate(x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        x_rot, x_pass = xf[..., :rot], xf[..., rot:]
        if is_neox:
            x1, x2 = x_rot.chunk(2, dim=-1)
            out = torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)
        else:
            x1, x2 = x_rot[..., 0::2], x_rot[..., 1::2]
            out = torch.stack([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).flatten(-2)
        return torch.cat([out, x_pass], dim=-1).to(x.dtype)

    return rotate(q), rotate(k)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return kwargs for ``shape = {"tokens", "heads", "kv_heads", "head_dim", "rot_dim"}``.

    The cache is built for base 10000 over 512 positions in fp32; positions are random int64.
    """
    t, h, hkv, d = shape["tokens"], shape["heads"], shape["kv_heads"], shape["head_dim"]
    rot, max_pos = shape.get("rot_dim", d), 512
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, rot, 2, device=device).float() / rot))
    angles = torch.arange(max_pos, device=device).float()[:, None] * inv_freq
    return {
        "q": torch.randn(t, h, d, device=device).to(dtype),
        "k": torch.randn(t, hkv, d, device=device).to(dtype),
        "cos_sin_cache": torch.cat([angles.cos(), angles.sin()], dim=-1),
        "positions": torch.randint(0, max_pos, (t,), device=device),
        "is_neox": shape.get("is_neox", True),
    }
