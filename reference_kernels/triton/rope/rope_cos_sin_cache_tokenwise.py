"""
---
id: rope_cos_sin_cache_tokenwise
title: RoPE on q and k from a cos/sin cache, one program per token over all its heads
op_family: rope
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [token-per-program, head-tiles, cos-sin-cache-lookup, partial-rotary, neox-and-gptj,
  fp32-accumulate]
status: reference
launcher: rope_cos_sin_cache_tokenwise
tuning:
  block_h: [4, 1, 2, 8, 16]
  num_warps: [4, 1, 2, 8]
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
  shapes: [{tokens: 5, heads: 4, kv_heads: 2, head_dim: 64}, {tokens: 3, heads: 5, kv_heads: 1, head_dim: 80, rot_dim: 32}]
  dtypes: [fp32, bf16]
  atol: 0.02
  rtol: 0.02
measured: []
---
Rotary embedding for separate q (T, H, D) and k (T, Hkv, D) with a precomputed cos_sin_cache
(max_position, rot_dim), row p = [cos(p * f_i) | sin(p * f_i)]. One program per token: it reads the
token's position and its cos/sin row once, then rotates the token's q heads and then its k heads in
(BLOCK_H, D) tiles, each lane d < rot_dim combining its value with its rotation partner (d +-
rot_dim / 2 for neox, d ^ 1 for GPT-J interleaved; the partner load hits L1) in fp32; lanes past
rot_dim pass through (partial rotary). Same numerics as rope_cos_sin_cache, with T programs instead
of T * (H + Hkv): fewer, fatter programs (one cache-row read per token instead of per head), better
for decode batches with many heads, worse for few long prefills that need more parallelism. Bytes:
one read and one write per element plus rot_dim cache values per token. Limits: positions must be <
max_position (not checked on the device); fresh q, k outputs, no in-place variant.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _rope_rotate_heads(
    # pointers to this token's first head (source and destination)
    src_ptr,
    dst_ptr,
    # sizes and strides (elements)
    n_heads,
    D,
    stride_src_h,
    stride_dst_h,
    # the token's per-lane rotation: partner lane, sign, cos and sin (fp32, BLOCK_D wide)
    partner,
    sign,
    cos,
    sin,
    # meta
    BLOCK_H: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    d = tl.arange(0, BLOCK_D)
    in_head = d < D
    for h0 in range(0, n_heads, BLOCK_H):
        heads = h0 + tl.arange(0, BLOCK_H)
        mask = (heads < n_heads)[:, None] & in_head[None, :]
        src = src_ptr + heads[:, None] * stride_src_h
        x = tl.load(src + d[None, :], mask=mask, other=0.0).to(tl.float32)  # fp32 math
        x_partner = tl.load(src + partner[None, :], mask=mask, other=0.0).to(tl.float32)
        # lanes past rot_dim: cos = 1, sin = 0, so they pass through unchanged
        out = x * cos[None, :] + sign[None, :] * x_partner * sin[None, :]
        dst = dst_ptr + heads[:, None] * stride_dst_h + d[None, :]
        tl.store(dst, out.to(dst_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rope_tokenwise_kernel(
    # pointers
    q_ptr,
    k_ptr,
    cache_ptr,
    pos_ptr,
    q_out_ptr,
    k_out_ptr,
    # sizes
    H,
    HKV,
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
    BLOCK_H: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    token = tl.program_id(0).to(tl.int64)  # int64: token * stride can pass 2^31 elements
    d = tl.arange(0, BLOCK_D)
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
    partner = tl.where(rotated, partner, d)  # pass-through lanes read themselves (sin is 0)

    # the token's cos/sin row, read once for all its heads
    pos = tl.load(pos_ptr + token).to(tl.int64)
    cache_row = cache_ptr + pos * stride_cache
    cos = tl.load(cache_row + freq, mask=rotated, other=1.0).to(tl.float32)
    sin = tl.load(cache_row + half + freq, mask=rotated, other=0.0).to(tl.float32)

    _rope_rotate_heads(
        q_ptr + token * stride_qt, q_out_ptr + token * stride_qot,
        H, D, stride_qh, stride_qoh,
        partner, sign, cos, sin,
        BLOCK_H, BLOCK_D,
    )  # fmt: skip
    _rope_rotate_heads(
        k_ptr + token * stride_kt, k_out_ptr + token * stride_kot,
        HKV, D, stride_kh, stride_koh,
        partner, sign, cos, sin,
        BLOCK_H, BLOCK_D,
    )  # fmt: skip


def _launch_config(h: int, d: int) -> dict[str, int]:
    """Return the head tile (about 512 elements) and warps (one per 256 tile elements, <= 8)."""
    block_d = triton.next_power_of_2(d)
    block_h = min(triton.next_power_of_2(h), max(1, 512 // block_d))
    num_warps = min(max(block_h * block_d // 256, 1), 8)
    return {"block_h": block_h, "block_d": block_d, "num_warps": num_warps}


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


def rope_cos_sin_cache_tokenwise(
    q: torch.Tensor,
    k: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    positions: torch.Tensor,
    is_neox: bool = True,
    *,
    block_h: int | None = None,
    num_warps: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (q, k) rotated by the cached cos/sin at each token's position.

    Args:
        q: (T, H, D) bf16/fp16/fp32; the head dim contiguous, other strides free.
        k: (T, Hkv, D) same dtype; the head dim contiguous.
        cos_sin_cache: (max_position, rot_dim) any float dtype; row p = [cos | sin], rot_dim <= D.
        positions: (T,) int32/int64, each < max_position.
        is_neox: True rotates halves (neox); False rotates interleaved pairs (GPT-J).
        block_h: Heads per tile (power of two); None fills about 512 elements.
        num_warps: Warps per program; None picks by tile size.

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
    cfg = _launch_config(max(h, k.shape[1]), d)
    given = {"block_h": block_h, "num_warps": num_warps}
    cfg.update({key: value for key, value in given.items() if value is not None})
    _rope_tokenwise_kernel[(t,)](
        q, k, cache, positions, q_out, k_out,
        h, k.shape[1], d, cache.shape[1],
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), cache.stride(0),
        q_out.stride(0), q_out.stride(1), k_out.stride(0), k_out.stride(1),
        IS_NEOX=is_neox,
        BLOCK_H=cfg["block_h"],
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
