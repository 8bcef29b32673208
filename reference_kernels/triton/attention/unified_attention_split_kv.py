"""
---
id: unified_attention_split_kv
title: Paged varlen causal attention with split-KV partitions per query block and an LSE merge
op_family: attention
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [paged-kv, varlen, causal, split-kv, lse-merge, online-softmax, two-kernel,
  tensor-core-mma, gqa]
status: reference
launcher: unified_attention_split_kv
tuning:
  num_splits: [4, 1, 2, 8, 16]
  block_m: [16, 32, 64]
  block_n: [32, 16, 64]
  num_warps: [4, 2, 8]
args:
  q: {shape: [TT, HQ, D], dtypes: [bf16, fp16, fp32], aliases: [query]}
  k_cache: {shape: [NB, PAGE, HKV, D], like: q, aliases: [key_cache]}
  v_cache: {shape: [NB, PAGE, HKV, D], like: q, aliases: [value_cache]}
  block_table: {shape: [S, '?'], dtypes: [int32], aliases: [block_tables]}
  cu_seqlens_q: {shape: [S + 1], dtypes: [int32], aliases: [query_start_loc, cu_seqlens]}
  seqused_k: {shape: [S], dtypes: [int32], aliases: [seq_lens, context_lens]}
  softmax_scale: {type: float, default: null, aliases: [scale, sm_scale, attn_scale]}
  max_seqlen_q: {type: int, default: null, aliases: [max_query_len]}
returns:
  - {name: out, shape: [TT, HQ, D], dtype: q}
problem:
  shapes: [{seq_lens: [1, 1, 1], context_lens: [40, 7, 0], num_heads_q: 4, num_heads_kv: 2, head_dim: 32}, {seq_lens: [5, 19], num_heads_q: 3, num_heads_kv: 1, head_dim: 24}]
  dtypes: [fp32, bf16]
  allow_tf32: true
measured:
  - {device: NVIDIA H200, shape: unified_attention/0, dtype: bf16, latency_us: 7540.5121, sol_fraction: 0.0058, date: '2026-12-03'}
  - {device: NVIDIA H200, shape: unified_attention/24, dtype: bf16, latency_us: 2133.28, sol_fraction: 0.0891, date: '2026-12-03'}
---
atrex30's unified_attention (causal GQA attention of packed varlen queries over a paged KV cache,
queries aligned to the end of their keys, fp32 softmax, output in q's dtype) with the key range of
every query block split across programs, for long contexts with few query rows (decode and chunked
prefill on long histories), where one program per (sequence, query block, head) walks thousands of
keys alone. Pass 1: program (sequence x query block, head, split) takes its share of the keys the
block can see (the causally visible range [0, kv_end) cut into num_splits runs of whole BLOCK_N
tiles, computed in the kernel, so no host sync), gathers K/V through the block table, runs the
online softmax (exp2, fp32 state, tensor-core QK^T and PV) and writes its normalised fp32 partial
output and its log2-sum-exp per row into a (num_splits, T, HQ, D) / (num_splits, T, HQ) workspace
(an empty split writes -inf). Pass 2, one program per (token, head), merges the splits: weights
2^(lse_s - max lse), out = sum_s w_s o_s / sum_s w_s, cast once. Bytes: Q, K, V as in the
unsplit kernel plus num_splits * T * HQ * (D + 1) * 8 B of workspace traffic, negligible for decode
(T = S) and costly for big prefill (use unified_attention_qblock there). Wins: num_splits times
more programs stream the cache. Limits: D <= 256, pow-2 pages; without max_seqlen_q the grid is
sized for the whole batch as one sequence (programs beyond a sequence's queries exit at once).
"""

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
        acc = tl.dot(a.to(b.dtype), b, acc)  # GPU: tensor-core MMA on the storage dtype
    return acc


