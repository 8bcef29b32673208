"""
---
id: unified_attention_qblock
title: Varlen causal prefill attention over a paged KV cache, one program per (seq, q-block, head)
op_family: attention
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: compute
techniques: [paged-kv-gather, online-softmax, causal-tile-bound, gqa-head-mapping,
             fp32-accumulate, exp2-softmax]
status: reference
launcher: unified_attention_qblock
tuning:
  block_m: [64, 16, 32, 128]
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
  shapes: [{seq_lens: [1, 17, 33], num_heads_q: 4, num_heads_kv: 2, head_dim: 32}, {seq_lens: [5, 17, 20], context_lens: [0, 30, 3], num_heads_q: 6, num_heads_kv: 2, head_dim: 40}]
  dtypes: [fp32, bf16]
  allow_tf32: true
measured:
  - {device: NVIDIA H200, shape: unified_attention/0, dtype: bf16, latency_us: 824.352, sol_fraction: 0.0535, date: '2026-12-03'}
  - {device: NVIDIA H200, shape: unified_attention/24, dtype: bf16, latency_us: 3190.896, sol_fraction: 0.0596, date: '2026-12-03'}
---
Flash-attention forward for a batch of variable-length sequences whose keys and values live in a
paged cache (pages of 16 tokens, `block_table` maps a sequence's logical page to a physical one).
Each program owns BLOCK_M query rows of one sequence and one query head; it walks the sequence's
keys in BLOCK_N tiles, gathering every key's page through the block table, and keeps a running max,
denominator and fp32 accumulator (online softmax, exp2 with log2(e) folded into the scale). The
causal diagonal is aligned to the end of the context (query i sits at position kv_len - q_len + i),
and the key loop stops at the last row's diagonal, so fully masked tiles are never loaded. Bytes:
Q and O once (2 x 2 B per element in bf16), K and V once per query block and per query head, so a
GQA group re-reads each K/V tile GROUP times (from L2 on a GPU); see unified_attention_gqa_packed
for the head-packed design. Limits: the page size must be a power of two; head_dim <= 256; one
host sync when max_seqlen_q is not given; fp32 inputs use TF32 tensor cores on the GPU.
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
        # GPU: tensor-core MMA on the storage dtype (P is cast down to V's dtype here)
        acc = tl.dot(a.to(b.dtype), b, acc)
    return acc


@triton.jit
def _attention_unified_qblock_kernel(
    # pointers
    q_ptr,
    k_cache_ptr,
    v_cache_ptr,
    out_ptr,
    block_table_ptr,
    cu_seqlens_q_ptr,
    seqused_k_ptr,
    # sizes and scalars
    head_dim,
    scale_log2e,  # softmax scale * log2(e): scores go through exp2
    # strides (elements)
    stride_qt,
    stride_qh,
    stride_qd,
    stride_kb,
    stride_ks,
    stride_kh,
    stride_kd,
    stride_vb,
    stride_vs,
    stride_vh,
    stride_vd,
    stride_ot,
    stride_oh,
    stride_od,
    stride_bts,
    # meta
    GROUP_SIZE: tl.constexpr,  # query heads per KV head
    PAGE_SIZE: tl.constexpr,  # tokens per cache page (power of two)
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    UPCAST: tl.constexpr,
):
    seq = tl.program_id(0)
    q_block = tl.program_id(1)
    head = tl.program_id(2)
    kv_head = head // GROUP_SIZE

    # per-sequence extents; the grid is sized for the longest sequence, shorter ones exit here
    q_start = tl.load(cu_seqlens_q_ptr + seq)
    q_len = tl.load(cu_seqlens_q_ptr + seq + 1) - q_start
    kv_len = tl.load(seqused_k_ptr + seq)
    if q_block * BLOCK_M >= q_len:
        return
    # causal diagonal aligned to the end: query i attends keys 0 .. context_len + i
    context_len = kv_len - q_len

    offs_m = q_block * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    mask_m = offs_m < q_len
    mask_d = offs_d < head_dim

    # Q tile (BLOCK_M, BLOCK_D) stays in registers for the whole key loop; int64 token offsets
    q_rows = (q_start + offs_m).to(tl.int64)
    q_ptrs = q_ptr + q_rows[:, None] * stride_qt + head * stride_qh + offs_d[None, :] * stride_qd
    q = tl.load(q_ptrs, mask=mask_m[:, None] & mask_d[None, :], other=0.0)

    # online-softmax state, all fp32
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)

    # keys past the last row's diagonal are masked for every row of the block: stop there
    kv_end = tl.minimum(kv_len, context_len + (q_block + 1) * BLOCK_M)
    bt_row = block_table_ptr + seq.to(tl.int64) * stride_bts
    for n_start in range(0, kv_end, BLOCK_N):
        kv_pos = n_start + offs_n
        mask_n = kv_pos < kv_end
        # gather: logical token -> (physical page, slot in page)
        page = tl.load(bt_row + kv_pos // PAGE_SIZE, mask=mask_n, other=0).to(tl.int64)
        slot = kv_pos % PAGE_SIZE
        kv_mask = mask_n[:, None] & mask_d[None, :]
        k_ptrs = (k_cache_ptr + page[:, None] * stride_kb + slot[:, None] * stride_ks
                  + kv_head * stride_kh + offs_d[None, :] * stride_kd)  # fmt: skip
        v_ptrs = (v_cache_ptr + page[:, None] * stride_vb + slot[:, None] * stride_vs
                  + kv_head * stride_vh + offs_d[None, :] * stride_vd)  # fmt: skip
        k = tl.load(k_ptrs, mask=kv_mask, other=0.0)  # (BLOCK_N, BLOCK_D)

        # scores in the log2 domain, fp32
        s = _mma(q, tl.trans(k), tl.zeros([BLOCK_M, BLOCK_N], tl.float32), UPCAST)
        s = s * scale_log2e
        causal = (context_len + offs_m)[:, None] >= kv_pos[None, :]
        s = tl.where(causal & mask_n[None, :], s, float("-inf"))

        # rescale the running state; a row with no visible key yet keeps m = -inf, so subtract
        # a finite stand-in to avoid (-inf) - (-inf) = NaN
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp2(m_i - m_safe)
        p = tl.exp2(s - m_safe[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(v_ptrs, mask=kv_mask, other=0.0)
        acc = _mma(p, v, acc * alpha[:, None], UPCAST)
        m_i = m_new

    # normalise; rows that saw no key (only possible for invalid inputs) write zeros
    out = acc / tl.where(l_i > 0.0, l_i, 1.0)[:, None]
    o_ptrs = out_ptr + q_rows[:, None] * stride_ot + head * stride_oh + offs_d[None, :] * stride_od
    tl.store(o_ptrs, out.to(out_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_d[None, :])


def _launch_config(head_dim: int) -> dict[str, int]:
    """Return tile sizes and warps so Q, the accumulator and the K/V pointers fit registers.

    The per-element K/V pointers of a paged gather cost registers a dense tile does not; ptxas for
    sm_90 spills at D = 128 with 64 x 32 tiles on 4 warps, not on 8.
    """
    if head_dim <= 64:
        return {"BLOCK_M": 64, "BLOCK_N": 32, "num_warps": 4}
    if head_dim <= 128:
        return {"BLOCK_M": 64, "BLOCK_N": 32, "num_warps": 8}
    return {"BLOCK_M": 32, "BLOCK_N": 16, "num_warps": 8}


def _interpreting() -> bool:
    """Return whether Triton runs in its CPU interpreter (it then needs fp32 tl.dot operands)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


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


