"""
---
id: rope_partial_rotary_dim
title: In-place neox RoPE on the first rotary_dim dims of q and k heads, (token tile, head) grid
op_family: rope
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [in-place, partial-rotary, neox-rotation, in-kernel-cos-sin, token-tile-per-head,
  exp2, untouched-tail, fp32-accumulate]
status: reference
launcher: rope_partial_rotary_dim
tuning:
  block_t: [16, 1, 4, 8, 32, 64]
  num_warps: [4, 1, 2, 8]
args:
  positions: {shape: [T], dtypes: [int32, int64], aliases: [position_ids, pos]}
  q: {shape: [T, H, D], dtypes: [bf16, fp16, fp32], layout: any, flattened: true, aliases: [query]}
  k: {shape: [T, HKV, D], like: q, layout: any, flattened: true, aliases: [key]}
  rotary_dim: {type: int, aliases: [rope_dim, rot_dim]}
  base: {type: float, default: 10000.0, aliases: [rope_theta, theta, rope_base]}
returns:
  - {name: q, alias: q}
  - {name: k, alias: k}
dims:
  D: [head_dim, head_size]
  H: [num_heads, num_q_heads, n_heads]
  HKV: [num_kv_heads, n_kv_heads]
problem:
  shapes: [{tokens: 5, heads: 4, kv_heads: 2, head_dim: 64, rotary_dim: 16}, {tokens: 3, heads: 2, kv_heads: 1, head_dim: 80, rotary_dim: 80}]
  dtypes: [fp32, bf16]
  atol: 0.02
  rtol: 0.02
  in_place: [q, k]
measured: []
---
Partial-rotary neox RoPE (GPT-NeoX / Phi / StableLM / GLM apply it to only part of each head): for
token t at position p, the first R = rotary_dim dims of every q and k head, seen as halves x1 = x[:
R/2] and x2 = x[R/2: R], become (x1 cos - x2 sin, x2 cos + x1 sin) with angle p * base^(-2i / R);
dims R..D are neither loaded nor written. It works in place, so q and k may be strided views of a
fused qkv buffer (last dim contiguous). Design: the grid is (ceil(T / BLOCK_T), H + HKV); program
(i, h) takes one head (of q for h < H, else of k) for a tile of BLOCK_T tokens, computes the
(BLOCK_T, R/2) angles in fp32 from the positions and exp2(-2i / R * log2(base)) (no cos/sin cache
read, no table to keep in sync with rotary_dim), and rotates that head's two (BLOCK_T, R/2)
half-tiles. Tiling tokens rather than heads gives prefill many programs even for GQA models with few
kv heads, and keeps each program's loads R/2-wide rows of the same head. Bytes: 2 reads + 2 writes
per rotated element only (the tail costs nothing); FLOPs: one sin and one cos per (token, pair) per
head (recomputed for every head: the trade for no cache). Limits: neox layout only; angles are fp32,
so positions beyond ~1e5 lose ~1e-2 rad of accuracy at the low dims.
"""

import math

import torch
import triton
import triton.language as tl


