"""
---
id: rope_position_ids_inplace_qk
title: In-place neox RoPE on q and k by position ids and a cos/sin cache, (token, head tile) grid
op_family: rope
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [in-place, neox-rotation, cos-sin-cache, head-tile, shared-cos-sin-load, partial-rotary]
status: reference
launcher: rope_position_ids_inplace_qk
tuning:
  block_h: [4, 1, 2, 8, 16]
  num_warps: [4, 1, 2, 8]
args:
  positions: {shape: [T], dtypes: [int32, int64], aliases: [position_ids, pos]}
  q: {shape: [T, H, D], dtypes: [bf16, fp16, fp32], layout: any, flattened: true, aliases: [query]}
  k: {shape: [T, HKV, D], like: q, layout: any, flattened: true, aliases: [key]}
  cos_sin_cache: {shape: [P, R], dtypes: [float], aliases: [cos_sin, rope_cache]}
returns:
  - {name: q, alias: q}
  - {name: k, alias: k}
dims:
  D: [head_dim, head_size]
  H: [num_heads, num_q_heads, n_heads]
  HKV: [num_kv_heads, n_kv_heads]
problem:
  shapes: [{tokens: 3, heads: 6, kv_heads: 2, head_dim: 64}, {tokens: 2, heads: 4, kv_heads: 4, head_dim: 48, rot_dim: 24}]
  dtypes: [fp32, bf16]
  in_place: [q, k]
measured: []
---
vLLM-style rotary_embedding(positions, query, key, cos_sin_cache), neox layout, in place: for token
t at position p = positions[t], cos = cache[p, :R/2] and sin = cache[p, R/2:], and the first R
dimensions of every q and k head are rotated as (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin),
where x1, x2 are the first and second halves of those R dims (dims R..D pass through untouched and
are never loaded). q and k may be strided views (e.g. slices of a fused qkv buffer): only their last
dim must be contiguous, and they are updated where they live, with no output allocation. Design: the
grid is (T, ceil(H / BLOCK_H) + ceil(HKV / BLOCK_H)); program (t, j) reads position and the R/2 cos
and sin values once and applies them to a (BLOCK_H, R/2) pair of half-tiles of either q (first
tiles) or k (last tiles), so the cos/sin load is amortised over BLOCK_H heads while decode batches
still get more than one program per token. Math in fp32, one rounding at the store. Bytes: 2 reads
+ 2 writes per rotated bf16 element. Limits: neox (half-split) pairing only, no GPT-J interleave;
R even and <= D; no fused qkv split or bias.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _rotate_heads(base, stride_h, heads, num_heads, cos, sin, d, dmask, HALF: tl.constexpr):
    """Rotate the first 2 * HALF dims of heads `heads` at `base` in place (neox halves)."""
    mask = (heads < num_heads)[:, None] & dmask[None, :]
    ptr1 = base + heads.to(tl.int64)[:, None] * stride_h + d[None, :]
    x1 = tl.load(ptr1, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(ptr1 + HALF, mask=mask, other=0.0).to(tl.float32)
    o1 = x1 * cos[None, :] - x2 * sin[None, :]
    o2 = x2 * cos[None, :] + x1 * sin[None, :]
    tl.store(ptr1, o1.to(base.dtype.element_ty), mask=mask)
    tl.store(ptr1 + HALF, o2.to(base.dtype.element_ty), mask=mask)


@triton.jit
def _rope_inplace_kernel(
    # pointers
    pos_ptr,
    q_ptr,
    k_ptr,
    cache_ptr,
    # sizes
    H,
    HKV,
    # strides (elements; the last dims are contiguous)
    stride_qt,
    stride_qh,
    stride_kt,
    stride_kh,
    stride_cache,
    # meta
    HALF: tl.constexpr,
    BLOCK_HALF: tl.constexpr,
    BLOCK_H: tl.constexpr,
):
    t = tl.program_id(0).to(tl.int64)
    tile = tl.program_id(1)
    q_tiles = tl.cdiv(H, BLOCK_H)

    # cos / sin of this token's position: loaded once, shared by the BLOCK_H heads of the tile
    d = tl.arange(0, BLOCK_HALF)
    dmask = d < HALF
    pos = tl.load(pos_ptr + t).to(tl.int64)
    cos = tl.load(cache_ptr + pos * stride_cache + d, mask=dmask, other=0.0).to(tl.float32)
    sin = tl.load(cache_ptr + pos * stride_cache + HALF + d, mask=dmask, other=0.0).to(tl.float32)

    offs_h = tl.arange(0, BLOCK_H)
    if tile < q_tiles:  # uniform per program: the first tiles are q's, the rest k's
        _rotate_heads(q_ptr + t * stride_qt, stride_qh, tile * BLOCK_H + offs_h, H,
                      cos, sin, d, dmask, HALF)  # fmt: skip
    else:
        _rotate_heads(k_ptr + t * stride_kt, stride_kh, (tile - q_tiles) * BLOCK_H + offs_h, HKV,
                      cos, sin, d, dmask, HALF)  # fmt: skip


def rope_position_ids_inplace_qk(
    positions: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    *,
    block_h: int = 4,
    num_warps: int = 4,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate q and k in place (neox) by cos_sin_cache[positions]; return the same tensors.

    Args:
        positions: (T,) int32/int64 positions, each in [0, P).
        q: (T, H, D) bf16/fp16/fp32; any token/head strides, last dim contiguous.
        k: (T, HKV, D), same dtype and D as q, same stride rules.
        cos_sin_cache: (P, R) float, cos in [:, :R/2] and sin in [:, R/2:], R even, R <= D.
        block_h: Heads per program (power of two).
        num_warps: Warps per program.

    Returns:
        (q, k): the input tensors, rotated in place.

    Raises:
        ValueError: Shapes, dtypes or strides do not fit (the message names the tensor).
    """
    if q.dim() != 3 or k.dim() != 3 or q.shape[0] != k.shape[0] or q.shape[2] != k.shape[2]:
        raise ValueError(
            f"q (T, H, D) and k (T, HKV, D) must agree in T and D; got {tuple(q.shape)}, "
            f"{tuple(k.shape)}"
        )
    if q.dtype != k.dtype or not q.is_floating_point():
        raise ValueError(f"q and k must share a float dtype; got {q.dtype}, {k.dtype}")
    if q.stride(-1) != 1 or k.stride(-1) != 1:
        raise ValueError("q and k need a contiguous last dim (they are rotated in place)")
    t, h, d = q.shape
    if positions.shape != (t,) or positions.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"positions must be ({t},) int32/int64; got {positions.dtype} "
                         f"{tuple(positions.shape)}")  # fmt: skip
    rot = cos_sin_cache.shape[-1] if cos_sin_cache.dim() == 2 else -1
    if rot <= 0 or rot % 2 or rot > d:
        raise ValueError(f"cos_sin_cache must be (P, R) with R even and <= D = {d}; got "
                         f"{tuple(cos_sin_cache.shape)}")  # fmt: skip
    if block_h <= 0 or block_h & (block_h - 1):
        raise ValueError(f"block_h {block_h} must be a power of two")
    if t == 0:
        return q, k
    cache = cos_sin_cache.contiguous()
    grid = (t, triton.cdiv(h, block_h) + triton.cdiv(k.shape[1], block_h))
    _rope_inplace_kernel[grid](
        positions.contiguous(), q, k, cache,
        h, k.shape[1],
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), cache.stride(0),
        HALF=rot // 2, BLOCK_HALF=triton.next_power_of_2(rot // 2), BLOCK_H=block_h,
        num_warps=num_warps,
    )  # fmt: skip
    return q, k


