"""
---
id: mrope_token_head_grid
title: Multimodal sectioned RoPE on flattened q and k over a (token, head tile) grid
op_family: rope
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [mrope, sectioned-cos-sin, head-tile, token-head-grid, neox-rope, partial-rotary,
  flattened-heads, fp32-accumulate]
status: reference
launcher: mrope_token_head_grid
tuning:
  block_h: [4, 1, 2, 8, 16]
  num_warps: [4, 1, 2, 8]
args:
  q: {shape: [T, CQ], dtypes: [bf16, fp16, fp32], aliases: [query]}
  k: {shape: [T, CK], like: q, aliases: [key]}
  cos: {shape: [3, T, R2], dtypes: [float]}
  sin: {shape: [3, T, R2], dtypes: [float]}
  head_size: {type: int, aliases: [head_dim]}
  section_t: {type: int, default: 0, aliases: [mrope_section_t, 'mrope_section[0]']}
  section_h: {type: int, default: 0, aliases: [mrope_section_h, 'mrope_section[1]']}
  section_w: {type: int, default: 0, aliases: [mrope_section_w, 'mrope_section[2]']}
returns:
  - {name: q, shape: [T, CQ], dtype: q}
  - {name: k, shape: [T, CK], dtype: q}
problem:
  shapes: [{tokens: 1, q_heads: 4, kv_heads: 1, head_size: 64, rotary_dim: 64}]
  dtypes: [fp32, bf16]
measured: []
---
atrex30's mrope (Qwen2-VL multimodal RoPE, neox style, non-interleaved sections) on q (T, HQ * D)
and k (T, HK * D) as the problem passes them, flattened. Frequency slot j of the R / 2 slots takes
its cos/sin from position channel 0 (temporal) for j < s_t, 1 (height) for j < s_t + s_h, else 2
(width); each head's first R dims rotate ([x1 | x2] -> [x1 cos - x2 sin | x2 cos + x1 sin]) in
fp32 and dims past R are copied. Program (t, g) owns token t and a tile of BLOCK_H heads of the
concatenated [q heads | k heads] list (a head's tensor comes from its index, so q and k share one
launch and one grid): it gathers the token's R / 2 cos and sin values with a per-slot channel index
(R / 2 of the 3 * R / 2 table values) and rotates a (BLOCK_H, R / 2) half-tile pair plus the
(BLOCK_H, D - R) pass-through. The grid has T * (HQ + HK) / BLOCK_H programs, so unlike one
program per token (mrope_sectioned) it fills the GPU at decode (T = 1) and small T, at the cost of
re-reading the token's cos/sin once per head tile (R * 4 B, from L2). Bytes: q and k read and
written once (4 B per element in bf16). Sections are three int scalars (problems keep the list in
an init argument the adapter cannot pass); all three 0 means Qwen2-VL's proportions (1/4, 3/8, 3/8
of R / 2). Limits: neox style, non-interleaved sections only; R even and at most D.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _mrope_head_grid_kernel(
    q_ptr, k_ptr, cos_ptr, sin_ptr, qo_ptr, ko_ptr,
    HQ, HK, D, R2, S_T, S_TH,
    stride_qt, stride_kt, stride_cc, stride_ct, stride_sc, stride_st,
    BLOCK_H: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_P: tl.constexpr,
):  # fmt: skip
    token = tl.program_id(0).to(tl.int64)
    h = (tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H))[:, None]
    j = tl.arange(0, BLOCK_R)[None, :]
    mj = j < R2
    chan = (j >= S_T).to(tl.int64) + (j >= S_TH).to(tl.int64)  # 0, 1 or 2 per frequency slot
    c = tl.load(cos_ptr + chan * stride_cc + token * stride_ct + j, mask=mj, other=1.0)
    s = tl.load(sin_ptr + chan * stride_sc + token * stride_st + j, mask=mj, other=0.0)
    c, s = c.to(tl.float32), s.to(tl.float32)

    is_q = h < HQ
    is_k = (h >= HQ) & (h < HQ + HK)
    hk = tl.where(is_q, 0, h - HQ)  # the head's index inside k
    hq = tl.where(is_q, h, 0)
    p = 2 * R2 + tl.arange(0, BLOCK_P)[None, :]
    ty = qo_ptr.dtype.element_ty
    for which in tl.static_range(2):  # 0: the tile's q heads, 1: its k heads
        if which == 0:
            live = is_q
            off = token * stride_qt + hq * D
            src, dst = q_ptr + off, qo_ptr + token * HQ * D + hq * D
        else:
            live = is_k
            off = token * stride_kt + hk * D
            src, dst = k_ptr + off, ko_ptr + token * HK * D + hk * D
        m = live & mj
        x1 = tl.load(src + j, mask=m, other=0.0).to(tl.float32)
        x2 = tl.load(src + R2 + j, mask=m, other=0.0).to(tl.float32)
        tl.store(dst + j, (x1 * c - x2 * s).to(ty), mask=m)
        tl.store(dst + R2 + j, (x2 * c + x1 * s).to(ty), mask=m)
        mp = live & (p < D)
        tl.store(dst + p, tl.load(src + p, mask=mp, other=0.0).to(ty), mask=mp)


def _sections(section_t: int, section_h: int, section_w: int, half: int) -> tuple[int, int]:
    """Return (s_t, s_t + s_h); all three 0 picks Qwen2-VL's proportions of ``half`` slots."""
    if section_t == section_h == section_w == 0:
        if half % 8:
            raise ValueError(f"give the sections: rotary_dim / 2 = {half} is not a multiple of 8")
        return half // 4, half // 4 + 3 * half // 8
    if min(section_t, section_h, section_w) < 0 or section_t + section_h + section_w != half:
        raise ValueError(
            f"sections ({section_t}, {section_h}, {section_w}) must be >= 0 and sum to "
            f"rotary_dim / 2 = {half}"
        )
    return section_t, section_t + section_h


