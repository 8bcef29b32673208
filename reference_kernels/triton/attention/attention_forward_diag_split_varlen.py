"""
---
id: attention_forward_diag_split_varlen
title: Varlen attention forward whose key loop runs unmasked interior tiles, then the masked edge
op_family: attention
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: compute
techniques: [varlen, online-softmax, unmasked-interior-loop, causal-diagonal-split,
             gqa-head-mapping, fp32-accumulate, exp2-softmax]
status: reference
launcher: attention_forward_diag_split_varlen
tuning:
  block_m: [32, 16, 64, 128]
  block_n: [32, 16, 64]
  num_warps: [4, 2, 8]
args:
  q: {shape: [TQ, HQ, D], dtypes: [bf16, fp16, fp32], aliases: [query]}
  k: {shape: [TK, HKV, D], like: q, aliases: [key]}
  v: {shape: [TK, HKV, D], like: q, aliases: [value]}
  cu_seqlens_q: {shape: ['?'], dtypes: [int32], aliases: [cu_seqlens, cu_seq_lens]}
  cu_seqlens_k: {shape: ['?'], dtypes: [int32]}
  softmax_scale: {type: float, default: null, aliases: [scale, sm_scale, attn_scale]}
  causal: {type: bool, default: false, aliases: [is_causal]}
  max_seqlen_q: {type: int, default: null, aliases: [max_seqlen, max_query_len]}
returns:
  - {name: out, shape: [TQ, HQ, D], dtype: q}
problem:
  shapes: [{seq_lens: [7, 33, 20], num_heads_q: 2, head_dim: 24}, {seq_lens: [7, 33], k_lens: [20, 33], causal: true, num_heads_q: 4, num_heads_kv: 2, head_dim: 24}]
  dtypes: [fp32, bf16]
  allow_tf32: true
  atol: 0.02
  rtol: 0.02
measured:
  - {device: NVIDIA H200, shape: attention_forward/0, dtype: bf16, latency_us: 118.64, sol_fraction: 0.0263, date: '2026-12-03'}
---
atrex30's attention_forward (packed varlen q (sum of query lengths, HQ, D), k and v (sum of key
lengths, HKV, D), per-sequence softmax(q k^T * D^-0.5) v in fp32, non-causal by default) with the
key loop in two phases. Program (seq, q block, head) holds BLOCK_M query rows. Phase 1 walks the
BLOCK_N key tiles every row may see in full: for the non-causal operator that is every tile but the
ragged last one (floor(Lk / BLOCK_N) tiles), with causal=True (queries aligned to the end of the
keys) the tiles wholly below the block's first diagonal; these run with no mask, no iota compare
and no select. Phase 2 handles the rest (the key-length tail, or the diagonal tiles) with masks.
The mask work leaves the hot loop, which matters most for the long vision-encoder sequences of the
operator where all but one tile are interior. Bytes: Q and O once (2 x 2 B per element in bf16),
K and V once per (q block, query head); FLOPs 4 x D per (query, key) pair (half that when causal).
Limits: without max_seqlen_q the grid is sized by the total query count and surplus programs exit
at once (no host sync); head_dim <= 256; GQA groups re-read K/V per head (from L2).
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
def _tile(q, acc, m_i, l_i, k_ptrs, v_ptrs, kv_mask, valid, scale_log2e,
          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, MASKED: tl.constexpr,
          UPCAST: tl.constexpr):  # fmt: skip
    """One online-softmax step over a K/V tile; MASKED applies kv_mask and the score mask."""
    k = tl.load(k_ptrs, mask=kv_mask, other=0.0) if MASKED else tl.load(k_ptrs)
    s = _mma(q, tl.trans(k), tl.zeros([BLOCK_M, BLOCK_N], tl.float32), UPCAST) * scale_log2e
    if MASKED:
        s = tl.where(valid, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with no visible key yet
    alpha = tl.exp2(m_i - m_safe)
    p = tl.exp2(s - m_safe[:, None])
    l_i = l_i * alpha + tl.sum(p, axis=1)
    v = tl.load(v_ptrs, mask=kv_mask, other=0.0) if MASKED else tl.load(v_ptrs)
    acc = _mma(p, v, acc * alpha[:, None], UPCAST)
    return acc, m_new, l_i


@triton.jit
def _attention_forward_diag_split_kernel(
    q_ptr, k_ptr, v_ptr, out_ptr, cu_seqlens_q_ptr, cu_seqlens_k_ptr, scale_log2e,
    stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh, stride_ot, stride_oh,
    GROUP_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    seq = tl.program_id(0)
    q_block = tl.program_id(1)
    head = tl.program_id(2)
    kv_head = head // GROUP_SIZE
    q_start = tl.load(cu_seqlens_q_ptr + seq)
    q_len = tl.load(cu_seqlens_q_ptr + seq + 1) - q_start
    k_start = tl.load(cu_seqlens_k_ptr + seq)
    k_len = tl.load(cu_seqlens_k_ptr + seq + 1) - k_start
    if q_block * BLOCK_M >= q_len:
        return
    offs_m = q_block * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    mask_m = offs_m < q_len
    mask_d = offs_d < HEAD_DIM
    q_rows = (q_start + offs_m).to(tl.int64)
    q = tl.load(q_ptr + q_rows[:, None] * stride_qt + head * stride_qh + offs_d[None, :],
                mask=mask_m[:, None] & mask_d[None, :], other=0.0)  # fmt: skip
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    k_base = k_ptr + k_start.to(tl.int64) * stride_kt + kv_head * stride_kh + offs_d[None, :]
    v_base = v_ptr + k_start.to(tl.int64) * stride_vt + kv_head * stride_vh + offs_d[None, :]
    q_pos = k_len - q_len + offs_m  # end-aligned diagonal (causal only)
    if CAUSAL:
        visible_to_all = tl.maximum(k_len - q_len + q_block * BLOCK_M + 1, 0)
        kv_end = tl.minimum(k_len, k_len - q_len + (q_block + 1) * BLOCK_M)
    else:
        visible_to_all = k_len
        kv_end = k_len
    full_end = (visible_to_all // BLOCK_N) * BLOCK_N
    d_true = offs_n[:, None] >= 0  # (BLOCK_N, 1) all-true
    s_true = (offs_m[:, None] >= 0) & (offs_n[None, :] >= 0)  # (BLOCK_M, BLOCK_N) all-true

    # phase 1: interior tiles, every key visible to every row
    for n_start in range(0, full_end, BLOCK_N):
        kv_pos = (n_start + offs_n).to(tl.int64)
        k_ptrs = k_base + kv_pos[:, None] * stride_kt
        v_ptrs = v_base + kv_pos[:, None] * stride_vt
        if BLOCK_D == HEAD_DIM:
            acc, m_i, l_i = _tile(q, acc, m_i, l_i, k_ptrs, v_ptrs, d_true, d_true,
                                  scale_log2e, BLOCK_M, BLOCK_N, False, UPCAST)  # fmt: skip
        else:  # padded head dim: mask the columns only
            acc, m_i, l_i = _tile(q, acc, m_i, l_i, k_ptrs, v_ptrs, d_true & mask_d[None, :],
                                  s_true, scale_log2e, BLOCK_M, BLOCK_N, True, UPCAST)  # fmt: skip

    # phase 2: the key-length tail (and, causal, the diagonal tiles) with masks
    for n_start in range(full_end, kv_end, BLOCK_N):
        kv_pos = n_start + offs_n
        mask_n = kv_pos < kv_end
        k_ptrs = k_base + kv_pos.to(tl.int64)[:, None] * stride_kt
        v_ptrs = v_base + kv_pos.to(tl.int64)[:, None] * stride_vt
        valid = (offs_m[:, None] >= 0) & mask_n[None, :]  # (BLOCK_M, BLOCK_N)
        if CAUSAL:
            valid = valid & (q_pos[:, None] >= kv_pos[None, :])
        acc, m_i, l_i = _tile(q, acc, m_i, l_i, k_ptrs, v_ptrs, mask_n[:, None] & mask_d[None, :],
                              valid, scale_log2e, BLOCK_M, BLOCK_N, True, UPCAST)  # fmt: skip

    out = acc / tl.where(l_i > 0.0, l_i, 1.0)[:, None]  # a row with no key writes zeros
    tl.store(out_ptr + q_rows[:, None] * stride_ot + head * stride_oh + offs_d[None, :],
             out.to(out_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_d[None, :])  # fmt: skip


def _interpreting() -> bool:
    """Return whether Triton runs in its CPU interpreter (it then needs fp32 tl.dot operands)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def _validate(q, k, v, cu_seqlens_q, cu_seqlens_k) -> None:
    """Raise ValueError naming the shapes when the inputs do not fit together."""
    shapes = (f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}, cu_seqlens_q"
              f" {tuple(cu_seqlens_q.shape)},"
              f" cu_seqlens_k {tuple(cu_seqlens_k.shape)}")  # fmt: skip
    if q.dim() != 3 or k.dim() != 3 or k.shape != v.shape:
        raise ValueError(f"need q (TQ, HQ, D) and k, v (TK, HKV, D); got {shapes}")
    if cu_seqlens_q.dim() != 1 or cu_seqlens_q.shape != cu_seqlens_k.shape:
        raise ValueError(f"need cu_seqlens_q and cu_seqlens_k both (S+1,); got {shapes}")
    if q.shape[2] != k.shape[2] or q.shape[1] % k.shape[1] != 0 or q.shape[2] > 256:
        raise ValueError(f"need matching head_dim <= 256 and HQ % HKV == 0; got {shapes}")
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"q, k, v dtypes differ: {q.dtype}, {k.dtype}, {v.dtype}")
    if cu_seqlens_q.dtype != torch.int32 or cu_seqlens_k.dtype != torch.int32:
        raise ValueError("cu_seqlens_q and cu_seqlens_k must be int32")
    if q.stride(2) != 1 or k.stride(2) != 1 or v.stride(2) != 1:
        raise ValueError(f"q, k and v need a contiguous last (head) dim; got {shapes}")


