"""
---
id: mrope_sectioned
title: Multimodal RoPE (t/h/w sections) on q and k, one program per token covering all its heads
op_family: rope
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques:
  [mrope, sectioned-cos-sin, token-per-program, neox-rope, partial-rotary, fp32-accumulate]
status: reference
launcher: mrope_sectioned
tuning:
  num_warps: [4, 1, 2, 8]
args:
  q: {shape: [T, HQ, D], dtypes: [bf16, fp16, fp32], flattened: true, aliases: [query]}
  k: {shape: [T, HK, D], like: q, flattened: true, aliases: [key]}
  cos: {shape: [3, T, R2], dtypes: [float]}
  sin: {shape: [3, T, R2], dtypes: [float]}
  mrope_section: {type: ['list[int]', str], default: '', aliases: [sections]}
returns:
  - {name: q, shape: [T, HQ, D], dtype: q}
  - {name: k, shape: [T, HK, D], dtype: q}
dims:
  D: [head_size, head_dim]
  HQ: [num_query_heads, num_heads, num_q_heads]
  HK: [num_kv_heads, n_kv_heads]
problem:
  shapes: [{tokens: 7, q_heads: 4, kv_heads: 1, head_size: 64, rotary_dim: 64}, {tokens: 5, q_heads: 3, kv_heads: 3, head_size: 80, rotary_dim: 64, sections: [16, 8, 8]}]
  dtypes: [fp32, bf16]
  atol: 0.02
  rtol: 0.02
measured: []
---
Multimodal rotary embedding of Qwen2-VL style models (atrex30's mrope, neox style, sections not
interleaved): cos and sin come as (3, T, R / 2) tables, one row per position channel (temporal,
height, width); frequency slot j of the R / 2 slots takes channel 0 for its first s_t slots, channel
1 for the next s_h, channel 2 for the last s_w. Each head's first R dims rotate neox-style ([x1 |
x2] -> [x1 cos - x2 sin | x2 cos + x1 sin]) in fp32; dims past R are copied. One program per token:
it gathers its (R / 2) cos and sin values once (a per-slot channel index selects the table row, so
only R / 2 of the 3 * R / 2 values per table are read), then rotates all of the token's q heads and
k heads as two (next_pow2(heads), R / 2) half-tiles each, so the selection is paid once per token
rather than once per head. Bytes: every q/k element read and written once (2 + 2 B in bf16), plus R
/ 2 * 8 B of cos/sin per token. The sections are a "t,h,w" string or a sequence of three ints; the
empty default takes Qwen2-VL's proportions (1/4, 3/8, 3/8 of R / 2, i.e. 16, 24, 24 for R = 128).
Limits: neox style and non-interleaved sections only; the heads of a token must fit in registers (HQ
* D up to ~16K); R must be even and at most D.
"""

from collections.abc import Sequence

import torch
import triton
import triton.language as tl


@triton.jit
def _rotate_heads(
    src_ptr, dst_ptr, token, stride_t, stride_h, heads, D, c, s,
    R2: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_P: tl.constexpr,
):  # fmt: skip
    """Rotate the first 2 * R2 dims of every head of one token; copy the rest."""
    h = tl.arange(0, BLOCK_H)[:, None]
    j = tl.arange(0, BLOCK_R)[None, :]
    m = (h < heads) & (j < R2)
    base = token * stride_t + h * stride_h
    x1 = tl.load(src_ptr + base + j, mask=m, other=0.0).to(tl.float32)
    x2 = tl.load(src_ptr + base + R2 + j, mask=m, other=0.0).to(tl.float32)
    ty = dst_ptr.dtype.element_ty
    tl.store(dst_ptr + base + j, (x1 * c - x2 * s).to(ty), mask=m)
    tl.store(dst_ptr + base + R2 + j, (x2 * c + x1 * s).to(ty), mask=m)
    if BLOCK_P > 0:  # pass-through dims [2 * R2, D)
        p = 2 * R2 + tl.arange(0, BLOCK_P)[None, :]
        mp = (h < heads) & (p < D)
        tl.store(dst_ptr + base + p, tl.load(src_ptr + base + p, mask=mp), mask=mp)


@triton.jit
def _mrope_kernel(
    # pointers
    q_ptr,
    k_ptr,
    cos_ptr,
    sin_ptr,
    qo_ptr,
    ko_ptr,
    # sizes
    HQ,
    HK,
    D,
    S_T,
    S_TH,  # s_t + s_h
    # strides (elements; the head dim is contiguous everywhere)
    stride_qt,
    stride_qh,
    stride_kt,
    stride_kh,
    stride_cc,
    stride_ct,
    stride_sc,
    stride_st,
    # meta
    R2: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_HQ: tl.constexpr,
    BLOCK_HK: tl.constexpr,
    BLOCK_P: tl.constexpr,
):
    token = tl.program_id(0).to(tl.int64)
    j = tl.arange(0, BLOCK_R)
    chan = (j >= S_T).to(tl.int64) + (j >= S_TH).to(tl.int64)  # 0, 1 or 2 per frequency slot
    mj = j < R2
    c = tl.load(cos_ptr + chan * stride_cc + token * stride_ct + j, mask=mj, other=1.0)
    s = tl.load(sin_ptr + chan * stride_sc + token * stride_st + j, mask=mj, other=0.0)
    c, s = c.to(tl.float32)[None, :], s.to(tl.float32)[None, :]
    _rotate_heads(q_ptr, qo_ptr, token, stride_qt, stride_qh, HQ, D, c, s,
                  R2, BLOCK_HQ, BLOCK_R, BLOCK_P)  # fmt: skip
    _rotate_heads(k_ptr, ko_ptr, token, stride_kt, stride_kh, HK, D, c, s,
                  R2, BLOCK_HK, BLOCK_R, BLOCK_P)  # fmt: skip


