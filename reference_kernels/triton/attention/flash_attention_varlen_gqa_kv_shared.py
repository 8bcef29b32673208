"""
---
id: flash_attention_varlen_gqa_kv_shared
title: Varlen non-causal flash attention, one program per (q block, KV head) serving its query heads
op_family: attention
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: compute
techniques: [flash-attention, varlen, gqa-packing, online-softmax, tensor-core-mma, exp2-softmax]
status: reference
launcher: flash_attention_varlen_gqa_kv_shared
tuning:
  block_m: [16, 32, 64]
  block_n: [64, 16, 32, 128]
  num_warps: [4, 2, 8]
args:
  q: {shape: [TQ, HQ, D], dtypes: [bf16, fp16, fp32], aliases: [query]}
  k: {shape: [TK, HKV, D], like: q, aliases: [key]}
  v: {shape: [TK, HKV, D], like: q, aliases: [value]}
  cu_seqlens_q: {shape: ['?'], dtypes: [int32], aliases: [cu_seqlens, cu_seq_lens]}
  cu_seqlens_k: {shape: ['?'], dtypes: [int32]}
  softmax_scale: {type: float, default: null, aliases: [scale, sm_scale, attn_scale]}
returns:
  - {name: out, shape: [TQ, HQ, D], dtype: q}
problem:
  shapes: [{seq_lens: [7, 33, 20], num_heads_q: 4, num_heads_kv: 2, head_dim: 40}, {seq_lens: [1, 5], kv_lens: [9, 5], num_heads_q: 3, num_heads_kv: 3, head_dim: 64}]
  dtypes: [fp32, bf16]
  allow_tf32: true
  atol: 0.02
  rtol: 0.02
measured:
  - {device: NVIDIA H200, shape: attention_forward/0, dtype: bf16, latency_us: 108.64, sol_fraction: 0.0287, date: '2026-12-03'}
---
Full (non-causal) varlen self-attention, softmax(q k^T * scale) v per sequence, with q packed as
(sum of query lengths, HQ, D) and k, v as (sum of key lengths, HKV, D) (cu_seqlens_q and
cu_seqlens_k give each sequence's rows), each KV head serving GROUP = HQ / HKV consecutive query
heads. The grid is (sequence, query block, KV head): one program stacks BLOCK_M query tokens x the
GROUP heads of its KV head into one (BLOCK_M * BLOCK_G, D) tile (row r = token r // BLOCK_G, head r
% BLOCK_G) and walks the sequence's keys BLOCK_N at a time with an online softmax (exp2, fp32
state); each K and V tile is loaded once and used by all GROUP heads, so K/V traffic drops by GROUP
against a per-query-head grid and the tl.dot M dimension stays large even for small BLOCK_M. FLOPs:
4 * Lq * Lk * D per head; bytes per program: its Q tile once and its sequence's K/V for one head.
When it wins: GQA/MQA prefill (GROUP 4-16) with moderate sequence lengths. Limits: BLOCK_M *
BLOCK_G rows live in registers (keep <= 128 on GPU); D <= 256; with GROUP = 1 it is plain flash
attention; no host sync: the grid assumes any sequence may hold all TQ query tokens, so many
short sequences launch S x TQ / BLOCK_M programs, most of which exit at once.
"""

import math
import os

import torch
import triton
import triton.language as tl


@triton.jit
def _mma(a, b, acc, UPCAST: tl.constexpr):
    """Return acc + a @ b with an fp32 accumulator (exact fp32 operands under the interpreter)."""
    if UPCAST:
        # CPU interpreter: its bf16 tl.dot is wrong, so multiply exact fp32 copies
        acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
    else:
        acc = tl.dot(a.to(b.dtype), b, acc)  # GPU: tensor cores on the storage dtype
    return acc


