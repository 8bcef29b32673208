"""
---
id: unified_attention_persistent_work_list
title: Paged varlen causal attention on persistent programs pulling items from a built work list
op_family: attention
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: compute
techniques: [persistent-grid, work-list-scheduling, paged-kv-gather, online-softmax,
             gqa-head-loop, fp32-accumulate, exp2-softmax]
status: reference
launcher: unified_attention_persistent_work_list
tuning:
  block_m: [32, 16, 64]
  block_n: [32, 16, 64]
  programs_per_sm: [2, 1, 4]
  num_warps: [4, 2, 8]
args:
  q: {shape: [TT, HQ, D], dtypes: [bf16, fp16, fp32], aliases: [query]}
  k_cache: {shape: [NB, PAGE, HKV, D], like: q, aliases: [key_cache]}
  v_cache: {shape: [NB, PAGE, HKV, D], like: q, aliases: [value_cache]}
  cu_seqlens_q: {shape: [S + 1], dtypes: [int32], aliases: [query_start_loc, cu_seqlens]}
  seqused_k: {shape: [S], dtypes: [int32], aliases: [seq_lens, context_lens]}
  block_table: {shape: [S, '?'], dtypes: [int32], aliases: [block_tables]}
  softmax_scale: {type: float, default: null, aliases: [scale, sm_scale, attn_scale]}
returns:
  - {name: out, shape: [TT, HQ, D], dtype: q}
problem:
  shapes: [{seq_lens: [5, 0, 40], context_lens: [3, 4, 9], num_heads_q: 4, num_heads_kv: 2, head_dim: 24}, {seq_lens: [17], num_heads_q: 3, num_heads_kv: 1, head_dim: 16}]
  dtypes: [fp32, bf16]
  allow_tf32: true
  atol: 0.02
  rtol: 0.02
measured:
  - {device: NVIDIA H200, shape: unified_attention/0, dtype: bf16, latency_us: 548.96, sol_fraction: 0.0803, date: '2026-12-03'}
  - {device: NVIDIA H200, shape: unified_attention/24, dtype: bf16, latency_us: 3004.464, sol_fraction: 0.0633, date: '2026-12-03'}
---
atrex30's unified_attention (varlen queries over a paged (blocks, page, HKV, D) cache, causal
aligned to the end of the keys, GQA) scheduled as a work list. A one-program builder kernel walks
cu_seqlens_q and writes one (sequence, q block, KV head) item per BLOCK_M query rows per KV head,
each sequence's q blocks in DESCENDING order (the blocks near the end see the most keys, so the
heaviest items are handed out first), plus the item count. A persistent grid of
programs_per_sm x SMs programs then strides over the list (item = pid, pid + grid, ...); an item
loops over the GROUP query heads of its KV head (the K/V tiles it reloads stay hot in L1/L2) and
runs an online-softmax key loop that stops at the block's last diagonal. The list is built on the
device, so no host sync and no grid sized for the longest sequence: short and empty sequences
cost nothing, unlike a (seq, q block, head) grid. Bytes: Q and O once, the causal K/V prefix once
per (q block, query head); FLOPs 4 x D per visible (query, key) pair. Limits: one extra tiny
launch; the builder is serial over sequences (microseconds for thousands); page size a power of
two; head_dim <= 256.
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
def _build_work_list_kernel(cu_seqlens_q_ptr, items_ptr, count_ptr, num_seqs,
                            NUM_KV_HEADS: tl.constexpr, BLOCK_M: tl.constexpr,
                            CHUNK: tl.constexpr):  # fmt: skip
    """One program: items (seq, q_block, kv_head), q blocks last-first, and their count."""
    offs = tl.arange(0, CHUNK)
    count = tl.zeros([], tl.int32)
    for seq in range(0, num_seqs):
        q_len = tl.load(cu_seqlens_q_ptr + seq + 1) - tl.load(cu_seqlens_q_ptr + seq)
        n_items = tl.cdiv(q_len, BLOCK_M) * NUM_KV_HEADS
        for start in range(0, n_items, CHUNK):
            j = start + offs
            mask = j < n_items
            row = (count + j).to(tl.int64) * 3
            q_block = tl.cdiv(q_len, BLOCK_M) - 1 - j // NUM_KV_HEADS
            tl.store(items_ptr + row, tl.zeros([CHUNK], tl.int32) + seq, mask=mask)
            tl.store(items_ptr + row + 1, q_block, mask=mask)
            tl.store(items_ptr + row + 2, j % NUM_KV_HEADS, mask=mask)
        count += n_items
    tl.store(count_ptr, count)


@triton.jit
def _unified_persistent_kernel(
    q_ptr, k_cache_ptr, v_cache_ptr, out_ptr, block_table_ptr, cu_seqlens_q_ptr, seqused_k_ptr,
    items_ptr, count_ptr, scale_log2e,
    stride_qt, stride_qh, stride_kb, stride_ks, stride_kh, stride_vb, stride_vs, stride_vh,
    stride_ot, stride_oh, stride_bts,
    GROUP_SIZE: tl.constexpr, PAGE_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    num_items = tl.load(count_ptr)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    mask_d = offs_d < HEAD_DIM
    for item in range(tl.program_id(0), num_items, tl.num_programs(0)):
        seq = tl.load(items_ptr + item * 3)
        q_block = tl.load(items_ptr + item * 3 + 1)
        kv_head = tl.load(items_ptr + item * 3 + 2)
        q_start = tl.load(cu_seqlens_q_ptr + seq)
        q_len = tl.load(cu_seqlens_q_ptr + seq + 1) - q_start
        kv_len = tl.load(seqused_k_ptr + seq)
        context_len = kv_len - q_len
        offs_m = q_block * BLOCK_M + tl.arange(0, BLOCK_M)
        mask_m = offs_m < q_len
        q_rows = (q_start + offs_m).to(tl.int64)
        kv_end = tl.minimum(kv_len, context_len + (q_block + 1) * BLOCK_M)
        bt_row = block_table_ptr + seq.to(tl.int64) * stride_bts
        for g in range(0, GROUP_SIZE):
            head = kv_head * GROUP_SIZE + g
            q = tl.load(q_ptr + q_rows[:, None] * stride_qt + head * stride_qh + offs_d[None, :],
                        mask=mask_m[:, None] & mask_d[None, :], other=0.0)  # fmt: skip
            m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
            l_i = tl.zeros([BLOCK_M], tl.float32)
            acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
            for n_start in range(0, kv_end, BLOCK_N):
                kv_pos = n_start + offs_n
                mask_n = kv_pos < kv_end
                page = tl.load(bt_row + kv_pos // PAGE_SIZE, mask=mask_n, other=0).to(tl.int64)
                slot = kv_pos % PAGE_SIZE
                kv_mask = mask_n[:, None] & mask_d[None, :]
                k = tl.load(
                    k_cache_ptr
                    + page[:, None] * stride_kb
                    + slot[:, None] * stride_ks
                    + kv_head * stride_kh
                    + offs_d[None, :],
                    mask=kv_mask,
                    other=0.0,
                )
                s = _mma(q, tl.trans(k), tl.zeros([BLOCK_M, BLOCK_N], tl.float32), UPCAST)
                s = s * scale_log2e
                causal = (context_len + offs_m)[:, None] >= kv_pos[None, :]
                s = tl.where(causal & mask_n[None, :], s, float("-inf"))
                m_new = tl.maximum(m_i, tl.max(s, axis=1))
                m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
                alpha = tl.exp2(m_i - m_safe)
                p = tl.exp2(s - m_safe[:, None])
                l_i = l_i * alpha + tl.sum(p, axis=1)
                v = tl.load(
                    v_cache_ptr
                    + page[:, None] * stride_vb
                    + slot[:, None] * stride_vs
                    + kv_head * stride_vh
                    + offs_d[None, :],
                    mask=kv_mask,
                    other=0.0,
                )
                acc = _mma(p, v, acc * alpha[:, None], UPCAST)
                m_i = m_new
            out = acc / tl.where(l_i > 0.0, l_i, 1.0)[:, None]
            tl.store(
                out_ptr + q_rows[:, None] * stride_ot + head * stride_oh + offs_d[None, :],
                out.to(out_ptr.dtype.element_ty),
                mask=mask_m[:, None] & mask_d[None, :],
            )


def _num_sms(device: torch.device) -> int:
    """Return the device's SM count (4 on the CPU, where the interpreter runs tests)."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4


