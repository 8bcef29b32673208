"""
---
id: fused_qkv_rope_on_the_fly
title: Split fused QKV (+ bias) and neox-rotate rope_dim dims on a flat grid, angles per element
op_family: rope
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [fused-split, neox-rope, partial-rotary, flat-elementwise-grid, in-kernel-cos-sin,
  rotate-half-gather, bias-fused, fp32-accumulate]
status: reference
launcher: fused_qkv_rope_on_the_fly
tuning:
  block: [1024, 256, 4096]
  num_warps: [4, 1, 2, 8]
args:
  qkv: {shape: [T, C], dtypes: [bf16, fp16, fp32], aliases: [qkv_proj, hidden_states]}
  positions: {shape: [T], dtypes: [int32, int64], aliases: [position_ids, pos]}
  num_heads: {type: int, aliases: [n_heads, num_attention_heads, num_q_heads]}
  num_kv_heads: {type: int, aliases: [n_kv_heads, num_key_value_heads]}
  head_dim: {type: int, aliases: [head_size]}
  rope_dim: {type: int, default: 0, aliases: [rotary_dim, rot_dim]}
  qkv_bias: {shape: [C], like: qkv, optional: true, aliases: [bias]}
  base: {type: float, default: 10000.0, aliases: [rope_theta, theta, rope_base]}
returns:
  - {name: q, shape: [T, num_heads, head_dim], dtype: qkv}
  - {name: k, shape: [T, num_kv_heads, head_dim], dtype: qkv}
  - {name: v, shape: [T, num_kv_heads, head_dim], dtype: qkv}
problem:
  shapes: [{tokens: 1, heads: 4, kv_heads: 2, head_dim: 64}, {tokens: 19, heads: 3, kv_heads: 1, head_dim: 40, rope_dim: 24, bias: true}]
  dtypes: [fp32, bf16]
measured:
  - {device: NVIDIA H200, shape: fused_qkv_rope/0, dtype: bf16, latency_us: 7.36, sol_fraction: 0.4043, date: '2026-12-03'}
---
atrex30's fused_qkv_rope (bias add, split into q/k/v, neox rotation of the first R = rope_dim dims
of every q and k head, v and dims past R copied) as a pure elementwise kernel. The packed (T, C)
input is one flat index space; each program owns BLOCK consecutive elements (spanning token and
head boundaries freely) and, per element, derives (token, head, column) by integer division, loads
the element and its rotation partner (column j +- R / 2, same cache line in practice), computes its
own angle pos * base^(-2 (j mod R / 2) / R) on the fly (exp2, sin, cos in fp32: no table, no
cross-element sharing) and stores into q, k or v by masked stores. Every access is a contiguous
1-D run, the grid is T * C / BLOCK programs whatever T and the head counts are, and no tile shape
depends on D or the head count, so odd shapes (D = 80, 96; many heads; T = 1) cost nothing extra.
The price is 3 transcendentals and ~6 integer ops per element instead of per (token, slot): on
H100-class parts that stays under the memory time for bf16 (4 B per element moved, ~20 ops), but
it is the first thing to drop if the kernel turns out compute-bound (see fused_qkv_rope_head_grid,
which shares one cos/sin tile across heads). Limits: neox style only; rope_dim even and at most D
(0 means D); in-kernel frequencies within ~1 ulp of the reference's pow.
"""

import math

import torch
import triton
import triton.language as tl


@triton.jit
def _qkv_rope_flat_kernel(
    qkv_ptr, bias_ptr, pos_ptr, q_ptr, k_ptr, v_ptr,
    N, C, H, HKV, D, R2, stride_t, log2_base,
    HAS_BIAS: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    idx = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)  # flat index in (T, C)
    live = idx < N
    token = idx // C
    c = idx % C  # column inside the packed row
    h = c // D
    j = c % D
    rot = (j < 2 * R2) & (h < H + HKV)  # rotated elements: first R dims of q and k heads
    first = j < R2
    partner = tl.where(first, c + R2, c - R2)
    row = qkv_ptr + token * stride_t
    x = tl.load(row + c, mask=live, other=0.0).to(tl.float32)
    y = tl.load(row + partner, mask=live & rot, other=0.0).to(tl.float32)
    if HAS_BIAS:
        x += tl.load(bias_ptr + c, mask=live, other=0.0).to(tl.float32)
        y += tl.load(bias_ptr + partner, mask=live & rot, other=0.0).to(tl.float32)

    # this element's angle, computed on the fly
    slot = tl.where(first, j, j - R2).to(tl.float32)
    pos = tl.load(pos_ptr + token, mask=live, other=0).to(tl.float32)
    angle = pos / tl.exp2(log2_base * (slot / R2))
    sin = tl.sin(angle)
    out = tl.where(rot, x * tl.cos(angle) + y * tl.where(first, -sin, sin), x)

    out = out.to(q_ptr.dtype.element_ty)
    tl.store(q_ptr + token * (H * D) + c, out, mask=live & (h < H))
    in_k = (h >= H) & (h < H + HKV)
    tl.store(k_ptr + token * (HKV * D) + c - H * D, out, mask=live & in_k)
    tl.store(v_ptr + token * (HKV * D) + c - (H + HKV) * D, out, mask=live & (h >= H + HKV))


