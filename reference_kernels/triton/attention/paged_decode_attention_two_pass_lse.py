"""
---
id: paged_decode_attention_two_pass_lse
title: Paged split-KV decode, GQA-packed partitions writing (normalised out, LSE) and an LSE reduce
op_family: attention
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [paged-kv-gather, split-kv, flash-decoding, lse-merge, gqa-packing, tensor-core-mma]
status: reference
launcher: paged_decode_attention_two_pass_lse
tuning:
  partition_tokens: [256, 64, 128, 512]
  num_warps: [4, 2, 8]
args:
  query: {shape: [S, HQ, D], dtypes: [bf16, fp16, fp32], aliases: [q]}
  k_cache: {shape: [NB, HKV, '?', PAGE, '?'], like: query, aliases: [key_cache]}
  v_cache: {shape: [NB, HKV, D, PAGE], like: query, aliases: [value_cache]}
  block_tables: {shape: [S, '?'], dtypes: [int32], aliases: [block_table]}
  seq_lens: {shape: [S], dtypes: [int32], aliases: [context_lens, seqused_k]}
  softmax_scale: {type: float, default: null, aliases: [scale, sm_scale, attn_scale]}
returns:
  - {name: out, shape: [S, HQ, D], dtype: query}
problem:
  shapes: [{seq_lens: [37, 5, 16], num_heads_q: 6, num_heads_kv: 2, head_dim: 64}, {seq_lens: [20], num_heads_q: 3, num_heads_kv: 3, head_dim: 32, page_size: 8}]
  dtypes: [fp32, bf16]
  allow_tf32: true
  atol: 0.02
  rtol: 0.02
measured:
  - {device: NVIDIA H200, shape: paged_attention_decode/0, dtype: bf16, latency_us: 105.984, sol_fraction: 0.3032, date: '2026-12-03'}
---
Decode attention (one query token per sequence, GQA) over vLLM's paged cache (k_cache (blocks,
HKV, D / x, PAGE, x) with x = 16 bytes / itemsize, v_cache (blocks, HKV, D, PAGE)), split over the
KV length in the flash-decoding style. Pass 1: the grid is (sequence, KV head, partition); a
sequence of L tokens has ceil(L / PARTITION) partitions of a fixed PARTITION tokens (programs past
its end exit at once, so the partition count varies per sequence under one grid); each program
packs the GROUP query heads of its KV head into the rows of a tensor-core tile, runs an online
softmax over its partition's pages (each K/V byte read once per KV head) and writes, per query head,
its *normalised* partial output o_p = acc / l and its log-sum-exp lse_p = m + log2(l) (log2
domain) to fp32 workspaces. Pass 2, one program per (sequence, query head), visits only that
sequence's ceil(L / PARTITION) partitions, a block at a time with a running max, and returns
sum_p 2^(lse_p - M) o_p / sum_p 2^(lse_p - M). Storing (o_p, lse_p) instead of (acc, m, l) makes
each partial a self-contained attention result (mergeable in any order, e.g. with a prefix cache's
own partial). Bytes: K and V once per KV head plus (D + 1) x 4 B written and read per (head,
partition). When it wins: few sequences with long contexts, where S x HKV programs cannot fill
the SMs. Limits: the workspace is sized by block_tables' width (no host sync); PARTITION a power of
two >= 16 and a multiple of the pages per step; GROUP <= 64; D <= 256 and a multiple of x.
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
def _paged_partition_kernel(
    q_ptr, k_cache_ptr, v_cache_ptr, part_out_ptr, part_lse_ptr, block_tables_ptr, seq_lens_ptr,
    HQ, head_dim, max_parts, scale_log2e,
    stride_qs, stride_qh, stride_bts,
    stride_kb, stride_kh, stride_kx, stride_kt,  # k_cache (NB, HKV, D / x, PAGE, x)
    stride_vb, stride_vh, stride_vd, stride_vt,  # v_cache (NB, HKV, D, PAGE)
    GROUP_SIZE: tl.constexpr, BLOCK_G: tl.constexpr, X: tl.constexpr, PAGE_SIZE: tl.constexpr,
    BLOCK_N: tl.constexpr, PARTITION: tl.constexpr, BLOCK_D: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    part = tl.program_id(2)
    seq_len = tl.load(seq_lens_ptr + seq)
    lo = part * PARTITION
    if lo < seq_len:
        hi = tl.minimum(seq_len, lo + PARTITION)
        offs_g = tl.arange(0, BLOCK_G)
        offs_n = tl.arange(0, BLOCK_N)
        offs_d = tl.arange(0, BLOCK_D)
        mask_g = offs_g < GROUP_SIZE
        mask_d = offs_d < head_dim
        heads = kv_head * GROUP_SIZE + offs_g
        q = tl.load(q_ptr + seq * stride_qs + heads[:, None] * stride_qh + offs_d[None, :],
                    mask=mask_g[:, None] & mask_d[None, :], other=0.0)  # fmt: skip
        m_i = tl.full([BLOCK_G], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_G], tl.float32)
        acc = tl.zeros([BLOCK_G, BLOCK_D], tl.float32)
        bt_row = block_tables_ptr + seq.to(tl.int64) * stride_bts
        k_dim = (offs_d // X) * stride_kx + offs_d % X  # split-x key offsets of dimension d
        for n_start in range(lo, hi, BLOCK_N):
            pos = n_start + offs_n
            mask_n = pos < hi
            page = tl.load(bt_row + pos // PAGE_SIZE, mask=mask_n, other=0).to(tl.int64)
            row = pos % PAGE_SIZE
            k_base = k_cache_ptr + page * stride_kb + kv_head * stride_kh + row * stride_kt
            k_t = tl.load(
                k_base[None, :] + k_dim[:, None], mask=mask_d[:, None] & mask_n[None, :], other=0.0
            )  # (D, N) = K^T
            s = _mma(q, k_t, tl.zeros([BLOCK_G, BLOCK_N], tl.float32), UPCAST) * scale_log2e
            s = tl.where(mask_n[None, :], s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, axis=1))  # finite: each step has a valid token
            alpha = tl.exp2(m_i - m_new)
            p = tl.exp2(s - m_new[:, None])
            l_i = l_i * alpha + tl.sum(p, axis=1)
            v_base = v_cache_ptr + page * stride_vb + kv_head * stride_vh + row * stride_vt
            v = tl.load(
                v_base[:, None] + offs_d[None, :] * stride_vd,
                mask=mask_n[:, None] & mask_d[None, :],
                other=0.0,
            )  # (N, D)
            acc = _mma(p, v, acc * alpha[:, None], UPCAST)
            m_i = m_new
        # a self-contained partial: normalised output and its log2-sum-exp (l >= 1 here)
        slot = (seq * HQ + heads).to(tl.int64) * max_parts + part
        tl.store(part_out_ptr + slot[:, None] * BLOCK_D + offs_d[None, :],
                 acc / l_i[:, None], mask=mask_g[:, None])  # fmt: skip
        tl.store(part_lse_ptr + slot, m_i + tl.log2(l_i), mask=mask_g)


@triton.jit
def _lse_reduce_kernel(
    part_out_ptr, part_lse_ptr, out_ptr, seq_lens_ptr, HQ, head_dim, max_parts,
    stride_os, stride_oh,
    PARTITION: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    seq = tl.program_id(0)
    head = tl.program_id(1)
    n_parts = tl.cdiv(tl.load(seq_lens_ptr + seq), PARTITION)  # only this sequence's partitions
    offs_p = tl.arange(0, BLOCK_P)
    offs_d = tl.arange(0, BLOCK_D)
    base = (seq * HQ + head).to(tl.int64) * max_parts
    m_run = float("-inf")
    w_run = 0.0
    acc = tl.zeros([BLOCK_D], tl.float32)
    for p0 in range(0, n_parts, BLOCK_P):
        parts = p0 + offs_p
        mask_p = parts < n_parts
        lse = tl.load(part_lse_ptr + base + parts, mask=mask_p, other=float("-inf"))
        m_new = tl.maximum(m_run, tl.max(lse, axis=0))  # finite: the block has a partition
        alpha = tl.exp2(m_run - m_new)
        w = tl.exp2(lse - m_new)  # 0 for masked partitions
        o = tl.load(part_out_ptr + (base + parts)[:, None] * BLOCK_D + offs_d[None, :],
                    mask=mask_p[:, None], other=0.0)  # fmt: skip
        acc = acc * alpha + tl.sum(o * w[:, None], axis=0)
        w_run = w_run * alpha + tl.sum(w, axis=0)
        m_run = m_new
    out = acc / tl.where(w_run > 0.0, w_run, 1.0)  # seq_len 0 writes zeros
    tl.store(out_ptr + seq * stride_os + head * stride_oh + offs_d,
             out.to(out_ptr.dtype.element_ty), mask=offs_d < head_dim)  # fmt: skip


def _validate(query, k_cache, v_cache, block_tables, seq_lens) -> None:
    """Raise ValueError naming the shapes when the inputs do not fit together."""
    shapes = (f"query {tuple(query.shape)}, k_cache {tuple(k_cache.shape)}, v_cache"
              f" {tuple(v_cache.shape)}, block_tables {tuple(block_tables.shape)},"
              f" seq_lens {tuple(seq_lens.shape)}")  # fmt: skip
    if query.dim() != 3 or k_cache.dim() != 5 or v_cache.dim() != 4:
        raise ValueError(
            "need query (S, HQ, D), k_cache (blocks, HKV, D / x, page, x) and v_cache"
            f" (blocks, HKV, D, page); got {shapes}"
        )
    if not (query.dtype == k_cache.dtype == v_cache.dtype):
        raise ValueError(f"query, k_cache, v_cache dtypes differ; got {shapes}")
    s, hq, d = query.shape
    nb, hkv, dx, page, x = k_cache.shape
    if x * query.element_size() != 16 or dx * x != d or tuple(v_cache.shape) != (nb, hkv, d, page):
        raise ValueError(
            f"need the split-x key layout (x = 16 / itemsize) and D matching; {shapes}"
        )
    if hq % hkv or hq // hkv > 64 or d > 256 or page & (page - 1):
        raise ValueError(f"need HQ % HKV == 0, group <= 64, D <= 256, pow-2 pages; got {shapes}")
    if block_tables.dim() != 2 or block_tables.shape[0] != s or seq_lens.shape != (s,):
        raise ValueError(f"need block_tables (S, max_blocks) and seq_lens (S,); got {shapes}")
    if block_tables.dtype != torch.int32 or seq_lens.dtype != torch.int32:
        raise ValueError("block_tables and seq_lens must be int32")
    if query.stride(2) != 1 or k_cache.stride(4) != 1:
        raise ValueError("query's head_dim axis and k_cache's x axis must be contiguous")


def paged_decode_attention_two_pass_lse(
    query: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    softmax_scale: float | None = None,
    *,
    partition_tokens: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return one-token-per-sequence GQA attention over a split-x paged cache, split over the KV.

    Args:
        query: (S, HQ, D) bf16/fp16/fp32, last axis contiguous.
        k_cache: (num_blocks, HKV, D / x, page_size, x), x = 16 / itemsize, same dtype.
        v_cache: (num_blocks, HKV, D, page_size), same dtype.
        block_tables: (S, max_blocks) int32, logical page -> physical page.
        seq_lens: (S,) int32 cached tokens per sequence (<= max_blocks * page_size).
        softmax_scale: Score scale; None means 1/sqrt(D).
        partition_tokens: Tokens per partition (power of two >= 16); None = 256.
        num_warps: Warps per program; None = 4.

    Returns:
        (S, HQ, D) tensor of query's dtype.

    Raises:
        ValueError: Shapes, dtypes, layouts, head counts or the partition size do not fit.
    """
    _validate(query, k_cache, v_cache, block_tables, seq_lens)
    s, hq, d = query.shape
    _, hkv, _, page, x = k_cache.shape
    out = torch.empty_like(query)
    if s == 0:
        return out
    partition = partition_tokens or 256
    block_n = max(16, page)
    if partition & (partition - 1) or partition < block_n:
        raise ValueError(f"partition_tokens must be a power of two >= {block_n}; got {partition}")
    max_parts = max(1, triton.cdiv(block_tables.shape[1] * page, partition))
    group = hq // hkv
    block_d = max(16, triton.next_power_of_2(d))
    part_out = torch.empty((s * hq * max_parts, block_d), dtype=torch.float32, device=query.device)
    part_lse = torch.empty((s * hq * max_parts,), dtype=torch.float32, device=query.device)
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(d)
    warps = num_warps or 4
    _paged_partition_kernel[(s, hkv, max_parts)](
        query, k_cache, v_cache, part_out, part_lse, block_tables, seq_lens,
        hq, d, max_parts, scale * 1.4426950408889634,
        query.stride(0), query.stride(1), block_tables.stride(0),
        *k_cache.stride()[:4], *v_cache.stride(),
        GROUP_SIZE=group, BLOCK_G=max(16, triton.next_power_of_2(group)), X=x, PAGE_SIZE=page,
        BLOCK_N=block_n, PARTITION=partition, BLOCK_D=block_d,
        UPCAST=os.environ.get("TRITON_INTERPRET") == "1", num_warps=warps,
    )  # fmt: skip
    _lse_reduce_kernel[(s, hq)](
        part_out, part_lse, out, seq_lens, hq, d, max_parts, out.stride(0), out.stride(1),
        PARTITION=partition, BLOCK_P=min(16, triton.next_power_of_2(max_parts)), BLOCK_D=block_d,
        num_warps=warps,
    )  # fmt: skip
    return out