def _interpreting() -> bool:
    """Return whether Triton runs in its CPU interpreter (it then needs fp32 tl.dot operands)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def _validate(q, k_cache, v_cache, cu_seqlens_q, seqused_k, block_table) -> None:
    """Raise ValueError naming the shapes when the inputs do not fit together."""
    shapes = (f"q {tuple(q.shape)}, k_cache {tuple(k_cache.shape)}, v_cache {tuple(v_cache.shape)},"
              f" cu_seqlens_q {tuple(cu_seqlens_q.shape)}, seqused_k {tuple(seqused_k.shape)},"
              f" block_table {tuple(block_table.shape)}")  # fmt: skip
    if q.dim() != 3 or k_cache.dim() != 4 or k_cache.shape != v_cache.shape:
        raise ValueError(f"need q (T, HQ, D) and k/v caches (blocks, page, HKV, D); got {shapes}")
    num_seqs = block_table.shape[0]
    if cu_seqlens_q.shape != (num_seqs + 1,) or seqused_k.shape != (num_seqs,):
        raise ValueError(f"need cu_seqlens_q (S+1,) and seqused_k (S,) for S sequences; {shapes}")
    page_size, hkv, d = k_cache.shape[1:]
    if q.shape[2] != d or q.shape[1] % hkv != 0 or d > 256 or page_size & (page_size - 1):
        raise ValueError(f"need matching D <= 256, HQ % HKV == 0, pow-2 pages; got {shapes}")
    if not (q.dtype == k_cache.dtype == v_cache.dtype):
        raise ValueError(f"q, k_cache, v_cache dtypes differ: {q.dtype}, {k_cache.dtype}")
    if {block_table.dtype, cu_seqlens_q.dtype, seqused_k.dtype} != {torch.int32}:
        raise ValueError("block_table, cu_seqlens_q and seqused_k must be int32")
    if q.stride(2) != 1 or k_cache.stride(3) != 1 or v_cache.stride(3) != 1:
        raise ValueError(f"q, k_cache and v_cache need a contiguous last (head) dim; {shapes}")


def unified_attention_persistent_work_list(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    seqused_k: torch.Tensor,
    block_table: torch.Tensor,
    softmax_scale: float | None = None,
    *,
    block_m: int = 32,
    block_n: int = 32,
    programs_per_sm: int = 2,
    num_warps: int = 4,
) -> torch.Tensor:
    """Return causal (end-aligned) attention of packed queries against a paged KV cache.

    Args:
        q: (sum(q_lens), HQ, D) bf16/fp16/fp32.
        k_cache: (num_blocks, page_size, HKV, D), same dtype; page_size a power of two.
        v_cache: (num_blocks, page_size, HKV, D), same dtype.
        cu_seqlens_q: (S+1,) int32 prefix sums of the query lengths.
        seqused_k: (S,) int32 key lengths, each >= that sequence's query length.
        block_table: (S, max_blocks) int32, logical page -> physical page per sequence.
        softmax_scale: Score scale; None means 1/sqrt(D).
        block_m: Query rows per work item (power of two >= 16).
        block_n: Keys per loop step (power of two >= 16).
        programs_per_sm: Persistent programs per SM.
        num_warps: Warps per program.

    Returns:
        (sum(q_lens), HQ, D) tensor of q's dtype.

    Raises:
        ValueError: Shapes, dtypes, strides or head counts do not fit together.
    """
    _validate(q, k_cache, v_cache, cu_seqlens_q, seqused_k, block_table)
    out = torch.empty_like(q)
    num_seqs, (total, hq, d), (_, page_size, hkv, _) = block_table.shape[0], q.shape, k_cache.shape
    if total == 0 or num_seqs == 0:
        return out
    # sum over sequences of ceil(len / block_m) <= S + T / block_m items per KV head
    capacity = (num_seqs + total // block_m) * hkv
    items = torch.empty((capacity, 3), dtype=torch.int32, device=q.device)
    count = torch.empty((1,), dtype=torch.int32, device=q.device)
    _build_work_list_kernel[(1,)](
        cu_seqlens_q, items, count, num_seqs, NUM_KV_HEADS=hkv, BLOCK_M=block_m, CHUNK=256
    )
    grid = (min(capacity, programs_per_sm * _num_sms(q.device)),)
    scale = softmax_scale if softmax_scale is not None else d**-0.5
    _unified_persistent_kernel[grid](
        q, k_cache, v_cache, out, block_table, cu_seqlens_q, seqused_k, items, count,
        scale * 1.4426950408889634,
        q.stride(0), q.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
        out.stride(0), out.stride(1), block_table.stride(0),
        GROUP_SIZE=hq // hkv, PAGE_SIZE=page_size, HEAD_DIM=d,
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=max(16, triton.next_power_of_2(d)),
        UPCAST=_interpreting(), num_warps=num_warps,
    )  # fmt: skip
    return out


def reference(q, k_cache, v_cache, cu_seqlens_q, seqused_k, block_table, softmax_scale=None):
    """Gather each sequence's K/V from the cache and run end-aligned causal attention in fp32."""
    out = torch.empty_like(q)
    page_size, hkv, d = k_cache.shape[1:]
    group = q.shape[1] // hkv
    scale = softmax_scale if softmax_scale is not None else d**-0.5
    for s in range(block_table.shape[0]):
        q0, q1 = int(cu_seqlens_q[s]), int(cu_seqlens_q[s + 1])
        kv_len = int(seqused_k[s])
        pos = torch.arange(kv_len, device=q.device)
        pages = block_table[s, pos // page_size].long()
        k = k_cache[pages, pos % page_size].float().repeat_interleave(group, dim=1)
        v = v_cache[pages, pos % page_size].float().repeat_interleave(group, dim=1)
        scores = torch.einsum("qhd,khd->hqk", q[q0:q1].float(), k) * scale
        q_pos = kv_len - (q1 - q0) + torch.arange(q1 - q0, device=q.device)
        scores = scores.masked_fill(pos[None, None, :] > q_pos[None, :, None], float("-inf"))
        out[q0:q1] = torch.einsum("hqk,khd->qhd", scores.softmax(-1), v).to(q.dtype)
    return out


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return a packed batch over a shuffled paged cache.

    ``shape``: ``seq_lens`` (query lengths), ``num_heads_q``, ``num_heads_kv``, ``head_dim``,
    optional ``context_lens`` (cached tokens before each query, default 0), ``page_size`` (16).
    """
    q_lens = list(shape["seq_lens"])
    ctx = list(shape.get("context_lens", [0] * len(q_lens)))
    hq, hkv, d = shape["num_heads_q"], shape["num_heads_kv"], shape["head_dim"]
    page_size = shape.get("page_size", 16)
    kv_lens = [a + b for a, b in zip(q_lens, ctx, strict=True)]
    pages = [triton.cdiv(n, page_size) for n in kv_lens]
    num_blocks = sum(pages) + 2
    perm = torch.randperm(num_blocks, device=device).to(torch.int32)
    block_table = torch.zeros((len(q_lens), max(max(pages), 1)), dtype=torch.int32, device=device)
    start = 0
    for i, n in enumerate(pages):
        block_table[i, :n] = perm[start : start + n]
        start += n
    cu = torch.zeros(len(q_lens) + 1, dtype=torch.int32, device=device)
    cu[1:] = torch.tensor(q_lens, device=device).cumsum(0)
    return {
        "q": torch.randn(sum(q_lens), hq, d, device=device).to(dtype),
        "k_cache": torch.randn(num_blocks, page_size, hkv, d, device=device).to(dtype),
        "v_cache": torch.randn(num_blocks, page_size, hkv, d, device=device).to(dtype),
        "cu_seqlens_q": cu,
        "seqused_k": torch.tensor(kv_lens, dtype=torch.int32, device=device),
        "block_table": block_table,
    }
