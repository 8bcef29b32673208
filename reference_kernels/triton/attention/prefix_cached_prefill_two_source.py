"""
---
id: prefix_cached_prefill_two_source
title: Prefill over a paged cached prefix then the new dense K/V, two loops sharing one softmax
op_family: attention
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: compute
techniques: [prefix-caching, paged-kv-gather, two-source-kv, online-softmax, causal-tile-bound,
             gqa-head-mapping, fp32-accumulate, exp2-softmax]
status: reference
launcher: prefix_cached_prefill_two_source
tuning:
  block_m: [64, 16, 32, 128]
  block_n: [32, 16, 64]
  num_warps: [4, 2, 8]
args:
  q: {shape: [TT, HQ, D], dtypes: [bf16, fp16, fp32], aliases: [query]}
  k: {shape: [TT, HKV, D], like: q, aliases: [key]}
  v: {shape: [TT, HKV, D], like: q, aliases: [value]}
  cu_seqlens_q: {shape: ['?'], dtypes: [int32], aliases: [cu_seqlens, query_start_loc]}
  k_cache: {shape: [NB, PAGE, HKV, D], like: q, aliases: [key_cache]}
  v_cache: {shape: [NB, PAGE, HKV, D], like: q, aliases: [value_cache]}
  block_table: {shape: ['?', '?'], dtypes: [int32], aliases: [block_tables]}
  prefix_lens: {shape: ['?'], dtypes: [int32], aliases: [context_lens, cached_lens]}
  softmax_scale: {type: float, default: null, aliases: [scale, sm_scale, attn_scale]}
  max_seqlen_q: {type: int, default: null, aliases: [max_query_len]}
returns:
  - {name: out, shape: [TT, HQ, D], dtype: q}
problem:
  shapes: [{new_lens: [5, 20], prefix_lens: [37, 0], num_heads_q: 4, num_heads_kv: 2, head_dim: 24}, {new_lens: [17], prefix_lens: [16], num_heads_q: 3, num_heads_kv: 1, head_dim: 16}]
  dtypes: [fp32, bf16]
  allow_tf32: true
  atol: 0.02
  rtol: 0.02
measured: []
---
Prefill with prefix caching (vLLM / SGLang radix cache hits, multi-turn chat): each sequence's
first prefix_lens[s] tokens are already in the paged cache (blocks, page, HKV, D) and only its new
tokens arrive as dense packed q, k, v (total new tokens, heads, D) with cu_seqlens_q; the new
K/V need not be written to the cache first. Program (sequence, q block, head) keeps ONE online
softmax state (fp32 max, sum and accumulator, exp2 domain) across two key loops: loop 1 gathers
the cached prefix through the block table, masked only by the prefix length (every new query sees
the whole prefix, no causal test); loop 2 reads the new keys contiguously, causal among the new
tokens and stopping at the block's last diagonal. Two specialised loops replace one loop with a
per-tile branch between a gather and a dense load. Bytes: Q and O once, the prefix once per (q
block, head) through 16-token pages, the new K/V causal prefix once per (q block, head). Limits:
without max_seqlen_q the grid is sized by the total new-token count (surplus programs exit at
once, no host sync); page size a power of two; head_dim <= 256; GQA groups re-read K/V (from L2).
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
def _step(q, acc, m_i, l_i, k, v, valid, scale_log2e, BLOCK_M: tl.constexpr,
          BLOCK_N: tl.constexpr, UPCAST: tl.constexpr):  # fmt: skip
    """One online-softmax step over a (BLOCK_N, D) K/V tile with a (BLOCK_M, BLOCK_N) mask."""
    s = _mma(q, tl.trans(k), tl.zeros([BLOCK_M, BLOCK_N], tl.float32), UPCAST) * scale_log2e
    s = tl.where(valid, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.exp2(m_i - m_safe)
    p = tl.exp2(s - m_safe[:, None])
    l_i = l_i * alpha + tl.sum(p, axis=1)
    acc = _mma(p, v, acc * alpha[:, None], UPCAST)
    return acc, m_new, l_i


@triton.jit
def _prefix_two_source_kernel(
    q_ptr, k_ptr, v_ptr, k_cache_ptr, v_cache_ptr, out_ptr, cu_seqlens_q_ptr, block_table_ptr,
    prefix_lens_ptr, scale_log2e,
    stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh,
    stride_cb, stride_cs, stride_ch, stride_db, stride_ds, stride_dh, stride_ot, stride_oh,
    stride_bts,
    GROUP_SIZE: tl.constexpr, PAGE_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    seq = tl.program_id(0)
    m0 = tl.program_id(1) * BLOCK_M
    head = tl.program_id(2)
    kv_head = head // GROUP_SIZE
    q_start = tl.load(cu_seqlens_q_ptr + seq)
    q_len = tl.load(cu_seqlens_q_ptr + seq + 1) - q_start
    if m0 >= q_len:
        return
    prefix_len = tl.load(prefix_lens_ptr + seq)
    offs_m = m0 + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    mask_m = offs_m < q_len
    mask_d = offs_d < HEAD_DIM
    rows = (q_start + offs_m).to(tl.int64)
    q = tl.load(q_ptr + rows[:, None] * stride_qt + head * stride_qh + offs_d[None, :],
                mask=mask_m[:, None] & mask_d[None, :], other=0.0)  # fmt: skip
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    all_rows = offs_m[:, None] >= 0  # (BLOCK_M, 1) all-true

    # loop 1: the cached prefix, gathered through the block table; no causal test
    bt_row = block_table_ptr + seq.to(tl.int64) * stride_bts
    for n_start in range(0, prefix_len, BLOCK_N):
        pos = n_start + offs_n
        mask_n = pos < prefix_len
        page = tl.load(bt_row + pos // PAGE_SIZE, mask=mask_n, other=0).to(tl.int64)
        slot = pos % PAGE_SIZE
        kv_mask = mask_n[:, None] & mask_d[None, :]
        k = tl.load(
            k_cache_ptr
            + page[:, None] * stride_cb
            + slot[:, None] * stride_cs
            + kv_head * stride_ch
            + offs_d[None, :],
            mask=kv_mask,
            other=0.0,
        )
        v = tl.load(
            v_cache_ptr
            + page[:, None] * stride_db
            + slot[:, None] * stride_ds
            + kv_head * stride_dh
            + offs_d[None, :],
            mask=kv_mask,
            other=0.0,
        )
        acc, m_i, l_i = _step(q, acc, m_i, l_i, k, v, all_rows & mask_n[None, :], scale_log2e,
                              BLOCK_M, BLOCK_N, UPCAST)  # fmt: skip

    # loop 2: the new tokens' dense K/V, causal, up to the block's last diagonal
    new_end = tl.minimum(q_len, m0 + BLOCK_M)
    k_base = k_ptr + q_start.to(tl.int64) * stride_kt + kv_head * stride_kh + offs_d[None, :]
    v_base = v_ptr + q_start.to(tl.int64) * stride_vt + kv_head * stride_vh + offs_d[None, :]
    for n_start in range(0, new_end, BLOCK_N):
        pos = n_start + offs_n
        mask_n = pos < new_end
        kv_mask = mask_n[:, None] & mask_d[None, :]
        k = tl.load(k_base + pos[:, None].to(tl.int64) * stride_kt, mask=kv_mask, other=0.0)
        v = tl.load(v_base + pos[:, None].to(tl.int64) * stride_vt, mask=kv_mask, other=0.0)
        valid = (offs_m[:, None] >= pos[None, :]) & mask_n[None, :]
        acc, m_i, l_i = _step(q, acc, m_i, l_i, k, v, valid, scale_log2e,
                              BLOCK_M, BLOCK_N, UPCAST)  # fmt: skip

    out = acc / tl.where(l_i > 0.0, l_i, 1.0)[:, None]
    tl.store(out_ptr + rows[:, None] * stride_ot + head * stride_oh + offs_d[None, :],
             out.to(out_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_d[None, :])  # fmt: skip


def _interpreting() -> bool:
    """Return whether Triton runs in its CPU interpreter (it then needs fp32 tl.dot operands)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def _validate(q, k, v, cu_seqlens_q, k_cache, v_cache, block_table, prefix_lens) -> None:
    """Raise ValueError naming the shapes when the inputs do not fit together."""
    shapes = (f"q {tuple(q.shape)}, k {tuple(k.shape)}, k_cache {tuple(k_cache.shape)},"
              f" block_table {tuple(block_table.shape)}, cu_seqlens_q {tuple(cu_seqlens_q.shape)},"
              f" prefix_lens {tuple(prefix_lens.shape)}")  # fmt: skip
    if q.dim() != 3 or k.shape != v.shape or k.dim() != 3 or k_cache.dim() != 4:
        raise ValueError(
            f"need q (T, HQ, D), k, v (T, HKV, D), caches (NB, page, HKV, D); {shapes}"
        )
    if k_cache.shape != v_cache.shape or block_table.dim() != 2:
        raise ValueError(f"need k_cache and v_cache alike and a 2-D block_table; got {shapes}")
    total, hq, d = q.shape
    page, hkv = k_cache.shape[1], k_cache.shape[2]
    if k.shape[0] != total or k.shape[1:] != (hkv, d) or k_cache.shape[3] != d:
        raise ValueError(f"need k, v (T, HKV, D) matching q and the caches; got {shapes}")
    if hq % hkv or d > 256 or page & (page - 1):
        raise ValueError(f"need HQ % HKV == 0, D <= 256, pow-2 pages; got {shapes}")
    s = block_table.shape[0]
    if cu_seqlens_q.shape != (s + 1,) or prefix_lens.shape != (s,):
        raise ValueError(f"need cu_seqlens_q (S+1,) and prefix_lens (S,); got {shapes}")
    if not (q.dtype == k.dtype == v.dtype == k_cache.dtype == v_cache.dtype):
        raise ValueError(f"q, k, v and the caches need one dtype; got {q.dtype}, {k_cache.dtype}")
    if {cu_seqlens_q.dtype, block_table.dtype, prefix_lens.dtype} != {torch.int32}:
        raise ValueError("cu_seqlens_q, block_table and prefix_lens must be int32")
    if any(t.stride(-1) != 1 for t in (q, k, v, k_cache, v_cache)):
        raise ValueError(f"q, k, v and the caches need a contiguous last (head) dim; {shapes}")


