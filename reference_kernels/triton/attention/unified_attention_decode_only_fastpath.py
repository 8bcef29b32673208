"""
---
id: unified_attention_decode_only_fastpath
title: Unified paged attention with a decode fast path, a per-sequence branch inside one kernel
op_family: attention
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [paged-kv-gather, decode-specialised, per-row-branch, gqa-packing, online-softmax]
status: reference
launcher: unified_attention_decode_only_fastpath
tuning:
  block_m: [16, 4, 64]
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
  shapes: [{seq_lens: [1, 7, 1], context_lens: [20, 10, 3], num_heads_q: 4, num_heads_kv: 2, head_dim: 40}, {seq_lens: [5, 19], num_heads_q: 3, num_heads_kv: 1, head_dim: 32, page_size: 8}]
  dtypes: [fp32, bf16]
  allow_tf32: true
  atol: 0.02
  rtol: 0.02
measured:
  - {device: NVIDIA H200, shape: unified_attention/0, dtype: bf16, latency_us: 655.776, sol_fraction: 0.0673, date: '2026-12-03'}
  - {device: NVIDIA H200, shape: unified_attention/24, dtype: bf16, latency_us: 2290.4, sol_fraction: 0.083, date: '2026-12-03'}
---
Causal attention of packed variable-length queries (cu_seqlens_q) over a paged K/V cache (blocks,
PAGE, HKV, D) addressed through a block table, queries aligned to the end of each sequence's
seqused_k keys (query i of a length-Lq sequence sees keys 0 .. kv_len - Lq + i), GQA by head //
(HQ / HKV). Grid: (sequence, query block, KV head); each program branches on its sequence's query
length. Decode rows (Lq == 1, the common case in a mixed serving batch) take a fast path: only
query block 0 works, its tile is just the GROUP query heads of the one token (BLOCK_G >= 16 rows,
no token axis), and the key loop has no causal mask at all (the token sees every cached key).
Other sequences take the general path: BLOCK_M tokens x GROUP heads stacked as rows, keys walked
only up to the block's last visible position, causal mask per row. Both paths share one paged
K/V inner loop (online softmax, exp2, fp32 state, tensor-core dots); each K/V tile is loaded once
per KV head. When it wins: batches dominated by decode rows, where a uniform prefill tiling would
waste BLOCK_M - 1 of every BLOCK_M rows and evaluate causal masks for nothing. Limits: without
max_seqlen_q the grid assumes any sequence may hold all TT tokens (idle programs exit at once);
page size a power of two; D <= 256; GROUP <= 64.
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
        acc = tl.dot(a.to(b.dtype), b, acc)  # GPU: tensor cores on the storage dtype
    return acc


@triton.jit
def _attend_rows(
    q_ptr, k_cache_ptr, v_cache_ptr, out_ptr, bt_row,
    token, head, mask_r, qpos, n_end, kv_head, head_dim, scale_log2e,
    stride_qt, stride_qh, stride_kb, stride_kt, stride_kh, stride_vb, stride_vt, stride_vh,
    stride_ot, stride_oh,
    CAUSAL: tl.constexpr, ROWS: tl.constexpr, PAGE_SIZE: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    """Attend ROWS (token, head) rows to keys [0, n_end) of the paged cache and store them."""
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    mask_d = offs_d < head_dim
    tok64 = token.to(tl.int64)  # int64: tokens x stride can pass 2^31
    q = tl.load(q_ptr + tok64[:, None] * stride_qt + head[:, None] * stride_qh + offs_d[None, :],
                mask=mask_r[:, None] & mask_d[None, :], other=0.0)  # fmt: skip
    m_i = tl.full([ROWS], float("-inf"), tl.float32)
    l_i = tl.zeros([ROWS], tl.float32)
    acc = tl.zeros([ROWS, BLOCK_D], tl.float32)
    for n_start in range(0, n_end, BLOCK_N):
        pos = n_start + offs_n
        mask_n = pos < n_end
        page = tl.load(bt_row + pos // PAGE_SIZE, mask=mask_n, other=0).to(tl.int64)
        row = pos % PAGE_SIZE
        k_off = page * stride_kb + row * stride_kt + kv_head * stride_kh
        k_t = tl.load(k_cache_ptr + k_off[None, :] + offs_d[:, None],
                      mask=mask_d[:, None] & mask_n[None, :], other=0.0)  # fmt: skip
        s = _mma(q, k_t, tl.zeros([ROWS, BLOCK_N], tl.float32), UPCAST) * scale_log2e
        if CAUSAL:
            s = tl.where(mask_n[None, :] & (pos[None, :] <= qpos[:, None]), s, float("-inf"))
        else:
            s = tl.where(mask_n[None, :], s, float("-inf"))
        # a padded row can see no key: keep its max finite so no NaN appears
        m_new = tl.maximum(tl.maximum(m_i, tl.max(s, axis=1)), -1e30)
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v_off = page * stride_vb + row * stride_vt + kv_head * stride_vh
        v = tl.load(v_cache_ptr + v_off[:, None] + offs_d[None, :],
                    mask=mask_n[:, None] & mask_d[None, :], other=0.0)  # fmt: skip
        acc = _mma(p, v, acc * alpha[:, None], UPCAST)
        m_i = m_new
    out = acc / tl.where(l_i > 0.0, l_i, 1.0)[:, None]
    tl.store(out_ptr + tok64[:, None] * stride_ot + head[:, None] * stride_oh + offs_d[None, :],
             out.to(out_ptr.dtype.element_ty), mask=mask_r[:, None] & mask_d[None, :])  # fmt: skip


@triton.jit
def _unified_decode_fastpath_kernel(
    q_ptr, k_cache_ptr, v_cache_ptr, out_ptr, block_table_ptr, cu_q_ptr, seqused_k_ptr,
    head_dim, scale_log2e,
    stride_qt, stride_qh, stride_kb, stride_kt, stride_kh, stride_vb, stride_vt, stride_vh,
    stride_ot, stride_oh, stride_bts,
    GROUP_SIZE: tl.constexpr, BLOCK_G: tl.constexpr, GROUP_P: tl.constexpr, BLOCK_M: tl.constexpr,
    PAGE_SIZE: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    seq = tl.program_id(0)
    q_block = tl.program_id(1)
    kv_head = tl.program_id(2)
    q_start = tl.load(cu_q_ptr + seq)
    q_len = tl.load(cu_q_ptr + seq + 1) - q_start
    kv_len = tl.load(seqused_k_ptr + seq)
    bt_row = block_table_ptr + seq.to(tl.int64) * stride_bts
    if q_len == 1:
        # decode fast path: one token, its GROUP heads as the rows, no causal mask
        if q_block == 0:
            offs_g = tl.arange(0, BLOCK_G)
            token = q_start + offs_g * 0
            _attend_rows(q_ptr, k_cache_ptr, v_cache_ptr, out_ptr, bt_row,
                         token, kv_head * GROUP_SIZE + offs_g, offs_g < GROUP_SIZE, token,
                         kv_len, kv_head, head_dim, scale_log2e,
                         stride_qt, stride_qh, stride_kb, stride_kt, stride_kh,
                         stride_vb, stride_vt, stride_vh, stride_ot, stride_oh,
                         False, BLOCK_G, PAGE_SIZE, BLOCK_N, BLOCK_D, UPCAST)  # fmt: skip
    elif q_block * BLOCK_M < q_len:
        # general path: BLOCK_M tokens x GROUP heads, causal against the end-aligned keys
        offs_r = tl.arange(0, BLOCK_M * GROUP_P)
        local = q_block * BLOCK_M + offs_r // GROUP_P
        mask_r = (local < q_len) & (offs_r % GROUP_P < GROUP_SIZE)
        qpos = kv_len - q_len + local
        n_end = tl.minimum(kv_len, kv_len - q_len + (q_block + 1) * BLOCK_M)
        _attend_rows(q_ptr, k_cache_ptr, v_cache_ptr, out_ptr, bt_row,
                     q_start + local, kv_head * GROUP_SIZE + offs_r % GROUP_P, mask_r, qpos,
                     n_end, kv_head, head_dim, scale_log2e,
                     stride_qt, stride_qh, stride_kb, stride_kt, stride_kh,
                     stride_vb, stride_vt, stride_vh, stride_ot, stride_oh,
                     True, BLOCK_M * GROUP_P, PAGE_SIZE, BLOCK_N, BLOCK_D, UPCAST)  # fmt: skip


def _validate(q, k_cache, v_cache, block_table, cu_seqlens_q, seqused_k) -> None:
    """Raise ValueError naming the shapes when the inputs do not fit together."""
    shapes = (f"q {tuple(q.shape)}, k_cache {tuple(k_cache.shape)}, v_cache {tuple(v_cache.shape)},"
              f" block_table {tuple(block_table.shape)}, cu_seqlens_q {tuple(cu_seqlens_q.shape)},"
              f" seqused_k {tuple(seqused_k.shape)}")  # fmt: skip
    if q.dim() != 3 or k_cache.dim() != 4 or k_cache.shape != v_cache.shape:
        raise ValueError(f"need q (T, HQ, D) and k/v caches (blocks, page, HKV, D); got {shapes}")
    num_seqs = block_table.shape[0]
    if cu_seqlens_q.shape != (num_seqs + 1,) or seqused_k.shape != (num_seqs,):
        raise ValueError(f"need cu_seqlens_q (S+1,) and seqused_k (S,) for S sequences; {shapes}")
    page_size, hkv, d = k_cache.shape[1:]
    if q.shape[2] != d or q.shape[1] % hkv or q.shape[1] // hkv > 64 or d > 256:
        raise ValueError(f"need matching D <= 256 and HKV dividing HQ (group <= 64); got {shapes}")
    if page_size & (page_size - 1):
        raise ValueError(f"page size must be a power of two; got {shapes}")
    if not (q.dtype == k_cache.dtype == v_cache.dtype):
        raise ValueError(f"q, k_cache, v_cache dtypes differ: {q.dtype}, {k_cache.dtype}")
    if {block_table.dtype, cu_seqlens_q.dtype, seqused_k.dtype} != {torch.int32}:
        raise ValueError("block_table, cu_seqlens_q and seqused_k must be int32")
    if q.stride(2) != 1 or k_cache.stride(3) != 1 or v_cache.stride(3) != 1:
        raise ValueError("q and the caches need a contiguous last (head_dim) axis")


def unified_attention_decode_only_fastpath(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_table: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    seqused_k: torch.Tensor,
    softmax_scale: float | None = None,
    max_seqlen_q: int | None = None,
    *,
    block_m: int | None = None,
    block_n: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return causal varlen paged attention, decode sequences through a specialised path.

    Args:
        q: (total query tokens, HQ, D) bf16/fp16/fp32, last axis contiguous.
        k_cache: (num_blocks, page_size, HKV, D) same dtype; page_size a power of two.
        v_cache: (num_blocks, page_size, HKV, D) same dtype.
        block_table: (S, max_blocks) int32, logical page -> physical page.
        cu_seqlens_q: (S + 1,) int32 prefix sums of the query lengths.
        seqused_k: (S,) int32 keys per sequence (>= its query length).
        softmax_scale: Score scale; None means 1/sqrt(D).
        max_seqlen_q: Longest query length if known (sizes the grid); None = total tokens.
        block_m: Query tokens per general-path program (power of two; raised so that block_m x
            next_pow2(group) >= 16); None = 16.
        block_n: Keys per loop step (power of two >= 16); None = 32.
        num_warps: Warps per program; None = 4.

    Returns:
        (total query tokens, HQ, D) tensor of q's dtype.

    Raises:
        ValueError: Shapes, dtypes or head counts do not fit together.
    """
    _validate(q, k_cache, v_cache, block_table, cu_seqlens_q, seqused_k)
    out = torch.empty_like(q)
    num_seqs, (tt, hq, d), (_, page, hkv, _) = block_table.shape[0], q.shape, k_cache.shape
    longest = tt if max_seqlen_q is None else max_seqlen_q
    if tt == 0 or longest == 0 or num_seqs == 0:
        return out
    group = hq // hkv
    block_g = max(16, triton.next_power_of_2(group))  # the decode tile: >= 16 rows for tl.dot
    group_p = triton.next_power_of_2(group)
    block_m = max(block_m or 16, triton.cdiv(16, group_p))  # general tile: >= 16 rows too
    scale = softmax_scale if softmax_scale is not None else d**-0.5
    _unified_decode_fastpath_kernel[(num_seqs, triton.cdiv(longest, block_m), hkv)](
        q, k_cache, v_cache, out, block_table, cu_seqlens_q, seqused_k,
        d, scale * 1.4426950408889634,
        q.stride(0), q.stride(1), *k_cache.stride()[:3], *v_cache.stride()[:3],
        out.stride(0), out.stride(1), block_table.stride(0),
        GROUP_SIZE=group, BLOCK_G=block_g, GROUP_P=group_p, BLOCK_M=block_m, PAGE_SIZE=page,
        BLOCK_N=block_n or 32, BLOCK_D=max(16, triton.next_power_of_2(d)),
        UPCAST=os.environ.get("TRITON_INTERPRET") == "1", num_warps=num_warps or 4,
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
        scores = torch.einsum("qhd,khd->hqk", q[q0:q1].float(), k) * scale
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
    num_blocks = sum(pages_per_seq) + 4  # a few spare pages nobody points at
    perm = torch.randperm(num_blocks, device=device).to(torch.int32)  # shuffled physical pages
    block_table = torch.zeros(
        (len(q_lens), max(max(pages_per_seq), 1)), dtype=torch.int32, device=device
    )
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