@triton.jit
def _rope_partial_kernel(
    # pointers
    pos_ptr,
    q_ptr,
    k_ptr,
    # sizes
    T,
    H,
    # strides (elements; the last dims are contiguous)
    stride_qt,
    stride_qh,
    stride_kt,
    stride_kh,
    # scalars
    neg_log2_base_over_r,
    # meta
    HALF: tl.constexpr,
    BLOCK_HALF: tl.constexpr,
    BLOCK_T: tl.constexpr,
):
    tok = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    head = tl.program_id(1)
    i = tl.arange(0, BLOCK_HALF)
    mask = (tok < T)[:, None] & (i < HALF)[None, :]
    pos = tl.load(pos_ptr + tok, mask=tok < T, other=0).to(tl.float32)
    inv_freq = tl.exp2((2 * i).to(tl.float32) * neg_log2_base_over_r)  # base^(-2i / R)
    angle = pos[:, None] * inv_freq[None, :]
    cos = tl.cos(angle)
    sin = tl.sin(angle)
    tok64 = tok.to(tl.int64)  # int64: token * stride can pass 2^31 elements
    if head < H:
        ptr = q_ptr + tok64[:, None] * stride_qt + head * stride_qh + i[None, :]
    else:
        ptr = k_ptr + tok64[:, None] * stride_kt + (head - H) * stride_kh + i[None, :]
    x1 = tl.load(ptr, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(ptr + HALF, mask=mask, other=0.0).to(tl.float32)
    tl.store(ptr, (x1 * cos - x2 * sin).to(q_ptr.dtype.element_ty), mask=mask)
    tl.store(ptr + HALF, (x2 * cos + x1 * sin).to(q_ptr.dtype.element_ty), mask=mask)


def rope_partial_rotary_dim(
    positions: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    rotary_dim: int,
    base: float = 10000.0,
    *,
    block_t: int = 16,
    num_warps: int = 4,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate the first rotary_dim dims of every q and k head in place (neox halves).

    Args:
        positions: (T,) int32/int64 token positions.
        q: (T, H, D) bf16/fp16/fp32; any token/head strides, last dim contiguous.
        k: (T, HKV, D), same dtype and D as q, same stride rules.
        rotary_dim: Rotated dims per head R (even, <= D); dims R..D pass through.
        base: RoPE theta.
        block_t: Tokens per program (a power of two).
        num_warps: Warps per program.

    Returns:
        (q, k): the same tensors, rotated in place.

    Raises:
        ValueError: Shapes, dtypes, strides, rotary_dim or block_t do not fit.
    """
    if q.dim() != 3 or k.dim() != 3 or k.shape[0] != q.shape[0] or k.shape[2] != q.shape[2]:
        raise ValueError(f"q (T, H, D) and k (T, HKV, D) must share T and D; got {tuple(q.shape)}, "
                         f"{tuple(k.shape)}")  # fmt: skip
    if q.dtype != k.dtype or not q.is_floating_point():
        raise ValueError(f"q and k must share a float dtype; got {q.dtype}, {k.dtype}")
    if q.stride(-1) != 1 or k.stride(-1) != 1:
        raise ValueError("q and k need a contiguous last dim (they are rotated in place)")
    t, h, d = q.shape
    if positions.shape != (t,) or positions.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"positions must be ({t},) int32/int64; got {tuple(positions.shape)} "
                         f"{positions.dtype}")  # fmt: skip
    if rotary_dim < 2 or rotary_dim % 2 or rotary_dim > d:
        raise ValueError(f"rotary_dim {rotary_dim} must be even and in [2, head_dim {d}]")
    if block_t < 1 or block_t & (block_t - 1):
        raise ValueError(f"block_t {block_t} must be a power of two")
    if t == 0:
        return q, k
    half = rotary_dim // 2
    _rope_partial_kernel[(triton.cdiv(t, block_t), h + k.shape[1])](
        positions.contiguous(), q, k,
        t, h,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1),
        -math.log2(base) / rotary_dim,
        HALF=half, BLOCK_HALF=triton.next_power_of_2(half), BLOCK_T=block_t,
        num_warps=num_warps,
    )  # fmt: skip
    return q, k


def reference(
    positions: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    rotary_dim: int,
    base: float = 10000.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate q and k in place, as the kernel does (fp32 math, cast back); return them."""
    half = rotary_dim // 2
    inv_freq = base ** (-torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)
    angle = (positions.double()[:, None] * inv_freq.to(positions.device)).float()[:, None, :]
    cos, sin = angle.cos(), angle.sin()

    def rotate(x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        x1, x2, rest = xf[..., :half], xf[..., half:rotary_dim], xf[..., rotary_dim:]
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin, rest], dim=-1).to(x.dtype)

    q.copy_(rotate(q))
    k.copy_(rotate(k))
    return q, k


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return inputs for ``shape = {"tokens", "heads", "kv_heads", "head_dim", "rotary_dim"}``."""
    t, d = shape["tokens"], shape["head_dim"]
    return {
        "positions": torch.randint(0, 1000, (t,), device=device),
        "q": torch.randn(t, shape["heads"], d, device=device).to(dtype),
        "k": torch.randn(t, shape["kv_heads"], d, device=device).to(dtype),
        "rotary_dim": shape["rotary_dim"],
    }
