"""
---
id: flash_decoding_dense_split_kv
title: Flash-decoding on a dense KV cache, split-KV partials (out, lse) then a merge kernel
op_family: attention
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [split-kv, flash-decoding, lse-merge, gqa-head-packing, online-softmax,
             tensor-core-mma, exp2-softmax, varlen]
status: reference
launcher: flash_decoding_dense_split_kv
tuning:
  num_splits: [8, 2, 4, 16]
  block_n: [32, 16, 64]
  num_warps: [4, 2, 8]
args:
  q: {shape: [B, HQ, D], dtypes: [bf16, fp16, fp32], aliases: [query]}
  k: {shape: [B, T, HKV, D], like: q, aliases: [key, k_cache]}
  v: {shape: [B, T, HKV, D], like: q, aliases: [value, v_cache]}
  seq_lens: {shape: [B], dtypes: [int32], optional: true, aliases: [cache_seqlens, context_lens]}
  softmax_scale: {type: float, default: null, aliases: [scale, sm_scale, attn_scale]}
returns:
  - {name: out, shape: [B, HQ, D], dtype: q}
problem:
  shapes: [{batch: 3, seq_len: 24, seq_lens: [24, 0, 9], num_heads_q: 4, num_heads_kv: 2, head_dim: 24}, {batch: 1, seq_len: 33, num_heads_q: 2, num_heads_kv: 2, head_dim: 16}]
  dtypes: [fp32, bf16]
  allow_tf32: true
  atol: 0.02
  rtol: 0.02
measured: []
---
Decode attention (one query token per sequence) over a dense, batch-major KV cache (B, T, HKV, D)
with optional per-sequence lengths, parallelised over the context (flash-decoding). Stage 1: grid
(batch, KV head, split); each program takes a contiguous 1 / num_splits share of ITS sequence's
keys (rounded to BLOCK_N, so shorter sequences get shorter shares), packs the GROUP query heads of
the KV head into the rows of a >= 16-row tile (one K/V read serves the whole group and feeds a real
MMA), runs an online softmax and writes an unnormalised-free partial: the normalised fp32 output
and its log-sum-exp in base 2 (-inf for an empty split). Stage 2: one program per (batch, query
head) loads the num_splits lse values, rescales each partial by exp2(lse_i - max) and divides by
the sum. Bytes: K and V once (2 x L x HKV x D x 2 B in bf16) spread over B x HKV x num_splits
programs, plus num_splits x (D + 1) x 4 B of partials per head written and read back. Wins when B x
HKV is far below the SM count and the context is long; for large batches the merge pass is pure
overhead (use attention_decode_dense_gqa). Limits: num_splits fixed per launch (not per sequence);
GROUP <= 128; head_dim <= 256.
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
def _split_kernel(
    q_ptr, k_ptr, v_ptr, seq_lens_ptr, part_o_ptr, part_lse_ptr, max_len, scale_log2e,
    stride_qb, stride_qh, stride_kb, stride_kt, stride_kh, stride_vb, stride_vt, stride_vh,
    HAS_LENS: tl.constexpr, NUM_SPLITS: tl.constexpr, GROUP_SIZE: tl.constexpr,
    HEAD_DIM: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    UPCAST: tl.constexpr,
):  # fmt: skip
    b = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    seq_len = tl.load(seq_lens_ptr + b) if HAS_LENS else max_len
    share = tl.cdiv(tl.cdiv(seq_len, NUM_SPLITS), BLOCK_N) * BLOCK_N
    lo = split * share
    hi = tl.minimum(seq_len, lo + share)
    offs_g = tl.arange(0, BLOCK_G)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    mask_g = offs_g < GROUP_SIZE
    mask_d = offs_d < HEAD_DIM
    heads = kv_head * GROUP_SIZE + offs_g
    q = tl.load(q_ptr + b * stride_qb + heads[:, None] * stride_qh + offs_d[None, :],
                mask=mask_g[:, None] & mask_d[None, :], other=0.0)  # fmt: skip
    m_i = tl.full([BLOCK_G], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_G], tl.float32)
    acc = tl.zeros([BLOCK_G, BLOCK_D], tl.float32)
    k_base = k_ptr + b.to(tl.int64) * stride_kb + kv_head * stride_kh + offs_d[None, :]
    v_base = v_ptr + b.to(tl.int64) * stride_vb + kv_head * stride_vh + offs_d[None, :]
    for n_start in range(lo, hi, BLOCK_N):
        pos = n_start + offs_n
        mask_n = pos < hi
        kv_mask = mask_n[:, None] & mask_d[None, :]
        k = tl.load(k_base + pos[:, None] * stride_kt, mask=kv_mask, other=0.0)
        s = _mma(q, tl.trans(k), tl.zeros([BLOCK_G, BLOCK_N], tl.float32), UPCAST) * scale_log2e
        s = tl.where(mask_n[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))  # finite: each step has a valid key
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(v_base + pos[:, None] * stride_vt, mask=kv_mask, other=0.0)
        acc = _mma(p, v, acc * alpha[:, None], UPCAST)
        m_i = m_new
    has = l_i > 0.0
    o = acc / tl.where(has, l_i, 1.0)[:, None]
    lse = tl.where(has, m_i + tl.log2(tl.where(has, l_i, 1.0)), float("-inf"))
    # partials: o (B, HQ, NUM_SPLITS, D) and lse (B, HQ, NUM_SPLITS), fp32 contiguous
    row = (b * (GROUP_SIZE * tl.num_programs(1)) + heads).to(tl.int64) * NUM_SPLITS + split
    tl.store(part_o_ptr + row[:, None] * BLOCK_D + offs_d[None, :], o, mask=mask_g[:, None])
    tl.store(part_lse_ptr + row, lse, mask=mask_g)


@triton.jit
def _merge_kernel(part_o_ptr, part_lse_ptr, out_ptr, stride_ob, stride_oh, num_heads,
                  NUM_SPLITS: tl.constexpr, HEAD_DIM: tl.constexpr,
                  BLOCK_D: tl.constexpr):  # fmt: skip
    b = tl.program_id(0)
    head = tl.program_id(1)
    offs_s = tl.arange(0, NUM_SPLITS)
    offs_d = tl.arange(0, BLOCK_D)
    row0 = (b * num_heads + head).to(tl.int64) * NUM_SPLITS
    lse = tl.load(part_lse_ptr + row0 + offs_s)
    m = tl.max(lse, axis=0)
    w = tl.exp2(lse - tl.where(m == float("-inf"), 0.0, m))  # empty splits weigh 0
    o = tl.load(part_o_ptr + (row0 + offs_s)[:, None] * BLOCK_D + offs_d[None, :])
    total = tl.sum(w, axis=0)
    out = tl.sum(o * w[:, None], axis=0) / tl.where(total > 0.0, total, 1.0)
    tl.store(out_ptr + b * stride_ob + head * stride_oh + offs_d,
             out.to(out_ptr.dtype.element_ty), mask=offs_d < HEAD_DIM)  # fmt: skip


def _interpreting() -> bool:
    """Return whether Triton runs in its CPU interpreter (it then needs fp32 tl.dot operands)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def _validate(q, k, v, seq_lens, num_splits) -> None:
    """Raise ValueError naming the shapes when the inputs do not fit together."""
    shapes = f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
    if q.dim() != 3 or k.dim() != 4 or k.shape != v.shape:
        raise ValueError(f"need q (B, HQ, D) and k, v (B, T, HKV, D); got {shapes}")
    b, hq, d = q.shape
    if k.shape[0] != b or k.shape[3] != d or hq % k.shape[2] or d > 256:
        raise ValueError(f"need matching B and D <= 256, HQ % HKV == 0; got {shapes}")
    if hq // k.shape[2] > 128:
        raise ValueError(f"GROUP = HQ / HKV = {hq // k.shape[2]} > 128 rows; got {shapes}")
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"q, k, v dtypes differ: {q.dtype}, {k.dtype}, {v.dtype}")
    if seq_lens is not None and (seq_lens.shape != (b,) or seq_lens.dtype != torch.int32):
        raise ValueError(f"seq_lens must be int32 of shape ({b},); got {tuple(seq_lens.shape)}")
    if num_splits < 1 or num_splits & (num_splits - 1):
        raise ValueError(f"num_splits {num_splits} must be a power of two >= 1")
    if q.stride(2) != 1 or k.stride(3) != 1 or v.stride(3) != 1:
        raise ValueError(f"q, k and v need a contiguous last (head) dim; got {shapes}")


