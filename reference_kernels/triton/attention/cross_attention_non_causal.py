"""
---
id: cross_attention_non_causal
title: Encoder-decoder cross attention, Lq != Lk, keys padded per batch entry by a length vector
op_family: attention
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: compute
techniques: [cross-attention, key-padding-mask, length-bounded-loop, gqa-head-mapping,
             online-softmax, fp32-accumulate, exp2-softmax]
status: reference
launcher: cross_attention_non_causal
tuning:
  block_m: [64, 16, 32, 128]
  block_n: [64, 16, 32, 128]
  num_warps: [4, 2, 8]
args:
  q: {shape: [B, LQ, HQ, D], dtypes: [bf16, fp16, fp32], aliases: [query, hidden_states]}
  k: {shape: [B, LK, HKV, D], like: q, aliases: [key, encoder_k]}
  v: {shape: [B, LK, HKV, D], like: q, aliases: [value, encoder_v]}
  kv_lens: {shape: [B], dtypes: [int32], optional: true, aliases: [encoder_lens, key_lens]}
  softmax_scale: {type: float, default: null, aliases: [scale, sm_scale, attn_scale]}
returns:
  - {name: out, shape: [B, LQ, HQ, D], dtype: q}
problem:
  shapes: [{batch: 2, len_q: 20, len_k: 70, kv_lens: [70, 0], num_heads_q: 2, num_heads_kv: 1, head_dim: 24}, {batch: 1, len_q: 3, len_k: 17, num_heads_q: 2, num_heads_kv: 2, head_dim: 16}]
  dtypes: [fp32, bf16]
  allow_tf32: true
  atol: 0.02
  rtol: 0.02
measured: []
---
Cross attention of a decoder's queries over an encoder's keys and values (Whisper, T5, vision
language adapters): no causal mask, query and key lengths independent, and a batch of padded
encoder outputs (B, LK, HKV, D) whose valid prefix per entry is kv_lens[b] (a key padding mask
given as lengths rather than a boolean tensor). Program (batch x query head, q block) loads
BLOCK_M query rows and loops over only the VALID keys of its entry, ceil(kv_lens[b] / BLOCK_N)
tiles, so padding costs neither loads nor FLOPs (a boolean-mask kernel walks all LK keys); only
the last tile carries a length mask. fp32 online softmax in the exp2 domain; a query whose entry
has no keys writes zeros. Tensors are (batch, sequence, heads, dim), the layout projections
produce, with any strides on the first three dims. Bytes: Q and O once, the valid K and V once per
(q block, query head); FLOPs 4 x D x LQ x kv_len per head. Limits: head_dim <= 256; GQA groups
re-read K/V per head (from L2); padded query rows (if any) are computed like real ones.
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
def _cross_attention_kernel(
    q_ptr, k_ptr, v_ptr, out_ptr, kv_lens_ptr, len_q, len_k, scale_log2e,
    stride_qb, stride_qs, stride_qh, stride_kb, stride_ks, stride_kh,
    stride_vb, stride_vs, stride_vh, stride_ob, stride_os, stride_oh,
    HAS_LENS: tl.constexpr, NUM_HEADS: tl.constexpr, GROUP_SIZE: tl.constexpr,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    UPCAST: tl.constexpr,
):  # fmt: skip
    bh = tl.program_id(0)
    b = bh // NUM_HEADS
    head = bh % NUM_HEADS
    kv_head = head // GROUP_SIZE
    kv_len = tl.minimum(tl.load(kv_lens_ptr + b), len_k) if HAS_LENS else len_k
    offs_m = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    mask_m = offs_m < len_q
    mask_d = offs_d < HEAD_DIM
    q_base = q_ptr + b.to(tl.int64) * stride_qb + head * stride_qh
    q = tl.load(q_base + offs_m[:, None] * stride_qs + offs_d[None, :],
                mask=mask_m[:, None] & mask_d[None, :], other=0.0)  # fmt: skip
    k_base = k_ptr + b.to(tl.int64) * stride_kb + kv_head * stride_kh + offs_d[None, :]
    v_base = v_ptr + b.to(tl.int64) * stride_vb + kv_head * stride_vh + offs_d[None, :]
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    for n_start in range(0, kv_len, BLOCK_N):  # valid keys only: padding is never read
        pos = n_start + offs_n
        mask_n = pos < kv_len
        kv_mask = mask_n[:, None] & mask_d[None, :]
        k = tl.load(k_base + pos[:, None].to(tl.int64) * stride_ks, mask=kv_mask, other=0.0)
        s = _mma(q, tl.trans(k), tl.zeros([BLOCK_M, BLOCK_N], tl.float32), UPCAST) * scale_log2e
        s = tl.where(mask_n[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))  # finite: each tile has a valid key
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(v_base + pos[:, None].to(tl.int64) * stride_vs, mask=kv_mask, other=0.0)
        acc = _mma(p, v, acc * alpha[:, None], UPCAST)
        m_i = m_new
    out = acc / tl.where(l_i > 0.0, l_i, 1.0)[:, None]  # no keys: zeros
    o_base = out_ptr + b.to(tl.int64) * stride_ob + head * stride_oh
    tl.store(o_base + offs_m[:, None] * stride_os + offs_d[None, :],
             out.to(out_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_d[None, :])  # fmt: skip


def _interpreting() -> bool:
    """Return whether Triton runs in its CPU interpreter (it then needs fp32 tl.dot operands)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def cross_attention_non_causal(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    kv_lens: torch.Tensor | None = None,
    softmax_scale: float | None = None,
    *,
    block_m: int = 64,
    block_n: int = 64,
    num_warps: int = 4,
) -> torch.Tensor:
    """Return non-causal attention of decoder queries over each entry's valid encoder keys.

    Args:
        q: (B, LQ, HQ, D) bf16/fp16/fp32.
        k: (B, LK, HKV, D), same dtype; HQ % HKV == 0.
        v: (B, LK, HKV, D), same dtype.
        kv_lens: (B,) int32 valid keys per entry (the rest is padding); None means all LK.
        softmax_scale: Score scale; None means 1/sqrt(D).
        block_m: Query rows per program (power of two >= 16).
        block_n: Keys per loop step (power of two >= 16).
        num_warps: Warps per program.

    Returns:
        (B, LQ, HQ, D) tensor of q's dtype (zeros for an entry with no valid key).

    Raises:
        ValueError: Shapes, dtypes, strides or head counts do not fit together.
    """
    shapes = f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
    if q.dim() != 4 or k.dim() != 4 or k.shape != v.shape:
        raise ValueError(f"need q (B, LQ, HQ, D) and k, v (B, LK, HKV, D); got {shapes}")
    b, lq, hq, d = q.shape
    if k.shape[0] != b or k.shape[3] != d or hq % k.shape[2] or d > 256:
        raise ValueError(f"need matching B and D <= 256, HQ % HKV == 0; got {shapes}")
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"q, k, v dtypes differ: {q.dtype}, {k.dtype}, {v.dtype}")
    if kv_lens is not None and (kv_lens.shape != (b,) or kv_lens.dtype != torch.int32):
        raise ValueError(f"kv_lens must be int32 of shape ({b},); got {tuple(kv_lens.shape)}")
    if q.stride(3) != 1 or k.stride(3) != 1 or v.stride(3) != 1:
        raise ValueError(f"q, k and v need a contiguous last (head) dim; got {shapes}")
    out = torch.empty((b, lq, hq, d), dtype=q.dtype, device=q.device)
    if out.numel() == 0:
        return out
    scale = softmax_scale if softmax_scale is not None else d**-0.5
    _cross_attention_kernel[(b * hq, triton.cdiv(lq, block_m))](
        q, k, v, out, kv_lens if kv_lens is not None else q, lq, k.shape[1],
        scale * 1.4426950408889634,
        q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2), out.stride(0), out.stride(1), out.stride(2),
        HAS_LENS=kv_lens is not None, NUM_HEADS=hq, GROUP_SIZE=hq // k.shape[2], HEAD_DIM=d,
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=max(16, triton.next_power_of_2(d)),
        UPCAST=_interpreting(), num_warps=num_warps,
    )  # fmt: skip
    return out