@triton.jit
def _split_kv_partial_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, bt_ptr, cu_ptr, kvlen_ptr,
    T, HQ, head_dim, scale_log2e, q_blocks,
    stride_qt, stride_qh, stride_kb, stride_ks, stride_kh, stride_vb, stride_vs, stride_vh,
    stride_bts,
    GROUP_SIZE: tl.constexpr, PAGE_SIZE: tl.constexpr, NUM_SPLITS: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    seq = tl.program_id(0) // q_blocks
    q_block = tl.program_id(0) % q_blocks
    head = tl.program_id(1)
    split = tl.program_id(2)
    kv_head = head // GROUP_SIZE
    q_start = tl.load(cu_ptr + seq)
    q_len = tl.load(cu_ptr + seq + 1) - q_start
    kv_len = tl.load(kvlen_ptr + seq)
    if q_block * BLOCK_M >= q_len:
        return
    context_len = kv_len - q_len  # query i attends keys 0 .. context_len + i

    offs_m = q_block * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    mask_m = offs_m < q_len
    mask_d = offs_d < head_dim
    q_rows = (q_start + offs_m).to(tl.int64)
    q = tl.load(q_ptr + q_rows[:, None] * stride_qt + head * stride_qh + offs_d[None, :],
                mask=mask_m[:, None] & mask_d[None, :], other=0.0)  # fmt: skip

    # this split's share of the visible keys, in whole BLOCK_N tiles
    kv_end = tl.minimum(kv_len, context_len + (q_block + 1) * BLOCK_M)
    per_split = tl.cdiv(tl.cdiv(kv_end, NUM_SPLITS), BLOCK_N) * BLOCK_N
    lo = split * per_split
    hi = tl.minimum(lo + per_split, kv_end)

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    bt_row = bt_ptr + seq.to(tl.int64) * stride_bts
    for n_start in range(lo, hi, BLOCK_N):
        kv_pos = n_start + offs_n
        mask_n = kv_pos < hi
        page = tl.load(bt_row + kv_pos // PAGE_SIZE, mask=mask_n, other=0).to(tl.int64)
        slot = kv_pos % PAGE_SIZE
        kv_mask = mask_n[:, None] & mask_d[None, :]
        k = tl.load(k_ptr + page[:, None] * stride_kb + slot[:, None] * stride_ks
                    + kv_head * stride_kh + offs_d[None, :], mask=kv_mask, other=0.0)  # fmt: skip
        s = _mma(q, tl.trans(k), tl.zeros([BLOCK_M, BLOCK_N], tl.float32), UPCAST) * scale_log2e
        causal = (context_len + offs_m)[:, None] >= kv_pos[None, :]
        s = tl.where(causal & mask_n[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # rows with no visible key yet
        alpha = tl.exp2(m_i - m_safe)
        p = tl.exp2(s - m_safe[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(v_ptr + page[:, None] * stride_vb + slot[:, None] * stride_vs
                    + kv_head * stride_vh + offs_d[None, :], mask=kv_mask, other=0.0)  # fmt: skip
        acc = _mma(p, v, acc * alpha[:, None], UPCAST)
        m_i = m_new

    # normalised partial and its log2-sum-exp (-inf when this split saw no key for the row)
    seen = l_i > 0.0
    out = acc / tl.where(seen, l_i, 1.0)[:, None]
    lse = tl.where(seen, m_i + tl.log2(tl.where(seen, l_i, 1.0)), float("-inf"))
    base = (split * T + q_rows) * HQ + head
    tl.store(o_ptr + base[:, None] * head_dim + offs_d[None, :], out,
             mask=mask_m[:, None] & mask_d[None, :])  # fmt: skip
    tl.store(lse_ptr + base, lse, mask=mask_m)


@triton.jit
def _split_kv_merge_kernel(
    o_ptr, lse_ptr, out_ptr, T, HQ, head_dim, stride_ot, stride_oh,
    NUM_SPLITS: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    tok = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)
    s = tl.arange(0, BLOCK_S)
    d = tl.arange(0, BLOCK_D)
    ms = s < NUM_SPLITS
    base = (s * T + tok) * HQ + head
    lse = tl.load(lse_ptr + base, mask=ms, other=float("-inf"))
    top = tl.max(lse, axis=0)
    top = tl.where(top == float("-inf"), 0.0, top)
    w = tl.where(ms, tl.exp2(lse - top), 0.0)  # empty splits weigh 0
    parts = tl.load(o_ptr + base[:, None] * head_dim + d[None, :],
                    mask=ms[:, None] & (d < head_dim)[None, :], other=0.0)  # fmt: skip
    total = tl.sum(w, axis=0)
    out = tl.sum(parts * w[:, None], axis=0) / tl.where(total > 0.0, total, 1.0)
    tl.store(out_ptr + tok * stride_ot + head * stride_oh + d, out.to(out_ptr.dtype.element_ty),
             mask=d < head_dim)  # fmt: skip


def _validate(q, k_cache, v_cache, block_table, cu_seqlens_q, seqused_k) -> None:
    """Raise ValueError naming the shapes when the inputs do not fit together."""
    shapes = (f"q {tuple(q.shape)}, k_cache {tuple(k_cache.shape)}, v_cache {tuple(v_cache.shape)},"
              f" block_table {tuple(block_table.shape)}, cu_seqlens_q {tuple(cu_seqlens_q.shape)},"
              f" seqused_k {tuple(seqused_k.shape)}")  # fmt: skip
    if q.dim() != 3 or k_cache.dim() != 4 or k_cache.shape != v_cache.shape:
        raise ValueError(f"need q (T, HQ, D) and k/v caches (blocks, page, HKV, D); got {shapes}")
    num_seqs = block_table.shape[0]
    if cu_seqlens_q.shape != (num_seqs + 1,) or seqused_k.shape != (num_seqs,):
        raise ValueError(
            f"need cu_seqlens_q (S+1,) and seqused_k (S,) for S sequences; got {shapes}"
        )
    page_size, hkv, d = k_cache.shape[1:]
    if q.shape[2] != d or q.shape[1] % hkv != 0 or d > 256 or page_size & (page_size - 1):
        raise ValueError(f"need matching D <= 256, HQ % HKV == 0, pow-2 pages; got {shapes}")
    if not (q.dtype == k_cache.dtype == v_cache.dtype):
        raise ValueError(f"q, k_cache, v_cache dtypes differ: {q.dtype}, {k_cache.dtype}")
    if {block_table.dtype, cu_seqlens_q.dtype, seqused_k.dtype} != {torch.int32}:
        raise ValueError("block_table, cu_seqlens_q and seqused_k must be int32")


def unified_attention_split_kv(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_table: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    seqused_k: torch.Tensor,
    softmax_scale: float | None = None,
    max_seqlen_q: int | None = None,
    *,
    num_splits: int = 4,
    block_m: int = 16,
    block_n: int = 32,
    num_warps: int = 4,
) -> torch.Tensor:
    """Return causal attention of packed queries against a paged KV cache.

    Args:
        q: (sum(q_lens), HQ, D) bf16/fp16/fp32, sequences packed back to back.
        k_cache: (num_blocks, page_size, HKV, D), same dtype; page_size a power of two (16).
        v_cache: (num_blocks, page_size, HKV, D), same dtype.
        block_table: (S, max_blocks) int32, logical page -> physical page per sequence.
        cu_seqlens_q: (S+1,) int32 prefix sums of the query lengths.
        seqused_k: (S,) int32 key lengths, each >= that sequence's query length.
        softmax_scale: Score scale; None means 1/sqrt(D).
        max_seqlen_q: Longest query length; None sizes the grid for all T tokens in one sequence.
        num_splits: Key-range partitions per query block (>= 1).
        block_m: Query rows per program (power of two >= 16).
        block_n: Keys per loop step (power of two >= 16).
        num_warps: Warps per program.

    Returns:
        (sum(q_lens), HQ, D) tensor of q's dtype.

    Raises:
        ValueError: Shapes, dtypes, head counts or tuning values do not fit.
    """
    _validate(q, k_cache, v_cache, block_table, cu_seqlens_q, seqused_k)
    if num_splits < 1:
        raise ValueError(f"num_splits must be >= 1; got {num_splits}")
    for name, value in (("block_m", block_m), ("block_n", block_n)):
        if value < 16 or value & (value - 1):
            raise ValueError(f"{name} must be a power of two >= 16; got {value}")
    if q.stride(2) != 1 or k_cache.stride(3) != 1 or v_cache.stride(3) != 1:
        raise ValueError("q, k_cache and v_cache need a contiguous last (D) axis")
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    num_seqs, (t, hq, d), (_, page_size, hkv, _) = block_table.shape[0], q.shape, k_cache.shape
    max_q = max_seqlen_q if max_seqlen_q is not None else t
    if t == 0 or max_q == 0 or num_seqs == 0:
        return out
    scale = softmax_scale if softmax_scale is not None else d**-0.5
    block_d = max(16, triton.next_power_of_2(d))
    partial = torch.empty((num_splits, t, hq, d), dtype=torch.float32, device=q.device)
    lse = torch.empty((num_splits, t, hq), dtype=torch.float32, device=q.device)
    q_blocks = triton.cdiv(max_q, block_m)
    _split_kv_partial_kernel[(num_seqs * q_blocks, hq, num_splits)](
        q, k_cache, v_cache, partial, lse, block_table, cu_seqlens_q, seqused_k,
        t, hq, d, scale * 1.4426950408889634, q_blocks,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), block_table.stride(0),
        GROUP_SIZE=hq // hkv, PAGE_SIZE=page_size, NUM_SPLITS=num_splits,
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=block_d,
        UPCAST=os.environ.get("TRITON_INTERPRET") == "1", num_warps=num_warps,
    )  # fmt: skip
    _split_kv_merge_kernel[(t, hq)](
        partial, lse, out, t, hq, d, out.stride(0), out.stride(1),
        NUM_SPLITS=num_splits, BLOCK_S=triton.next_power_of_2(num_splits), BLOCK_D=block_d,
    )  # fmt: skip
    return out


def reference(
    q, k_cache, v_cache, block_table, cu_seqlens_q, seqused_k, softmax_scale=None, max_seqlen_q=None
):
    """Gather each sequence's K/V from the cache and run masked softmax attention in fp32."""
    out = torch.empty_like(q)
    page_size, hkv, d = k_cache.shape[1:]
    group = q.shape[1] // hkv
    scale = softmax_scale if softmax_scale is not None else d**-0.5
    for s in range(block_table.shape[0]):
        q0, q1 = int(cu_seqlens_q[s]), int(cu_seqlens_q[s + 1])
        kv_len = int(seqused_k[s])
        pos = torch.arange(kv_len, device=q.device)
        pages = block_table[s, pos // page_size].long()
        k = k_cache[pages, pos % page_size].float().repeat_interleave(group, dim=1)  # (L, HQ, D)
        v = v_cache[pages, pos % page_size].float().repeat_interleave(group, dim=1)
        qs = q[q0:q1].float()
        scores = torch.einsum("qhd,khd->hqk", qs, k) * scale
        q_pos = kv_len - (q1 - q0) + torch.arange(q1 - q0, device=q.device)
        scores = scores.masked_fill(pos[None, None, :] > q_pos[None, :, None], float("-inf"))
        out[q0:q1] = torch.einsum("hqk,khd->qhd", scores.softmax(-1), v).to(q.dtype)
    return out


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return a packed prefill batch over a shuffled paged cache.

    ``shape``: ``seq_lens`` (list of query lengths), ``num_heads_q``, ``num_heads_kv``,
    ``head_dim``, optional ``context_lens`` (cached tokens before each query, default 0) and
    ``page_size`` (16).
    """
    q_lens = list(shape["seq_lens"])
    ctx = list(shape.get("context_lens", [0] * len(q_lens)))
    hq, hkv, d = shape["num_heads_q"], shape["num_heads_kv"], shape["head_dim"]
    page_size = shape.get("page_size", 16)
    kv_lens = [a + b for a, b in zip(q_lens, ctx, strict=True)]
    pages_per_seq = [triton.cdiv(n, page_size) for n in kv_lens]
    max_pages = max(max(pages_per_seq), 1)
    num_blocks = sum(pages_per_seq) + 4  # a few spare pages nobody points at
    # physical pages handed out in a shuffled order so the gather is really exercised
    perm = torch.randperm(num_blocks, device=device).to(torch.int32)
    block_table = torch.zeros((len(q_lens), max_pages), dtype=torch.int32, device=device)
    start = 0
    for i, n in enumerate(pages_per_seq):
        block_table[i, :n] = perm[start : start + n]
        start += n
    cu = torch.zeros(len(q_lens) + 1, dtype=torch.int32, device=device)
    cu[1:] = torch.tensor(q_lens, device=device).cumsum(0)
    return {
        "q": torch.randn(sum(q_lens), hq, d, device=device).to(dtype),
        "k_cache": torch.randn(num_blocks, page_size, hkv, d, device=device).to(dtype),
        "v_cache": torch.randn(num_blocks, page_size, hkv, d, device=device).to(dtype),
        "block_table": block_table,
        "cu_seqlens_q": cu,
        "seqused_k": torch.tensor(kv_lens, dtype=torch.int32, device=device),
    }
