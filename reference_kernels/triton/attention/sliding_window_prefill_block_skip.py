"""
---
id: sliding_window_prefill_block_skip
title: Causal sliding-window prefill attention that never visits key tiles outside the window
op_family: attention
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: compute
techniques: [sliding-window, local-attention, block-skip, causal-tile-bound, gqa-head-mapping,
             online-softmax, fp32-accumulate, exp2-softmax]
status: reference
launcher: sliding_window_prefill_block_skip
tuning:
  block_m: [64, 16, 32, 128]
  block_n: [32, 16, 64]
  num_warps: [4, 2, 8]
args:
  q: {shape: [B, HQ, S, D], dtypes: [bf16, fp16, fp32], aliases: [query]}
  k: {shape: [B, HKV, S, D], like: q, aliases: [key]}
  v: {shape: [B, HKV, S, D], like: q, aliases: [value]}
  window: {type: int, aliases: [sliding_window, window_size]}
  softmax_scale: {type: float, default: null, aliases: [scale, sm_scale, attn_scale]}
returns:
  - {name: out, shape: [B, HQ, S, D], dtype: q}
problem:
  shapes: [{batch: 1, num_heads_q: 2, num_heads_kv: 1, seq_len: 70, head_dim: 24, window: 20}, {batch: 2, num_heads_q: 1, num_heads_kv: 1, seq_len: 20, head_dim: 16, window: 1}]
  dtypes: [fp32, bf16]
  allow_tf32: true
  atol: 0.02
  rtol: 0.02
measured: []
---
Local (sliding-window) causal self-attention for prefill, as in Mistral / Gemma local layers:
query i sees keys j with i - window < j <= i. Program (batch x query head, q block) holds BLOCK_M
query rows [m0, m0 + BLOCK_M); the union of their windows is [m0 - window + 1, m0 + BLOCK_M), so
the key loop STARTS at that lower bound (rounded down to a BLOCK_N tile) and stops at the block's
last diagonal: tiles wholly before the window are never loaded or multiplied. Work per q block is
O(window + BLOCK_M) keys instead of O(position), so the whole prefill is O(S x window) rather than
O(S^2 / 2); at S = 32k and window = 4k that is ~8x fewer tiles than a causal kernel masking the
out-of-window keys. Inside the range the window's lower edge and the diagonal are applied as one
mask, with fp32 online softmax (exp2). Bytes: Q and O once, about (window + BLOCK_M) keys of K and V
per q block and head (GQA heads of a group re-read them from L2). Limits: one window for all
heads; head_dim <= 256; the edge masks run on every tile (fine: the range is window-sized).
"""

import os

import torch
import triton
import triton.language as tl


@triton.jit
def _mma(a, b, acc, UPCAST: tl.constexpr):
    """Return acc + a @ b with an fp32 accumulator (exact fp32 operands under the interpreter)."""
    if UPCAST:
        acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
    else:
        acc = tl.dot(a.to(b.dtype), b, acc)  # GPU: tensor cores on the storage dtype
    return acc