def mrope_token_head_grid(
    q: torch.Tensor,
    k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    head_size: int,
    section_t: int = 0,
    section_h: int = 0,
    section_w: int = 0,
    *,
    block_h: int = 4,
    num_warps: int = 4,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate flattened q and k with the sectioned multimodal cos/sin tables.

    Args:
        q: (T, HQ * D) bf16/fp16/fp32, last dim contiguous.
        k: (T, HK * D), q's dtype.
        cos: (3, T, R / 2) float cosines per position channel (t, h, w); R <= D.
        sin: (3, T, R / 2) float sines.
        head_size: D.
        section_t: Frequency slots taken from the temporal channel.
        section_h: Slots from the height channel.
        section_w: Slots from the width channel (the three sum to R / 2; all 0 = Qwen2-VL's).
        block_h: Heads per program (power of two).
        num_warps: Warps per program.

    Returns:
        (q_out, k_out): new contiguous tensors of q's and k's shapes, in q's dtype.

    Raises:
        ValueError: The shapes, strides, sections or block_h do not fit.
    """
    if q.dim() != 2 or k.dim() != 2 or k.shape[0] != q.shape[0]:
        raise ValueError(
            f"need q (T, HQ*D) and k (T, HK*D); got {tuple(q.shape)}, {tuple(k.shape)}"
        )
    t, d = q.shape[0], head_size
    if d <= 0 or q.shape[1] % d or k.shape[1] % d:
        raise ValueError(f"head_size {d} must divide q's and k's widths {q.shape[1]}, {k.shape[1]}")
    if cos.dim() != 3 or cos.shape[:2] != (3, t) or tuple(sin.shape) != tuple(cos.shape):
        raise ValueError(
            f"need cos and sin (3, {t}, R / 2); got {tuple(cos.shape)}, {tuple(sin.shape)}"
        )
    half = cos.shape[2]
    if 2 * half > d:
        raise ValueError(f"rotary_dim {2 * half} (from cos) exceeds head_size {d}")
    if q.stride(1) != 1 or k.stride(1) != 1 or cos.stride(2) != 1 or sin.stride(2) != 1:
        raise ValueError("q, k, cos and sin need a contiguous last dim")
    if block_h < 1 or block_h & (block_h - 1):
        raise ValueError(f"block_h must be a power of two; got {block_h}")
    s_t, s_th = _sections(section_t, section_h, section_w, half)
    q_out, k_out = torch.empty_like(q), torch.empty(k.shape, dtype=q.dtype, device=k.device)
    if t == 0:
        return q_out, k_out
    hq, hk = q.shape[1] // d, k.shape[1] // d
    rest = d - 2 * half
    _mrope_head_grid_kernel[(t, triton.cdiv(hq + hk, block_h))](
        q, k, cos, sin, q_out, k_out,
        hq, hk, d, half, s_t, s_th,
        q.stride(0), k.stride(0), cos.stride(0), cos.stride(1), sin.stride(0), sin.stride(1),
        BLOCK_H=block_h, BLOCK_R=triton.next_power_of_2(half),
        BLOCK_P=triton.next_power_of_2(rest) if rest else 1, num_warps=num_warps,
    )  # fmt: skip
    return q_out, k_out


def reference(
    q: torch.Tensor,
    k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    head_size: int,
    section_t: int = 0,
    section_h: int = 0,
    section_w: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return atrex30 mrope's rotation of q and k in fp32 PyTorch, cast to q's dtype."""
    half = cos.shape[2]
    s_t, s_th = _sections(section_t, section_h, section_w, half)
    sections = [s_t, s_th - s_t, half - s_th]
    cos_t = torch.cat([c[i] for i, c in enumerate(cos.float().split(sections, -1))], -1)[:, None]
    sin_t = torch.cat([s[i] for i, s in enumerate(sin.float().split(sections, -1))], -1)[:, None]

    def rotate(x: torch.Tensor) -> torch.Tensor:
        h = x.float().view(x.shape[0], -1, head_size)
        x1, x2, rest = h[..., :half], h[..., half : 2 * half], h[..., 2 * half :]
        out = torch.cat([x1 * cos_t - x2 * sin_t, x2 * cos_t + x1 * sin_t, rest], dim=-1)
        return out.view(x.shape).to(q.dtype)

    return rotate(q), rotate(k)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return inputs for ``{"tokens", "q_heads", "kv_heads", "head_size", "rotary_dim"}``.

    Optional ``"sections"`` (three ints; default Qwen2-VL's); q, k ~ N(0, 1), flattened; cos/sin of
    N(0, 0.1^2) angles per channel (atrex30's draw).
    """
    t, d, r = shape["tokens"], shape["head_size"], shape["rotary_dim"]
    angles = 0.1 * torch.randn(3, t, r // 2, device=device)
    s_t, s_h, s_w = shape.get("sections", (0, 0, 0))
    return {
        "q": torch.randn(t, shape["q_heads"] * d, device=device).to(dtype),
        "k": torch.randn(t, shape["kv_heads"] * d, device=device).to(dtype),
        "cos": angles.cos(),
        "sin": angles.sin(),
        "head_size": d,
        "section_t": s_t,
        "section_h": s_h,
        "section_w": s_w,
    }