def fused_qkv_rope_on_the_fly(
    qkv: torch.Tensor,
    positions: torch.Tensor,
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    rope_dim: int = 0,
    qkv_bias: torch.Tensor | None = None,
    base: float = 10000.0,
    *,
    block: int = 1024,
    num_warps: int = 4,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Add the bias, split qkv into q, k, v and neox-rotate the first rope_dim dims of q and k.

    Args:
        qkv: (T, (H + 2 * Hkv) * D) bf16/fp16/fp32, last dimension contiguous.
        positions: (T,) int32/int64 token positions.
        num_heads: H, query heads.
        num_kv_heads: Hkv, key/value heads.
        head_dim: D.
        rope_dim: R, even, at most D: dims rotated per head; 0 means D.
        qkv_bias: Optional (C,) bias added before the split (qkv's dtype).
        base: RoPE frequency base.
        block: Elements per program (power of two).
        num_warps: Warps per program.

    Returns:
        (q, k, v): (T, H, D), (T, Hkv, D), (T, Hkv, D) in qkv's dtype, contiguous.

    Raises:
        ValueError: The shapes, rope_dim, bias or block do not fit.
    """
    rope_dim = rope_dim or head_dim
    heads = num_heads + 2 * num_kv_heads
    width = heads * head_dim
    if qkv.dim() != 2 or qkv.shape[1] != width:
        raise ValueError(f"qkv must be (T, {width}) for these heads; got {tuple(qkv.shape)}")
    if rope_dim % 2 or not 0 < rope_dim <= head_dim:
        raise ValueError(f"rope_dim must be even and in (0, head_dim={head_dim}]; got {rope_dim}")
    t = qkv.shape[0]
    if positions.shape != (t,) or positions.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"positions must be int32/int64 ({t},); got {tuple(positions.shape)}")
    if qkv_bias is not None and qkv_bias.shape != (width,):
        raise ValueError(f"qkv_bias must be ({width},); got {tuple(qkv_bias.shape)}")
    if block < 1 or block & (block - 1):
        raise ValueError(f"block must be a power of two; got {block}")
    if qkv.stride(1) != 1:
        qkv = qkv.contiguous()
    q = torch.empty((t, num_heads, head_dim), dtype=qkv.dtype, device=qkv.device)
    k = torch.empty((t, num_kv_heads, head_dim), dtype=qkv.dtype, device=qkv.device)
    v = torch.empty_like(k)
    if t == 0:
        return q, k, v
    bias = qkv_bias.contiguous() if qkv_bias is not None else qkv
    _qkv_rope_flat_kernel[(triton.cdiv(t * width, block),)](
        qkv, bias, positions, q, k, v,
        t * width, width, num_heads, num_kv_heads, head_dim, rope_dim // 2, qkv.stride(0),
        math.log2(base),
        HAS_BIAS=qkv_bias is not None, BLOCK=block, num_warps=num_warps,
    )  # fmt: skip
    return q, k, v


def reference(
    qkv: torch.Tensor,
    positions: torch.Tensor,
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    rope_dim: int = 0,
    qkv_bias: torch.Tensor | None = None,
    base: float = 10000.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Return (q, k, v) as atrex30's fused_qkv_rope computes them (fp32, cast to qkv's dtype)."""
    rope_dim = rope_dim or head_dim
    x = qkv.float() if qkv_bias is None else qkv.float() + qkv_bias.float()
    x = x.view(qkv.shape[0], num_heads + 2 * num_kv_heads, head_dim)
    q, k, v = x.split([num_heads, num_kv_heads, num_kv_heads], dim=1)
    exponent = torch.arange(0, rope_dim, 2, device=qkv.device, dtype=torch.float32)
    angles = positions.float()[:, None, None] * (1.0 / (base ** (exponent / rope_dim)))
    cos, sin = angles.cos(), angles.sin()
    half = rope_dim // 2

    def rotate(y: torch.Tensor) -> torch.Tensor:
        y1, y2, rest = y[..., :half], y[..., half:rope_dim], y[..., rope_dim:]
        return torch.cat([y1 * cos - y2 * sin, y2 * cos + y1 * sin, rest], dim=-1)

    return tuple(y.to(qkv.dtype).contiguous() for y in (rotate(q), rotate(k), v))


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return launcher kwargs for ``{"tokens", "heads", "kv_heads", "head_dim"}``.

    Optional ``"rope_dim"`` (default head_dim) and ``"bias": True``; qkv ~ N(0, 1); positions are
    start + arange(T) with start in [0, 1024) (atrex30's draw), int32.
    """
    t, h, hkv, d = shape["tokens"], shape["heads"], shape["kv_heads"], shape["head_dim"]
    width = (h + 2 * hkv) * d
    start = int(torch.randint(0, 1024, ()))
    bias = torch.randn(width, device=device).to(dtype) if shape.get("bias") else None
    return {
        "qkv": torch.randn(t, width, device=device).to(dtype),
        "positions": torch.arange(start, start + t, dtype=torch.int32, device=device),
        "num_heads": h,
        "num_kv_heads": hkv,
        "head_dim": d,
        "rope_dim": shape.get("rope_dim", d),
        "qkv_bias": bias,
    }