def reference(query, k_cache, v_cache, block_tables, seq_lens, softmax_scale=None):
    """Un-tile the split-x keys, gather each sequence's pages and attend in fp32."""
    s, hq, d = query.shape
    _, hkv, _, page, _ = k_cache.shape
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(d)
    keys = k_cache.permute(0, 1, 3, 2, 4).reshape(*k_cache.shape[:2], page, d)  # (NB, HKV, P, D)
    values = v_cache.transpose(2, 3)  # (NB, HKV, P, D)
    out = torch.empty_like(query)
    for i in range(s):
        pos = torch.arange(int(seq_lens[i]), device=query.device)
        pages = block_tables[i, pos // page].long()
        k = keys[pages, :, pos % page].float().repeat_interleave(hq // hkv, 1)  # (L, HQ, D)
        v = values[pages, :, pos % page].float().repeat_interleave(hq // hkv, 1)
        p = (torch.einsum("hd,lhd->hl", query[i].float(), k) * scale).softmax(-1)
        out[i] = torch.einsum("hl,lhd->hd", p, v).to(query.dtype)
    return out


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return decode queries and a shuffled split-x paged cache.

    ``shape``: ``seq_lens`` (list of cached lengths, >= 1), ``num_heads_q``, ``num_heads_kv``,
    ``head_dim``, optional ``page_size`` (16).
    """
    lens = list(shape["seq_lens"])
    hq, hkv, d = shape["num_heads_q"], shape["num_heads_kv"], shape["head_dim"]
    page = shape.get("page_size", 16)
    x = 16 // torch.empty((), dtype=dtype).element_size()
    pages_per_seq = [triton.cdiv(n, page) for n in lens]
    num_blocks = sum(pages_per_seq) + 3  # spare pages nobody points at
    perm = torch.randperm(num_blocks, device=device).to(torch.int32)  # shuffled physical pages
    block_tables = torch.zeros((len(lens), max(pages_per_seq)), dtype=torch.int32, device=device)
    start = 0
    for i, n in enumerate(pages_per_seq):
        block_tables[i, :n] = perm[start : start + n]
        start += n
    return {
        "query": torch.randn(len(lens), hq, d, device=device).to(dtype),
        "k_cache": torch.randn(num_blocks, hkv, d // x, page, x, device=device).to(dtype),
        "v_cache": torch.randn(num_blocks, hkv, d, page, device=device).to(dtype),
        "block_tables": block_tables,
        "seq_lens": torch.tensor(lens, dtype=torch.int32, device=device),
    }