def attention_forward_diag_split_varlen(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    softmax_scale: float | None = None,
    causal: bool = False,
    max_seqlen_q: int | None = None,
    *,
    block_m: int = 32,
    block_n: int = 32,
    num_warps: int = 4,
) -> torch.Tensor:
    """Return per-sequence attention of packed queries over packed keys and values.

    Args:
        q: (sum(q_lens), HQ, D) bf16/fp16/fp32.
        k: (sum(k_lens), HKV, D), same dtype; HQ % HKV == 0.
        v: (sum(k_lens), HKV, D), same dtype.
        cu_seqlens_q: (S+1,) int32 prefix sums of the query lengths.
        cu_seqlens_k: (S+1,) int32 prefix sums of the key lengths.
        softmax_scale: Score scale; None means 1/sqrt(D).
        causal: Mask keys after each query (queries aligned to the end of the keys).
        max_seqlen_q: Longest query length (sizes the grid); None uses the total query count.
        block_m: Query rows per program (power of two >= 16).
        block_n: Keys per loop step (power of two >= 16).
        num_warps: Warps per program.

    Returns:
        (sum(q_lens), HQ, D) tensor of q's dtype.

    Raises:
        ValueError: Shapes, dtypes, strides or head counts do not fit together.
    """
    _validate(q, k, v, cu_seqlens_q, cu_seqlens_k)
    out = torch.empty_like(q)
    (total, hq, d), hkv, num_seqs = q.shape, k.shape[1], cu_seqlens_q.shape[0] - 1
    bound = max_seqlen_q if max_seqlen_q is not None else total
    if total == 0 or num_seqs <= 0 or bound == 0:
        return out
    scale = softmax_scale if softmax_scale is not None else d**-0.5
    grid = (num_seqs, triton.cdiv(bound, block_m), hq)
    _attention_forward_diag_split_kernel[grid](
        q, k, v, out, cu_seqlens_q, cu_seqlens_k, scale * 1.4426950408889634,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        out.stride(0), out.stride(1),
        GROUP_SIZE=hq // hkv, HEAD_DIM=d, CAUSAL=bool(causal),
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=max(16, triton.next_power_of_2(d)),
        UPCAST=_interpreting(), num_warps=num_warps,
    )  # fmt: skip
    return out