def prefix_cached_prefill_two_source(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_table: torch.Tensor,
    prefix_lens: torch.Tensor,
    softmax_scale: float | None = None,
    max_seqlen_q: int | None = None,
    *,
    block_m: int = 64,
    block_n: int = 32,
    num_warps: int = 4,
) -> torch.Tensor:
    """Return attention of new tokens over their cached prefix and, causally, each other.

    Args:
        q: (T, HQ, D) bf16/fp16/fp32, the new tokens packed back to back.
        k: (T, HKV, D), same dtype, the new tokens' keys; HQ % HKV == 0.
        v: (T, HKV, D), same dtype.
        cu_seqlens_q: (S+1,) int32 prefix sums of the new-token counts.
        k_cache: (num_blocks, page_size, HKV, D), same dtype, holding the cached prefixes.
        v_cache: (num_blocks, page_size, HKV, D), same dtype.
        block_table: (S, max_pages) int32, logical prefix page -> physical page.
        prefix_lens: (S,) int32 cached tokens per sequence.
        softmax_scale: Score scale; None means 1/sqrt(D).
        max_seqlen_q: Most new tokens in a sequence (sizes the grid); None uses T.
        block_m: Query rows per program (power of two >= 16).
        block_n: Keys per loop step (power of two >= 16).
        num_warps: Warps per program.

    Returns:
        (T, HQ, D) tensor of q's dtype.

    Raises:
        ValueError: Shapes, dtypes, strides or head counts do not fit together.
    """
    _validate(q, k, v, cu_seqlens_q, k_cache, v_cache, block_table, prefix_lens)
    out = torch.empty_like(q)
    (total, hq, d), page, hkv = q.shape, k_cache.shape[1], k_cache.shape[2]
    num_seqs = block_table.shape[0]
    bound = max_seqlen_q if max_seqlen_q is not None else total
    if total == 0 or num_seqs == 0 or bound == 0:
        return out
    scale = softmax_scale if softmax_scale is not None else d**-0.5
    _prefix_two_source_kernel[(num_seqs, triton.cdiv(bound, block_m), hq)](
        q, k, v, k_cache, v_cache, out, cu_seqlens_q, block_table, prefix_lens,
        scale * 1.4426950408889634,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
        out.stride(0), out.stride(1), block_table.stride(0),
        GROUP_SIZE=hq // hkv, PAGE_SIZE=page, HEAD_DIM=d,
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=max(16, triton.next_power_of_2(d)),
        UPCAST=_interpreting(), num_warps=num_warps,
    )  # fmt: skip
    return out