def flash_decoding_dense_split_kv(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    seq_lens: torch.Tensor | None = None,
    softmax_scale: float | None = None,
    *,
    num_splits: int = 8,
    block_n: int = 32,
    num_warps: int = 4,
) -> torch.Tensor:
    """Return decode attention of one query per sequence over a dense cache, split over keys.

    Args:
        q: (B, HQ, D) bf16/fp16/fp32.
        k: (B, T, HKV, D), same dtype; HQ % HKV == 0.
        v: (B, T, HKV, D), same dtype.
        seq_lens: (B,) int32 valid keys per sequence (<= T); None means all T.
        softmax_scale: Score scale; None means 1/sqrt(D).
        num_splits: Key shares per (sequence, KV head) (power of two).
        block_n: Keys per loop step (power of two >= 16).
        num_warps: Warps per split program.

    Returns:
        (B, HQ, D) tensor of q's dtype (zeros for a sequence of length 0).

    Raises:
        ValueError: Shapes, dtypes, strides or head counts do not fit together.
    """
    _validate(q, k, v, seq_lens, num_splits)
    (b, hq, d), (_, t, hkv, _) = q.shape, k.shape
    out = torch.empty_like(q)
    if out.numel() == 0:
        return out
    block_d = max(16, triton.next_power_of_2(d))
    part_o = torch.empty((b, hq, num_splits, block_d), dtype=torch.float32, device=q.device)
    part_lse = torch.empty((b, hq, num_splits), dtype=torch.float32, device=q.device)
    scale = softmax_scale if softmax_scale is not None else d**-0.5
    group = hq // hkv
    _split_kernel[(b, hkv, num_splits)](
        q, k, v, seq_lens if seq_lens is not None else q, part_o, part_lse, t,
        scale * 1.4426950408889634,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2),
        HAS_LENS=seq_lens is not None, NUM_SPLITS=num_splits, GROUP_SIZE=group, HEAD_DIM=d,
        BLOCK_G=max(16, triton.next_power_of_2(group)), BLOCK_N=block_n, BLOCK_D=block_d,
        UPCAST=_interpreting(), num_warps=num_warps,
    )  # fmt: skip
    _merge_kernel[(b, hq)](
        part_o, part_lse, out, out.stride(0), out.stride(1), hq,
        NUM_SPLITS=num_splits, HEAD_DIM=d, BLOCK_D=block_d, num_warps=1,
    )  # fmt: skip
    return out


