"""
---
id: mrope_token_tile_2d
title: Multimodal sectioned RoPE on flattened q and k, a tile of tokens per program looping heads
op_family: rope
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [mrope, sectioned-cos-sin, token-tile, head-loop, cos-sin-reuse-across-heads,
  neox-rope, partial-rotary, flattened-heads, fp32-accumulate]
status: reference
launcher: mrope_token_tile_2d
tuning:
  block_t: [16, 2, 4, 64]
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
atrex30's mrope (Qwen2-VL multimodal RoPE, neox style, non-interleaved t/h/w sections) on the
flattened q (T, HQ * D) and k (T, HK * D), for prefill. One program per tile of BLOCK_T tokens: it
gathers the tile's (BLOCK_T, R / 2) cos and sin once (a per-slot channel index: slot j < s_t reads
channel 0, j < s_t + s_h channel 1, else channel 2), then loops over the HQ q heads and the HK k
heads, each a 2-D (BLOCK_T, R / 2) half-tile pair rotated in fp32 ([x1 | x2] -> [x1 cos - x2 sin |
x2 cos + x1 sin]) plus a (BLOCK_T, D - R) pass-through tile. The sectioned table gather is paid
once per token for all heads (as in mrope_sectioned) while the register tile stays BLOCK_T * R / 2
wide whatever the head count (mrope_sectioned holds all of a token's heads at once, so its tile
grows with HQ * D); each head's loads are BLOCK_T strided rows of R / 2 contiguous elements.
Bytes: q and k read and written once (4 B per element in bf16) plus R * 4 B of cos/sin per token.
Wins for long prefill (T >> SM count * BLOCK_T); at decode only one program runs: use
mrope_token_head_grid there. Sections are three int scalars (problems keep the list in an init
argument the adapter cannot pass); all three 0 means Qwen2-VL's proportions (1/4, 3/8, 3/8 of R /
2). Limits: neox style, non-interleaved sections only; R even and at most D.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _mrope_rotate_tile(
    src_ptr, dst_ptr, tok, tmask, stride_src, stride_dst, head, D, R2, c, s,
    BLOCK_R: tl.constexpr, BLOCK_P: tl.constexpr,
):  # fmt: skip
    """Rotate one head's first 2 * R2 dims for a tile of tokens; copy the rest."""
    j = tl.arange(0, BLOCK_R)[None, :]
    p = 2 * R2 + tl.arange(0, BLOCK_P)[None, :]
    m = tmask & (j < R2)
    mp = tmask & (p < D)
    src = src_ptr + tok * stride_src + head * D
    dst = dst_ptr + tok * stride_dst + head * D
    x1 = tl.load(src + j, mask=m, other=0.0).to(tl.float32)
    x2 = tl.load(src + R2 + j, mask=m, other=0.0).to(tl.float32)
    ty = dst_ptr.dtype.element_ty
    tl.store(dst + j, (x1 * c - x2 * s).to(ty), mask=m)
    tl.store(dst + R2 + j, (x2 * c + x1 * s).to(ty), mask=m)
    tl.store(dst + p, tl.load(src + p, mask=mp, other=0.0).to(ty), mask=mp)


@triton.jit
def _mrope_token_tile_kernel(
    q_ptr, k_ptr, cos_ptr, sin_ptr, qo_ptr, ko_ptr,
    T, HQ, HK, D, R2, S_T, S_TH,
    stride_qt, stride_kt, stride_cc, stride_ct, stride_sc, stride_st,
    BLOCK_T: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_P: tl.constexpr,
):  # fmt: skip
    tok = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    tmask = (tok < T)[:, None]
    tok = tok.to(tl.int64)[:, None]  # int64: token * stride can pass 2^31 elements
    j = tl.arange(0, BLOCK_R)[None, :]
    chan = (j >= S_T).to(tl.int64) + (j >= S_TH).to(tl.int64)  # 0, 1 or 2 per frequency slot
    m = tmask & (j < R2)
    c = tl.load(cos_ptr + chan * stride_cc + tok * stride_ct + j, mask=m, other=1.0)
    s = tl.load(sin_ptr + chan * stride_sc + tok * stride_st + j, mask=m, other=0.0)
    c, s = c.to(tl.float32), s.to(tl.float32)
    for head in range(HQ):
        _mrope_rotate_tile(q_ptr, qo_ptr, tok, tmask, stride_qt, HQ * D, head, D, R2, c, s,
                           BLOCK_R, BLOCK_P)  # fmt: skip
    for head in range(HK):
        _mrope_rotate_tile(k_ptr, ko_ptr, tok, tmask, stride_kt, HK * D, head, D, R2, c, s,
                           BLOCK_R, BLOCK_P)  # fmt: skip


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


def mrope_token_tile_2d(
    q: torch.Tensor,
    k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    head_size: int,
    section_t: int = 0,
    section_h: int = 0,
    section_w: int = 0,
    *,
    block_t: int = 16,
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
        block_t: Tokens per program (power of two).
        num_warps: Warps per program.

    Returns:
        (q_out, k_out): new contiguous tensors of q's and k's shapes, in q's dtype.

    Raises:
        ValueError: The shapes, strides, sections or block_t do not fit.
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
    if block_t < 1 or block_t & (block_t - 1):
        raise ValueError(f"block_t must be a power of two; got {block_t}")
    s_t, s_th = _sections(section_t, section_h, section_w, half)
    q_out, k_out = torch.empty_like(q), torch.empty(k.shape, dtype=q.dtype, device=k.device)
    if t == 0:
        return q_out, k_out
    hq, hk = q.shape[1] // d, k.shape[1] // d
    rest = d - 2 * half
    _mrope_token_tile_kernel[(triton.cdiv(t, block_t),)](
        q, k, cos, sin, q_out, k_out,
        t, hq, hk, d, half, s_t, s_th,
        q.stride(0), k.stride(0), cos.stride(0), cos.stride(1), sin.stride(0), sin.stride(1),
        BLOCK_T=block_t, BLOCK_R=triton.next_power_of_2(half),
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