def reference(
    positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, cos_sin_cache: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate q and k in place, as the kernel does (fp32 math, cast back); return them."""
    half = cos_sin_cache.shape[-1] // 2
    cs = cos_sin_cache[positions.long()].float()[:, None, :]  # (T, 1, R)
    cos, sin = cs[..., :half], cs[..., half:]

    def rotate(x: torch.Tensor) -> torch.Tensor:
        xf = x.float().clone()
        x1, x2 = xf[..., :half].clone(), xf[..., half : 2 * half].clone()
        xf[..., :half] = x1 * cos - x2 * sin
        xf[..., half : 2 * half] = x2 * cos + x1 * sin
        return xf.to(x.dtype)

    q.copy_(rotate(q))
    k.copy_(rotate(k))
    return q, k


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return kwargs for ``shape = {"tokens", "heads", "kv_heads", "head_dim", "rot_dim"}``.

    q and k are strided slices of one packed (T, (H + 2 * HKV) * D) qkv buffer, as in vLLM; the
    cache covers 256 positions (base 10000, fp32).
    """
    t, h, hkv, d = shape["tokens"], shape["heads"], shape["kv_heads"], shape["head_dim"]
    rot = shape.get("rot_dim", d)
    qkv = torch.randn(t, (h + 2 * hkv) * d, device=device).to(dtype)
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, rot, 2, device=device).float() / rot))
    angles = torch.arange(256, device=device).float()[:, None] * inv_freq
    return {
        "positions": torch.randint(0, 256, (t,), device=device),
        "q": qkv[:, : h * d].view(t, h, d),
        "k": qkv[:, h * d : (h + hkv) * d].view(t, hkv, d),
        "cos_sin_cache": torch.cat([angles.cos(), angles.sin()], dim=-1),
    }