def reference(q, k, v, kv_lens=None, softmax_scale=None):
    """fp32 attention with a key padding mask from kv_lens (rows with no key give zeros)."""
    group = q.shape[2] // k.shape[2]
    scale = softmax_scale if softmax_scale is not None else q.shape[3] ** -0.5
    kf = k.float().repeat_interleave(group, dim=2)
    vf = v.float().repeat_interleave(group, dim=2)
    scores = torch.einsum("bqhd,bkhd->bhqk", q.float(), kf) * scale
    if kv_lens is not None:
        pad = torch.arange(k.shape[1], device=q.device)[None, :] >= kv_lens[:, None].long()
        scores = scores.masked_fill(pad[:, None, None, :], -torch.inf)
    probs = torch.nan_to_num(scores.softmax(-1))
    return torch.einsum("bhqk,bkhd->bqhd", probs, vf).to(q.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return N(0, 1) decoder queries, padded encoder keys/values and their lengths.

    ``shape``: ``batch``, ``len_q``, ``len_k``, ``num_heads_q``, ``num_heads_kv``, ``head_dim``,
    optional ``kv_lens`` (list, each <= len_k).
    """
    b, lq, lk, hq, hkv, d = (shape["batch"], shape["len_q"], shape["len_k"], shape["num_heads_q"],
                             shape["num_heads_kv"], shape["head_dim"])  # fmt: skip
    lens = shape.get("kv_lens")
    return {
        "q": torch.randn(b, lq, hq, d, device=device).to(dtype),
        "k": torch.randn(b, lk, hkv, d, device=device).to(dtype),
        "v": torch.randn(b, lk, hkv, d, device=device).to(dtype),
        "kv_lens": None if lens is None else torch.tensor(lens, dtype=torch.int32, device=device),
    }