def reference(
    q, k, v, cu_seqlens_q, k_cache, v_cache, block_table, prefix_lens, softmax_scale=None,
    max_seqlen_q=None,
):  # fmt: skip
    """Concatenate each sequence's gathered prefix and new K/V; fp32 causal attention."""
    page, hkv, d = k_cache.shape[1:]
    group = q.shape[1] // hkv
    scale = softmax_scale if softmax_scale is not None else d**-0.5
    out = torch.empty_like(q)
    for s in range(block_table.shape[0]):
        a, b, p = int(cu_seqlens_q[s]), int(cu_seqlens_q[s + 1]), int(prefix_lens[s])
        pos = torch.arange(p, device=q.device)
        pages = block_table[s, pos // page].long()
        ks = torch.cat([k_cache[pages, pos % page], k[a:b]]).float().repeat_interleave(group, 1)
        vs = torch.cat([v_cache[pages, pos % page], v[a:b]]).float().repeat_interleave(group, 1)
        scores = torch.einsum("qhd,khd->hqk", q[a:b].float(), ks) * scale
        q_pos = p + torch.arange(b - a, device=q.device)
        k_pos = torch.arange(p + b - a, device=q.device)
        scores = scores.masked_fill(k_pos[None, None, :] > q_pos[None, :, None], -torch.inf)
        out[a:b] = torch.einsum("hqk,khd->qhd", scores.softmax(-1), vs).to(q.dtype)
    return out


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return new tokens (packed q, k, v) and cached prefixes in a shuffled paged cache.

    ``shape``: ``new_lens`` and ``prefix_lens`` (lists), ``num_heads_q``, ``num_heads_kv``,
    ``head_dim``, optional ``page`` (16).
    """
    new, pre = list(shape["new_lens"]), list(shape["prefix_lens"])
    hq, hkv, d, page = (
        shape["num_heads_q"],
        shape["num_heads_kv"],
        shape["head_dim"],
        shape.get("page", 16),
    )
    width = max(1, max(triton.cdiv(n, page) for n in pre))
    nb = len(pre) * width
    cu = torch.zeros(len(new) + 1, dtype=torch.int32, device=device)
    cu[1:] = torch.tensor(new, device=device).cumsum(0)
    return {
        "q": torch.randn(sum(new), hq, d, device=device).to(dtype),
        "k": torch.randn(sum(new), hkv, d, device=device).to(dtype),
        "v": torch.randn(sum(new), hkv, d, device=device).to(dtype),
        "cu_seqlens_q": cu,
        "k_cache": torch.randn(nb, page, hkv, d, device=device).to(dtype),
        "v_cache": torch.randn(nb, page, hkv, d, device=device).to(dtype),
        "block_table": torch.randperm(nb, device=device).to(torch.int32).view(len(pre), width),
        "prefix_lens": torch.tensor(pre, dtype=torch.int32, device=device),
    }