@triton.jit
def _flash_varlen_gqa_kv_shared_kernel(
    q_ptr, k_ptr, v_ptr, out_ptr, cu_q_ptr, cu_k_ptr,
    head_dim, scale_log2e,
    stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh, stride_ot, stride_oh,
    GROUP_SIZE: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    seq = tl.program_id(0)
    q_block = tl.program_id(1)
    kv_head = tl.program_id(2)
    q_start = tl.load(cu_q_ptr + seq)
    q_len = tl.load(cu_q_ptr + seq + 1) - q_start
    if q_block * BLOCK_M < q_len:
        k_start = tl.load(cu_k_ptr + seq)
        k_len = tl.load(cu_k_ptr + seq + 1) - k_start
        ROWS: tl.constexpr = BLOCK_M * BLOCK_G
        offs_r = tl.arange(0, ROWS)
        tok = q_block * BLOCK_M + offs_r // BLOCK_G  # token within the sequence
        head = kv_head * GROUP_SIZE + offs_r % BLOCK_G
        mask_r = (tok < q_len) & (offs_r % BLOCK_G < GROUP_SIZE)
        offs_n = tl.arange(0, BLOCK_N)
        offs_d = tl.arange(0, BLOCK_D)
        mask_d = offs_d < head_dim
        rows = (q_start + tok).to(tl.int64)  # int64: tokens x stride can pass 2^31
        q = tl.load(q_ptr + rows[:, None] * stride_qt + head[:, None] * stride_qh + offs_d[None, :],
                    mask=mask_r[:, None] & mask_d[None, :], other=0.0)  # fmt: skip

        m_i = tl.full([ROWS], float("-inf"), tl.float32)
        l_i = tl.zeros([ROWS], tl.float32)
        acc = tl.zeros([ROWS, BLOCK_D], tl.float32)
        k_base = k_ptr + kv_head * stride_kh
        v_base = v_ptr + kv_head * stride_vh
        for n_start in range(0, k_len, BLOCK_N):
            keys = n_start + offs_n
            mask_n = keys < k_len
            krow = (k_start + keys).to(tl.int64)
            k_t = tl.load(k_base + krow[None, :] * stride_kt + offs_d[:, None],
                          mask=mask_d[:, None] & mask_n[None, :], other=0.0)  # fmt: skip
            s = _mma(q, k_t, tl.zeros([ROWS, BLOCK_N], tl.float32), UPCAST) * scale_log2e
            s = tl.where(mask_n[None, :], s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, axis=1))  # finite: each step has a valid key
            alpha = tl.exp2(m_i - m_new)
            p = tl.exp2(s - m_new[:, None])
            l_i = l_i * alpha + tl.sum(p, axis=1)
            v = tl.load(v_base + krow[:, None] * stride_vt + offs_d[None, :],
                        mask=mask_n[:, None] & mask_d[None, :], other=0.0)  # fmt: skip
            acc = _mma(p, v, acc * alpha[:, None], UPCAST)
            m_i = m_new

        out = acc / tl.where(l_i > 0.0, l_i, 1.0)[:, None]  # no keys: zeros
        tl.store(out_ptr + rows[:, None] * stride_ot + head[:, None] * stride_oh + offs_d[None, :],
                 out.to(out_ptr.dtype.element_ty),
                 mask=mask_r[:, None] & mask_d[None, :])  # fmt: skip


def _validate(q, k, v, cu_seqlens_q, cu_seqlens_k) -> None:
    """Raise ValueError naming the shapes when the inputs do not fit together."""
    shapes = f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
    if q.dim() != 3 or k.dim() != 3 or k.shape != v.shape or k.shape[2] != q.shape[2]:
        raise ValueError(f"need q (TQ, HQ, D) and k, v (TK, HKV, D); got {shapes}")
    if k.shape[1] == 0 or q.shape[1] % k.shape[1] or q.shape[2] > 256:
        raise ValueError(f"need HKV dividing HQ and D <= 256; got {shapes}")
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"q, k, v dtypes differ: {q.dtype}, {k.dtype}, {v.dtype}")
    cus = (cu_seqlens_q, cu_seqlens_k)
    if any(c.dim() != 1 or c.dtype != torch.int32 for c in cus) or cus[0].shape != cus[1].shape:
        raise ValueError(
            f"cu_seqlens_q and cu_seqlens_k must be int32 (S + 1,); got {cus[0].dtype} "
            f"{tuple(cus[0].shape)} and {cus[1].dtype} {tuple(cus[1].shape)}"
        )
    if q.stride(2) != 1 or k.stride(2) != 1 or v.stride(2) != 1:
        raise ValueError("q, k and v need a contiguous last (head_dim) axis")


