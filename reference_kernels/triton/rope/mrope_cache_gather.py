"""
---
id: mrope_cache_gather
title: Multimodal sectioned RoPE in two passes, section gather into a (T, R/2) table then flat rows
op_family: rope
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [mrope, sectioned-cos-sin, two-pass, table-gather, flat-row-grid, neox-rope,
  partial-rotary, flattened-heads, fp32-accumulate]
status: reference
launcher: mrope_cache_gather
tuning:
  block_rows: [16, 1, 4, 64]
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
flattened q (T, HQ * D) and k (T, HK * D), split into two launches. Pass 1 (one program per token)
merges the three position streams: for each section c it copies the contiguous slots [start_c,
end_c) of channel c's cos and sin rows into an fp32 (T, R / 2) scratch table, i.e. three contiguous
slice copies instead of a per-slot channel select. Pass 2 is a flat grid over the T * (HQ + HK)
(token, head) rows, BLOCK_ROWS rows per program: each row reads its token's merged cos/sin row
(plain (token, slot) addressing, L2-resident after pass 1) and rotates its first R dims in fp32
([x1 | x2] -> [x1 cos - x2 sin | x2 cos + x1 sin]), copying dims past R. Keeping the section logic
out of the hot kernel leaves pass 2 a generic cache-driven RoPE over rows with no head-count or
token-count constraint on the tile shape, so it load-balances equally well at decode and prefill;
the price is the extra launch and the T * R * 8 B scratch round trip (about 1 / (HQ + HK) of the
q/k traffic for bf16 D = R). Bytes: q and k read and written once (4 B per element in bf16).
Sections are three int scalars (problems keep the list in an init argument the adapter cannot
pass); all three 0 means Qwen2-VL's proportions (1/4, 3/8, 3/8 of R / 2). Limits: neox style,
non-interleaved sections only; R even and at most D.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _mrope_gather_kernel(
    cos_ptr, sin_ptr, cm_ptr, sm_ptr, R2, S_T, S_TH,
    stride_cc, stride_ct, stride_sc, stride_st,
    BLOCK_R: tl.constexpr,
):  # fmt: skip
    """Merge the three channels' section slices of one token into the (T, R2) tables."""
    token = tl.program_id(0).to(tl.int64)
    j = tl.arange(0, BLOCK_R)
    for chan in tl.static_range(3):
        lo = 0 if chan == 0 else (S_T if chan == 1 else S_TH)
        hi = S_T if chan == 0 else (S_TH if chan == 1 else R2)
        m = (j >= lo) & (j < hi)  # this section's contiguous slots
        c = tl.load(cos_ptr + chan * stride_cc + token * stride_ct + j, mask=m)
        s = tl.load(sin_ptr + chan * stride_sc + token * stride_st + j, mask=m)
        tl.store(cm_ptr + token * R2 + j, c.to(tl.float32), mask=m)
        tl.store(sm_ptr + token * R2 + j, s.to(tl.float32), mask=m)


@triton.jit
def _mrope_rows_kernel(
    q_ptr, k_ptr, cm_ptr, sm_ptr, qo_ptr, ko_ptr,
    T, HQ, HK, D, R2, stride_qt, stride_kt,
    BLOCK_ROWS: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_P: tl.constexpr,
):  # fmt: skip
    """Rotate BLOCK_ROWS (token, head) rows; rows [0, T * HQ) are q's, the rest k's."""
    row = (tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)).to(tl.int64)[:, None]
    nq = T * HQ
    is_q = row < nq
    is_k = (row >= nq) & (row < nq + T * HK)
    rk = tl.where(is_q, 0, row - nq)
    token = tl.where(is_q, row // HQ, rk // HK)
    j = tl.arange(0, BLOCK_R)[None, :]
    p = 2 * R2 + tl.arange(0, BLOCK_P)[None, :]
    live = is_q | is_k
    c = tl.load(cm_ptr + token * R2 + j, mask=live & (j < R2), other=1.0)
    s = tl.load(sm_ptr + token * R2 + j, mask=live & (j < R2), other=0.0)
    ty = qo_ptr.dtype.element_ty
    for which in tl.static_range(2):  # 0: the tile's q rows, 1: its k rows
        if which == 0:
            mine = is_q
            head = row % HQ
            src = q_ptr + token * stride_qt + head * D
            dst = qo_ptr + row * D  # q_out is contiguous: row t * HQ + h starts at row * D
        else:
            mine = is_k
            head = rk % HK
            src = k_ptr + token * stride_kt + head * D
            dst = ko_ptr + rk * D
        m = mine & (j < R2)
        x1 = tl.load(src + j, mask=m, other=0.0).to(tl.float32)
        x2 = tl.load(src + R2 + j, mask=m, other=0.0).to(tl.float32)
        tl.store(dst + j, (x1 * c - x2 * s).to(ty), mask=m)
        tl.store(dst + R2 + j, (x2 * c + x1 * s).to(ty), mask=m)
        mp = mine & (p < D)
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


def mrope_cache_gather(
    q: torch.Tensor,
    k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    head_size: int,
    section_t: int = 0,
    section_h: int = 0,
    section_w: int = 0,
    *,
    block_rows: int = 16,
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
        block_rows: (token, head) rows per program of pass 2 (power of two).
        num_warps: Warps per program.

    Returns:
        (q_out, k_out): new contiguous tensors of q's and k's shapes, in q's dtype.

    Raises:
        ValueError: The shapes, strides, sections or block_rows do not fit.
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
    if block_rows < 1 or block_rows & (block_rows - 1):
        raise ValueError(f"block_rows must be a power of two; got {block_rows}")
    s_t, s_th = _sections(section_t, section_h, section_w, half)
    q_out, k_out = torch.empty_like(q), torch.empty(k.shape, dtype=q.dtype, device=k.device)
    if t == 0:
        return q_out, k_out
    hq, hk = q.shape[1] // d, k.shape[1] // d
    rest = d - 2 * half
    block_r = triton.next_power_of_2(half)
    cos_m = torch.empty((t, half), dtype=torch.float32, device=q.device)
    sin_m = torch.empty_like(cos_m)
    _mrope_gather_kernel[(t,)](
        cos, sin, cos_m, sin_m, half, s_t, s_th,
        cos.stride(0), cos.stride(1), sin.stride(0), sin.stride(1),
        BLOCK_R=block_r, num_warps=1,
    )  # fmt: skip
    _mrope_rows_kernel[(triton.cdiv(t * (hq + hk), block_rows),)](
        q, k, cos_m, sin_m, q_out, k_out,
        t, hq, hk, d, half, q.stride(0), k.stride(0),
        BLOCK_ROWS=block_rows, BLOCK_R=block_r,
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