@triton.jit
def _sliding_window_prefill_kernel(
    q_ptr, k_ptr, v_ptr, out_ptr, seq_len, window, scale_log2e,
    stride_qb, stride_qh, stride_qs, stride_kb, stride_kh, stride_ks,
    stride_vb, stride_vh, stride_vs, stride_ob, stride_oh, stride_os,
    NUM_HEADS: tl.constexpr, GROUP_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    bh = tl.program_id(0)
    b = bh // NUM_HEADS
    head = bh % NUM_HEADS
    kv_head = head // GROUP_SIZE
    m0 = tl.program_id(1) * BLOCK_M
    offs_m = m0 + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    mask_m = offs_m < seq_len
    mask_d = offs_d < HEAD_DIM
    q_base = q_ptr + b.to(tl.int64) * stride_qb + head * stride_qh
    q = tl.load(q_base + offs_m[:, None] * stride_qs + offs_d[None, :],
                mask=mask_m[:, None] & mask_d[None, :], other=0.0)  # fmt: skip
    k_base = k_ptr + b.to(tl.int64) * stride_kb + kv_head * stride_kh + offs_d[None, :]
    v_base = v_ptr + b.to(tl.int64) * stride_vb + kv_head * stride_vh + offs_d[None, :]
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)

    # the block's keys: [m0 - window + 1, m0 + BLOCK_M) clipped; earlier tiles are skipped
    lo = (tl.maximum(m0 - window + 1, 0) // BLOCK_N) * BLOCK_N
    hi = tl.minimum(seq_len, m0 + BLOCK_M)
    for n_start in range(lo, hi, BLOCK_N):
        pos = n_start + offs_n
        mask_n = pos < hi
        kv_mask = mask_n[:, None] & mask_d[None, :]
        k = tl.load(k_base + pos[:, None].to(tl.int64) * stride_ks, mask=kv_mask, other=0.0)
        s = _mma(q, tl.trans(k), tl.zeros([BLOCK_M, BLOCK_N], tl.float32), UPCAST) * scale_log2e
        rel = offs_m[:, None] - pos[None, :]  # query minus key position
        s = tl.where((rel >= 0) & (rel < window) & mask_n[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # row not yet in its window
        alpha = tl.exp2(m_i - m_safe)
        p = tl.exp2(s - m_safe[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(v_base + pos[:, None].to(tl.int64) * stride_vs, mask=kv_mask, other=0.0)
        acc = _mma(p, v, acc * alpha[:, None], UPCAST)
        m_i = m_new

    out = acc / tl.where(l_i > 0.0, l_i, 1.0)[:, None]
    o_base = out_ptr + b.to(tl.int64) * stride_ob + head * stride_oh
    tl.store(o_base + offs_m[:, None] * stride_os + offs_d[None, :],
             out.to(out_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_d[None, :])  # fmt: skip


def _interpreting() -> bool:
    """Return whether Triton runs in its CPU interpreter (it then needs fp32 tl.dot operands)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def sliding_window_prefill_block_skip(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    window: int,
    softmax_scale: float | None = None,
    *,
    block_m: int = 64,
    block_n: int = 32,
    num_warps: int = 4,
) -> torch.Tensor:
    """Return causal attention restricted to the last ``window`` keys of each query.

    Args:
        q: (B, HQ, S, D) bf16/fp16/fp32.
        k: (B, HKV, S, D), same dtype; HQ % HKV == 0.
        v: (B, HKV, S, D), same dtype.
        window: Keys per query including itself (query i sees i - window < j <= i); >= 1.
        softmax_scale: Score scale; None means 1/sqrt(D).
        block_m: Query rows per program (power of two >= 16).
        block_n: Keys per loop step (power of two >= 16).
        num_warps: Warps per program.

    Returns:
        (B, HQ, S, D) tensor of q's dtype.

    Raises:
        ValueError: Shapes, dtypes, strides, head counts or the window do not fit.
    """
    shapes = f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
    if q.dim() != 4 or k.dim() != 4 or k.shape != v.shape:
        raise ValueError(f"need q (B, HQ, S, D) and k, v (B, HKV, S, D); got {shapes}")
    b, hq, s, d = q.shape
    if (k.shape[0], k.shape[2], k.shape[3]) != (b, s, d) or hq % k.shape[1] or d > 256:
        raise ValueError(f"need matching B, S and D <= 256, HQ % HKV == 0; got {shapes}")
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"q, k, v dtypes differ: {q.dtype}, {k.dtype}, {v.dtype}")
    if window < 1:
        raise ValueError(f"window {window} must be >= 1 (the query itself)")
    if q.stride(3) != 1 or k.stride(3) != 1 or v.stride(3) != 1:
        raise ValueError(f"q, k and v need a contiguous last (head) dim; got {shapes}")
    out = torch.empty_like(q)
    if out.numel() == 0:
        return out
    scale = softmax_scale if softmax_scale is not None else d**-0.5
    grid = (b * hq, triton.cdiv(s, block_m))
    _sliding_window_prefill_kernel[grid](
        q, k, v, out, s, min(window, s), scale * 1.4426950408889634,
        q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2), out.stride(0), out.stride(1), out.stride(2),
        NUM_HEADS=hq, GROUP_SIZE=hq // k.shape[1], HEAD_DIM=d,
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=max(16, triton.next_power_of_2(d)),
        UPCAST=_interpreting(), num_warps=num_warps,
    )  # fmt: skip
    return out


def reference(q, k, v, window, softmax_scale=None):
    """fp32 attention with the banded causal mask i - window < j <= i."""
    hq, s, d = q.shape[1], q.shape[2], q.shape[3]
    group = hq // k.shape[1]
    scale = softmax_scale if softmax_scale is not None else d**-0.5
    kf = k.float().repeat_interleave(group, dim=1)
    vf = v.float().repeat_interleave(group, dim=1)
    scores = torch.einsum("bhid,bhjd->bhij", q.float(), kf) * scale
    rel = torch.arange(s, device=q.device)[:, None] - torch.arange(s, device=q.device)[None, :]
    scores = scores.masked_fill((rel < 0) | (rel >= window), -torch.inf)
    return torch.einsum("bhij,bhjd->bhid", scores.softmax(-1), vf).to(q.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return N(0, 1) q, k, v and the window.

    ``shape``: ``batch``, ``num_heads_q``, ``num_heads_kv``, ``seq_len``, ``head_dim``, ``window``.
    """
    b, hq, hkv, s, d = (shape["batch"], shape["num_heads_q"], shape["num_heads_kv"],
                        shape["seq_len"], shape["head_dim"])  # fmt: skip
    return {
        "q": torch.randn(b, hq, s, d, device=device).to(dtype),
        "k": torch.randn(b, hkv, s, d, device=device).to(dtype),
        "v": torch.randn(b, hkv, s, d, device=device).to(dtype),
        "window": shape["window"],
    }