def reference(q, k, v, seq_lens=None, softmax_scale=None):
    """fp32 softmax attention of each query over its sequence's first seq_lens keys."""
    b, hq, d = q.shape
    t, hkv = k.shape[1], k.shape[2]
    scale = softmax_scale if softmax_scale is not None else d**-0.5
    kf = k.float().repeat_interleave(hq // hkv, dim=2)  # (B, T, HQ, D)
    vf = v.float().repeat_interleave(hq // hkv, dim=2)
    scores = torch.einsum("bhd,bthd->bht", q.float(), kf) * scale
    if seq_lens is not None:
        valid = torch.arange(t, device=q.device)[None, :] < seq_lens[:, None].long()
        scores = scores.masked_fill(~valid[:, None, :], -torch.inf)
    probs = torch.nan_to_num(scores.softmax(-1))
    return torch.einsum("bht,bthd->bhd", probs, vf).to(q.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return N(0, 1) q, k, v and optional lengths.

    ``shape``: ``batch``, ``seq_len`` (T), ``num_heads_q``, ``num_heads_kv``, ``head_dim``,
    optional ``seq_lens`` (list of valid lengths <= T).
    """
    b, t, hq, hkv, d = (shape["batch"], shape["seq_len"], shape["num_heads_q"],
                        shape["num_heads_kv"], shape["head_dim"])  # fmt: skip
    lens = shape.get("seq_lens")
    return {
        "q": torch.randn(b, hq, d, device=device).to(dtype),
        "k": torch.randn(b, t, hkv, d, device=device).to(dtype),
        "v": torch.randn(b, t, hkv, d, device=device).to(dtype),
        "seq_lens": None if lens is None else torch.tensor(lens, dtype=torch.int32, device=device),
    }