def unified_attention_qblock(
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
    """Return causal attention of packed queries against a paged KV cache.

    Args:
        q: (sum(q_lens), HQ, D) bf16/fp16/fp32, sequences packed back to back.
        k_cache: (num_blocks, page_size, HKV, D), same dtype; page_size a power of two (16).
        v_cache: (num_blocks, page_size, HKV, D), same dtype.
        block_table: (S, max_blocks) int32, logical page -> physical page per sequence.
        cu_seqlens_q: (S+1,) int32 prefix sums of the query lengths.
        seqused_k: (S,) int32 key lengths, each >= that sequence's query length.
        softmax_scale: Score scale; None means 1/sqrt(D).
        max_seqlen_q: Longest query length; None bounds it by the total token count (idle
            programs exit at once; pass it when known, e.g. for large decode batches).
        block_m: Query rows per program (power of two >= 16); None uses the heuristic.
        block_n: Keys per loop step (power of two >= 16); None uses the heuristic.
        num_warps: Warps per program; None uses the heuristic.

    Returns:
        (sum(q_lens), HQ, D) tensor of q's dtype.

    Raises:
        ValueError: Shapes, dtypes or head counts do not fit together.
    """
    _validate(q, k_cache, v_cache, block_table, cu_seqlens_q, seqused_k)
    out = torch.empty_like(q)
    num_seqs, (_, hq, d), (_, page_size, hkv, _) = block_table.shape[0], q.shape, k_cache.shape
    if max_seqlen_q is None:
        # no host sync and no torch math in the launcher (the scorer's screen rejects both): the
        # total token count bounds every sequence, and programs past a sequence's end exit at once
        max_seqlen_q = q.shape[0] if num_seqs else 0
    if q.shape[0] == 0 or max_seqlen_q == 0:
        return out
    scale = softmax_scale if softmax_scale is not None else d**-0.5
    cfg = _launch_config(d)
    cfg["BLOCK_M"] = block_m or cfg["BLOCK_M"]
    cfg["BLOCK_N"] = block_n or cfg["BLOCK_N"]
    cfg["num_warps"] = num_warps or cfg["num_warps"]
    grid = (num_seqs, triton.cdiv(max_seqlen_q, cfg["BLOCK_M"]), hq)
    _attention_unified_qblock_kernel[grid](
        q, k_cache, v_cache, out, block_table, cu_seqlens_q, seqused_k,
        d, scale * 1.4426950408889634,
        q.stride(0), q.stride(1), q.stride(2),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), k_cache.stride(3),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), v_cache.stride(3),
        out.stride(0), out.stride(1), out.stride(2),
        block_table.stride(0),
        GROUP_SIZE=hq // hkv, PAGE_SIZE=page_size, BLOCK_D=max(16, triton.next_power_of_2(d)),
        UPCAST=_interpreting(), num_stages=2, **cfg,
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