def _sections(mrope_section: str | Sequence[int], half: int) -> tuple[int, int, int]:
    """Return (s_t, s_h, s_w) from "t,h,w", a sequence, or '' (Qwen2-VL proportions)."""
    if isinstance(mrope_section, str):
        if not mrope_section.strip():
            if half % 8:
                raise ValueError(
                    f"give mrope_section: rotary_dim / 2 = {half} is not a multiple of 8"
                )
            return half // 4, 3 * half // 8, 3 * half // 8
        mrope_section = [int(p) for p in mrope_section.split(",")]
    parts = tuple(int(p) for p in mrope_section)
    if len(parts) != 3 or min(parts) < 0 or sum(parts) != half:
        raise ValueError(
            f"mrope_section {mrope_section} must be 3 sizes summing to rotary_dim / 2 = {half}"
        )
    return parts[0], parts[1], parts[2]


def mrope_sectioned(
    q: torch.Tensor,
    k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    mrope_section: str | Sequence[int] = "",
    *,
    num_warps: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate q and k with the sectioned multimodal cos/sin tables.

    Args:
        q: (T, HQ, D) bf16/fp16/fp32 with a contiguous last dim.
        k: (T, HK, D), same dtype and D as q.
        cos: (3, T, R / 2) float cosines per position channel (t, h, w); R = rotary_dim <= D.
        sin: (3, T, R / 2) float sines, same shape.
        mrope_section: (s_t, s_h, s_w) summing to R / 2, as a sequence or a "t,h,w" string; ''
            picks Qwen2-VL's proportions.
        num_warps: Warps per program; None = 4.

    Returns:
        (q_out, k_out): new contiguous tensors of q's and k's shapes, in q's dtype.

    Raises:
        ValueError: The shapes, strides or sections do not fit.
    """
    if q.dim() != 3 or k.dim() != 3 or k.shape[0] != q.shape[0] or k.shape[2] != q.shape[2]:
        raise ValueError(
            f"need q (T, HQ, D) and k (T, HK, D); got {tuple(q.shape)}, {tuple(k.shape)}"
        )
    t, hq, d = q.shape
    if cos.dim() != 3 or cos.shape[:2] != (3, t) or tuple(sin.shape) != tuple(cos.shape):
        raise ValueError(
            f"need cos and sin (3, {t}, R / 2); got {tuple(cos.shape)}, {tuple(sin.shape)}"
        )
    half = cos.shape[2]
    if 2 * half > d:
        raise ValueError(f"rotary_dim {2 * half} (from cos) exceeds head size {d}")
    if q.stride(2) != 1 or k.stride(2) != 1 or cos.stride(2) != 1 or sin.stride(2) != 1:
        raise ValueError("q, k, cos and sin need a contiguous last dim")
    s_t, s_h, _ = _sections(mrope_section, half)
    q_out, k_out = torch.empty_like(q), torch.empty(k.shape, dtype=q.dtype, device=k.device)
    if t == 0:
        return q_out, k_out
    rest = d - 2 * half
    _mrope_kernel[(t,)](
        q, k, cos, sin, q_out, k_out,
        hq, k.shape[1], d, s_t, s_t + s_h,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1),
        cos.stride(0), cos.stride(1), sin.stride(0), sin.stride(1),
        R2=half, BLOCK_R=triton.next_power_of_2(half),
        BLOCK_HQ=triton.next_power_of_2(hq), BLOCK_HK=triton.next_power_of_2(k.shape[1]),
        BLOCK_P=triton.next_power_of_2(rest) if rest else 0, num_warps=num_warps or 4,
    )  # fmt: skip
    return q_out, k_out


def reference(
    q: torch.Tensor,
    k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    mrope_section: str | Sequence[int] = "",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return the sectioned neox rotation of q and k in fp32 PyTorch, cast to q's dtype."""
    half = cos.shape[2]
    sections = list(_sections(mrope_section, half))
    cos_t = torch.cat([c[i] for i, c in enumerate(cos.float().split(sections, -1))], -1)[:, None]
    sin_t = torch.cat([s[i] for i, s in enumerate(sin.float().split(sections, -1))], -1)[:, None]

    def rotate(x: torch.Tensor) -> torch.Tensor:
        x = x.float()
        x1, x2, rest = x[..., :half], x[..., half : 2 * half], x[..., 2 * half :]
        out = torch.cat([x1 * cos_t - x2 * sin_t, x2 * cos_t + x1 * sin_t, rest], dim=-1)
        return out.to(q.dtype)

    return rotate(q), rotate(k)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return inputs for ``{"tokens", "q_heads", "kv_heads", "head_size", "rotary_dim"}``.

    Optional ``"sections"``; q, k ~ N(0, 1); cos/sin of N(0, 0.1^2) angles per channel (as atrex30).
    """
    t, d, r = shape["tokens"], shape["head_size"], shape["rotary_dim"]
    angles = 0.1 * torch.randn(3, t, r // 2, device=device)
    return {
        "q": torch.randn(t, shape["q_heads"], d, device=device).to(dtype),
        "k": torch.randn(t, shape["kv_heads"], d, device=device).to(dtype),
        "cos": angles.cos(),
        "sin": angles.sin(),
        "mrope_section": shape.get("sections", ""),
    }