def reference(
    q, k, v, cu_seqlens_q, cu_seqlens_k, softmax_scale=None, causal=False, max_seqlen_q=None
):
    """Per-sequence fp32 attention (end-aligned causal mask when ``causal``), cast to q's dtype."""
    out = torch.empty_like(q)
    group = q.shape[1] // k.shape[1]
    scale = softmax_scale if softmax_scale is not None else q.shape[2] ** -0.5
    for s in range(cu_seqlens_q.shape[0] - 1):
        q0, q1 = int(cu_seqlens_q[s]), int(cu_seqlens_q[s + 1])
        k0, k1 = int(cu_seqlens_k[s]), int(cu_seqlens_k[s + 1])
        ks = k[k0:k1].float().repeat_interleave(group, dim=1)
        vs = v[k0:k1].float().repeat_interleave(group, dim=1)
        scores = torch.einsum("qhd,khd->hqk", q[q0:q1].float(), ks) * scale
        if causal:
            q_pos = (k1 - k0) - (q1 - q0) + torch.arange(q1 - q0, device=q.device)
            k_pos = torch.arange(k1 - k0, device=q.device)
            scores = scores.masked_fill(k_pos[None, None, :] > q_pos[None, :, None], -torch.inf)
        probs = torch.nan_to_num(scores.softmax(-1))  # rows with no key -> zeros
        out[q0:q1] = torch.einsum("hqk,khd->qhd", probs, vs).to(q.dtype)
    return out


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return packed q/k/v ~ N(0, 1) (the atrex scale) and int32 prefix sums.

    ``shape``: ``seq_lens`` (query lengths), optional ``k_lens`` (default = seq_lens),
    ``num_heads_q``, optional ``num_heads_kv`` (default = num_heads_q), ``head_dim``, ``causal``.
    """
    q_lens = list(shape["seq_lens"])
    k_lens = list(shape.get("k_lens", q_lens))
    hq, d = shape["num_heads_q"], shape["head_dim"]
    hkv = shape.get("num_heads_kv", hq)
    cu_q = torch.zeros(len(q_lens) + 1, dtype=torch.int32, device=device)
    cu_q[1:] = torch.tensor(q_lens, device=device).cumsum(0)
    cu_k = torch.zeros(len(k_lens) + 1, dtype=torch.int32, device=device)
    cu_k[1:] = torch.tensor(k_lens, device=device).cumsum(0)
    return {
        "q": torch.randn(sum(q_lens), hq, d, device=device).to(dtype),
        "k": torch.randn(sum(k_lens), hkv, d, device=device).to(dtype),
        "v": torch.randn(sum(k_lens), hkv, d, device=device).to(dtype),
        "cu_seqlens_q": cu_q,
        "cu_seqlens_k": cu_k,
        "causal": shape.get("causal", False),
    }
