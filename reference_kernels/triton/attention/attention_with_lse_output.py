"""
---
id: attention_with_lse_output
title: Varlen causal attention that also returns each row's log-sum-exp for merging partials
op_family: attention
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: compute
techniques: [varlen, lse-output, causal-tile-bound, gqa-head-mapping, online-softmax,
             fp32-accumulate, exp2-softmax]
status: reference
launcher: attention_with_lse_output
tuning:
  block_m: [64, 16, 32, 128]
  block_n: [32, 16, 64]
  num_warps: [4, 2, 8]
args:
  q: {shape: [TT, HQ, D], dtypes: [bf16, fp16, fp32], aliases: [query]}
  k: {shape: [TT, HKV, D], like: q, aliases: [key]}
  v: {shape: [TT, HKV, D], like: q, aliases: [value]}
  cu_seqlens: {shape: ['?'], dtypes: [int32], aliases: [cu_seqlens_q, cu_seq_lens]}
  softmax_scale: {type: float, default: null, aliases: [scale, sm_scale, attn_scale]}
  max_seqlen: {type: int, default: null, aliases: [max_seq_len, max_seqlen_q]}
returns:
  - {name: out, shape: [TT, HQ, D], dtype: q}
  - {name: lse, shape: [HQ, TT], dtype: fp32}
problem:
  shapes: [{seq_lens: [5, 40], num_heads_q: 4, num_heads_kv: 2, head_dim: 24}, {seq_lens: [1, 17], num_heads_q: 2, num_heads_kv: 2, head_dim: 16}]
  dtypes: [fp32, bf16]
  allow_tf32: true
  atol: 0.02
  rtol: 0.02
measured: []
---
Causal self-attention over packed variable-length sequences (q, k, v (total tokens, heads, D),
cu_seqlens prefix sums, GQA) that returns, next to the output, the natural-log log-sum-exp of
each row's scaled scores, lse[h, t] = log(sum_j exp(scale * q_t . k_j)), laid out (HQ, TT) like
vLLM's merge_attn_states inputs. With it, the result over one key set can be merged exactly with
another over a disjoint key set (a cached prefix, another sequence-parallel rank, a chunked
prefill's earlier chunk): out = (e^lse_a out_a + e^lse_b out_b) / (e^lse_a + e^lse_b); see
merge_attention_states_lse. Program (sequence, q block, head) runs the online softmax (exp2, fp32
running max m and sum l in the log2 domain) up to the block's last diagonal, then writes out =
acc / l and lse = (m + log2 l) x ln 2 at no extra pass. Bytes: Q and O once, 4 B per row and head
of lse, the causal K/V prefix once per (q block, head). Limits: without max_seqlen the grid is
sized by the total token count (surplus programs exit at once, no host sync); head_dim <= 256.
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
def _attention_lse_kernel(
    q_ptr, k_ptr, v_ptr, out_ptr, lse_ptr, cu_seqlens_ptr, scale_log2e,
    stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh, stride_ot, stride_oh,
    stride_lh,
    GROUP_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    seq = tl.program_id(0)
    m0 = tl.program_id(1) * BLOCK_M
    head = tl.program_id(2)
    kv_head = head // GROUP_SIZE
    start = tl.load(cu_seqlens_ptr + seq)
    seq_len = tl.load(cu_seqlens_ptr + seq + 1) - start
    if m0 >= seq_len:
        return
    offs_m = m0 + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    mask_m = offs_m < seq_len
    mask_d = offs_d < HEAD_DIM
    rows = (start + offs_m).to(tl.int64)
    q = tl.load(q_ptr + rows[:, None] * stride_qt + head * stride_qh + offs_d[None, :],
                mask=mask_m[:, None] & mask_d[None, :], other=0.0)  # fmt: skip
    k_base = k_ptr + start.to(tl.int64) * stride_kt + kv_head * stride_kh + offs_d[None, :]
    v_base = v_ptr + start.to(tl.int64) * stride_vt + kv_head * stride_vh + offs_d[None, :]
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    kv_end = tl.minimum(seq_len, m0 + BLOCK_M)  # the block's last diagonal
    for n_start in range(0, kv_end, BLOCK_N):
        pos = n_start + offs_n
        mask_n = pos < kv_end
        kv_mask = mask_n[:, None] & mask_d[None, :]
        k = tl.load(k_base + pos[:, None].to(tl.int64) * stride_kt, mask=kv_mask, other=0.0)
        s = _mma(q, tl.trans(k), tl.zeros([BLOCK_M, BLOCK_N], tl.float32), UPCAST) * scale_log2e
        s = tl.where((offs_m[:, None] >= pos[None, :]) & mask_n[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))  # finite: key 0 is visible to every row
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(v_base + pos[:, None].to(tl.int64) * stride_vt, mask=kv_mask, other=0.0)
        acc = _mma(p, v, acc * alpha[:, None], UPCAST)
        m_i = m_new
    out = acc / l_i[:, None]
    tl.store(out_ptr + rows[:, None] * stride_ot + head * stride_oh + offs_d[None, :],
             out.to(out_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_d[None, :])  # fmt: skip
    lse = (m_i + tl.log2(l_i)) * 0.6931471805599453  # log2 domain -> natural log
    tl.store(lse_ptr + head * stride_lh + rows, lse, mask=mask_m)


def _interpreting() -> bool:
    """Return whether Triton runs in its CPU interpreter (it then needs fp32 tl.dot operands)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def attention_with_lse_output(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens: torch.Tensor,
    softmax_scale: float | None = None,
    max_seqlen: int | None = None,
    *,
    block_m: int = 64,
    block_n: int = 32,
    num_warps: int = 4,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return causal varlen attention and the natural-log log-sum-exp of each row.

    Args:
        q: (total, HQ, D) bf16/fp16/fp32, sequences packed back to back.
        k: (total, HKV, D), same dtype; HQ % HKV == 0.
        v: (total, HKV, D), same dtype.
        cu_seqlens: (S+1,) int32 prefix sums of the sequence lengths.
        softmax_scale: Score scale; None means 1/sqrt(D).
        max_seqlen: Longest sequence (sizes the grid); None uses the total token count.
        block_m: Query rows per program (power of two >= 16).
        block_n: Keys per loop step (power of two >= 16).
        num_warps: Warps per program.

    Returns:
        out (total, HQ, D) of q's dtype and lse (HQ, total) fp32.

    Raises:
        ValueError: Shapes, dtypes, strides or head counts do not fit together.
    """
    shapes = f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
    if q.dim() != 3 or k.dim() != 3 or k.shape != v.shape or cu_seqlens.dim() != 1:
        raise ValueError(f"need q (T, HQ, D), k, v (T, HKV, D), cu_seqlens (S+1,); got {shapes}")
    total, hq, d = q.shape
    if k.shape[0] != total or k.shape[2] != d or hq % k.shape[1] or d > 256:
        raise ValueError(f"need matching T and D <= 256, HQ % HKV == 0; got {shapes}")
    if not (q.dtype == k.dtype == v.dtype) or cu_seqlens.dtype != torch.int32:
        raise ValueError(
            f"need q, k, v of one dtype and int32 cu_seqlens; got {q.dtype}, {k.dtype}"
        )
    if q.stride(2) != 1 or k.stride(2) != 1 or v.stride(2) != 1:
        raise ValueError(f"q, k and v need a contiguous last (head) dim; got {shapes}")
    out = torch.empty_like(q)
    lse = torch.empty((hq, total), dtype=torch.float32, device=q.device)
    num_seqs = cu_seqlens.shape[0] - 1
    bound = max_seqlen if max_seqlen is not None else total
    if total == 0 or num_seqs <= 0 or bound == 0:
        return out, lse
    scale = softmax_scale if softmax_scale is not None else d**-0.5
    _attention_lse_kernel[(num_seqs, triton.cdiv(bound, block_m), hq)](
        q, k, v, out, lse, cu_seqlens, scale * 1.4426950408889634,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        out.stride(0), out.stride(1), lse.stride(0),
        GROUP_SIZE=hq // k.shape[1], HEAD_DIM=d,
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=max(16, triton.next_power_of_2(d)),
        UPCAST=_interpreting(), num_warps=num_warps,
    )  # fmt: skip
    return out, lse


def reference(q, k, v, cu_seqlens, softmax_scale=None, max_seqlen=None):
    """Per-sequence fp32 causal attention and logsumexp of the scaled, masked scores."""
    total, hq, d = q.shape
    group = hq // k.shape[1]
    scale = softmax_scale if softmax_scale is not None else d**-0.5
    out = torch.empty_like(q)
    lse = torch.empty((hq, total), dtype=torch.float32, device=q.device)
    for s in range(cu_seqlens.shape[0] - 1):
        a, b = int(cu_seqlens[s]), int(cu_seqlens[s + 1])
        ks = k[a:b].float().repeat_interleave(group, dim=1)
        vs = v[a:b].float().repeat_interleave(group, dim=1)
        scores = torch.einsum("qhd,khd->hqk", q[a:b].float(), ks) * scale
        causal = torch.ones(b - a, b - a, dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~causal, -torch.inf)
        out[a:b] = torch.einsum("hqk,khd->qhd", scores.softmax(-1), vs).to(q.dtype)
        lse[:, a:b] = scores.logsumexp(-1)
    return out, lse


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return packed N(0, 1) q, k, v and int32 prefix sums.

    ``shape``: ``seq_lens`` (list), ``num_heads_q``, ``num_heads_kv``, ``head_dim``.
    """
    lens = list(shape["seq_lens"])
    hq, hkv, d = shape["num_heads_q"], shape["num_heads_kv"], shape["head_dim"]
    cu = torch.zeros(len(lens) + 1, dtype=torch.int32, device=device)
    cu[1:] = torch.tensor(lens, device=device).cumsum(0)
    return {
        "q": torch.randn(sum(lens), hq, d, device=device).to(dtype),
        "k": torch.randn(sum(lens), hkv, d, device=device).to(dtype),
        "v": torch.randn(sum(lens), hkv, d, device=device).to(dtype),
        "cu_seqlens": cu,
    }