def flash_attention_varlen_gqa_kv_shared(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    softmax_scale: float | None = None,
    *,
    block_m: int | None = None,
    block_n: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return non-causal varlen attention, each program serving all query heads of a KV head.

    Args:
        q: (sum of query lengths, HQ, D) bf16/fp16/fp32, last axis contiguous.
        k: (sum of key lengths, HKV, D) same dtype; HKV divides HQ.
        v: (sum of key lengths, HKV, D) same dtype.
        cu_seqlens_q: (S + 1,) int32 prefix sums of the query lengths.
        cu_seqlens_k: (S + 1,) int32 prefix sums of the key lengths.
        softmax_scale: Score scale; None means 1/sqrt(D).
        block_m: Query tokens per program (power of two); None: 16 x group rows up to 64.
        block_n: Keys per loop step (power of two >= 16); None = 64.
        num_warps: Warps per program; None = 4.

    Returns:
        (sum of query lengths, HQ, D) tensor of q's dtype.

    Raises:
        ValueError: Shapes, dtypes or layouts do not fit together.
    """
    _validate(q, k, v, cu_seqlens_q, cu_seqlens_k)
    out = torch.empty_like(q)
    num_seqs = cu_seqlens_q.shape[0] - 1
    if q.shape[0] == 0 or num_seqs <= 0:
        return out
    _, hq, d = q.shape
    hkv = k.shape[1]
    block_g = triton.next_power_of_2(hq // hkv)
    block_m = block_m or max(1, 64 // block_g)
    if block_m * block_g < 16:
        raise ValueError(
            f"block_m * next_pow2(group) must be >= 16 (a tl.dot minimum); got {block_m}"
        )
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(d)
    grid = (num_seqs, triton.cdiv(q.shape[0], block_m), hkv)
    _flash_varlen_gqa_kv_shared_kernel[grid](
        q, k, v, out, cu_seqlens_q, cu_seqlens_k,
        d, scale * 1.4426950408889634,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        out.stride(0), out.stride(1),
        GROUP_SIZE=hq // hkv, BLOCK_G=block_g, BLOCK_M=block_m, BLOCK_N=block_n or 64,
        BLOCK_D=max(16, triton.next_power_of_2(d)),
        UPCAST=os.environ.get("TRITON_INTERPRET") == "1", num_warps=num_warps or 4,
    )  # fmt: skip
    return out


def reference(q, k, v, cu_seqlens_q, cu_seqlens_k, softmax_scale=None):
    """Per sequence, full fp32 attention with each KV head repeated for its query heads."""
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(q.shape[2])
    group = q.shape[1] // k.shape[1]
    qs, ks = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    out = torch.zeros_like(q)
    for i in range(len(qs) - 1):
        qi = q[qs[i] : qs[i + 1]].float().transpose(0, 1)  # (HQ, Lq, D)
        ki = k[ks[i] : ks[i + 1]].float().repeat_interleave(group, 1).transpose(0, 1)
        vi = v[ks[i] : ks[i + 1]].float().repeat_interleave(group, 1).transpose(0, 1)
        if qi.shape[1] and ki.shape[1]:
            p = (qi @ ki.transpose(1, 2) * scale).softmax(-1)
            out[qs[i] : qs[i + 1]] = (p @ vi).transpose(0, 1).to(q.dtype)
    return out


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return packed q, k, v and prefix sums.

    ``shape``: ``seq_lens`` (query lengths), optional ``kv_lens`` (default: the same),
    ``num_heads_q``, ``num_heads_kv``, ``head_dim``.
    """
    lens = list(shape["seq_lens"])
    kv_lens = list(shape.get("kv_lens", lens))
    hq, hkv, d = shape["num_heads_q"], shape["num_heads_kv"], shape["head_dim"]

    def prefix(ns: list[int]) -> torch.Tensor:
        return torch.tensor([0, *torch.tensor(ns).cumsum(0).tolist()], dtype=torch.int32,
                            device=device)  # fmt: skip

    return {
        "q": torch.randn(sum(lens), hq, d, device=device).to(dtype),
        "k": torch.randn(sum(kv_lens), hkv, d, device=device).to(dtype),
        "v": torch.randn(sum(kv_lens), hkv, d, device=device).to(dtype),
        "cu_seqlens_q": prefix(lens),
        "cu_seqlens_k": prefix(kv_lens),
    }
