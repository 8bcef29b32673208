"""
---
id: paged_decode_attention_per_head
title: Paged decode attention, one program per (sequence, query head) looping over cache pages
op_family: attention
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [paged-kv-gather, online-softmax, decode-gemv, fp32-accumulate, exp2-softmax]
status: reference
launcher: paged_decode_attention_per_head
tuning:
  pages_per_step: [2, 1, 4, 8]
  num_warps: [4, 1, 2, 8]
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
  shapes: [{seq_lens: [1, 17, 33], num_heads_q: 4, num_heads_kv: 2, head_dim: 32}, {seq_lens: [0, 40, 16], num_heads_q: 6, num_heads_kv: 2, head_dim: 40}]
  dtypes: [fp32, bf16]
measured:
  - {device: NVIDIA H200, shape: paged_attention_decode/0, dtype: bf16, latency_us: 186.32, sol_fraction: 0.1715, date: '2026-12-04'}
---
Decode attention (one new query token per sequence) over a paged KV cache. Two cache layouts,
told apart by k_cache's rank in the launcher and handed to the kernel as strides plus the key
run length X (a constexpr): vLLM's (the header's, atrex30's paged_attention_decode and
make_inputs' default), k_cache (num_blocks, HKV, D / x, PAGE, x) with x = 16 bytes / itemsize
(key element d at run d // x, lane d % x) and v_cache (num_blocks, HKV, D, PAGE); and a flat
one, k_cache and v_cache both (num_blocks, HKV, PAGE, D) (X = 1: one PAGE x D slab per page and
head; make_inputs' ``layout: flat``). One program per (sequence, query head) loads the query row
once and walks the sequence's pages PAGES_PER_STEP at a time through the block table; scores
are a broadcast multiply and row sum on CUDA cores (one query row would waste a tensor-core
tile), with a running max, denominator and fp32 accumulator (online softmax in the exp2 domain).
Bytes: each program reads its sequence's K and V for its KV head once (2 x L x D x 2 B in bf16);
the GROUP query heads of a KV head read the same pages, which the L2 mostly absorbs. Limits:
S x HQ programs only, so a small batch with a long context leaves SMs idle (see
paged_decode_attention_split_kv); page size a power of two; head_dim <= 256 (a multiple of x in
the vLLM layout).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _attention_paged_decode_per_head_kernel(
    # pointers
    q_ptr,
    k_cache_ptr,
    v_cache_ptr,
    out_ptr,
    block_tables_ptr,
    seq_lens_ptr,
    # sizes and scalars
    head_dim,
    scale_log2e,  # softmax scale * log2(e): scores go through exp2
    # strides (elements)
    stride_qs,
    stride_qh,
    stride_kb,
    stride_kh,
    stride_kx,  # between key runs of X elements (flat layout: the D stride, X = 1)
    stride_kt,
    stride_vb,
    stride_vh,
    stride_vd,
    stride_vt,
    stride_os,
    stride_oh,
    stride_bts,
    # meta
    GROUP_SIZE: tl.constexpr,  # query heads per KV head
    PAGE_SIZE: tl.constexpr,  # tokens per page (power of two)
    PAGES_PER_STEP: tl.constexpr,  # pages gathered per loop step
    X: tl.constexpr,  # contiguous key elements per run: 16 B / itemsize (vLLM), 1 (flat)
    BLOCK_D: tl.constexpr,
):
    seq = tl.program_id(0)
    head = tl.program_id(1)
    kv_head = head // GROUP_SIZE
    BLOCK_N: tl.constexpr = PAGES_PER_STEP * PAGE_SIZE

    seq_len = tl.load(seq_lens_ptr + seq)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    mask_d = offs_d < head_dim
    # key element d sits in run d // X at lane d % X; value element d at d * stride_vd
    k_off_d = (offs_d // X) * stride_kx + offs_d % X
    v_off_d = offs_d * stride_vd

    # the query row, fp32 from here on (head_dim contiguous)
    q = tl.load(q_ptr + seq * stride_qs + head * stride_qh + offs_d, mask=mask_d, other=0.0)
    q = q.to(tl.float32)

    # online-softmax state: scalars for the one query row, fp32 accumulator over D
    m_i = float("-inf")
    l_i = 0.0
    acc = tl.zeros([BLOCK_D], tl.float32)

    bt_row = block_tables_ptr + seq.to(tl.int64) * stride_bts
    for n_start in range(0, seq_len, BLOCK_N):
        pos = n_start + offs_n
        mask_n = pos < seq_len
        # token -> (physical page, row in page); the page base is int64 (blocks x page bytes > 2^31)
        page = tl.load(bt_row + pos // PAGE_SIZE, mask=mask_n, other=0).to(tl.int64)
        row = pos % PAGE_SIZE
        kv_mask = mask_n[:, None] & mask_d[None, :]
        k_ptrs = (k_cache_ptr + page[:, None] * stride_kb + kv_head * stride_kh
                  + row[:, None] * stride_kt + k_off_d[None, :])  # fmt: skip
        k = tl.load(k_ptrs, mask=kv_mask, other=0.0).to(tl.float32)

        # scores: (BLOCK_N,) dot products on CUDA cores, log2 domain
        s = tl.sum(k * q[None, :], axis=1) * scale_log2e
        s = tl.where(mask_n, s, float("-inf"))

        # every step holds at least one valid key, so m_new is finite
        m_new = tl.maximum(m_i, tl.max(s, axis=0))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=0)
        v_ptrs = (v_cache_ptr + page[:, None] * stride_vb + kv_head * stride_vh
                  + row[:, None] * stride_vt + v_off_d[None, :])  # fmt: skip
        v = tl.load(v_ptrs, mask=kv_mask, other=0.0).to(tl.float32)
        acc = acc * alpha + tl.sum(p[:, None] * v, axis=0)
        m_i = m_new

    # an empty sequence (seq_len 0) writes zeros
    out = acc / tl.where(l_i > 0.0, l_i, 1.0)
    o_ptrs = out_ptr + seq * stride_os + head * stride_oh + offs_d
    tl.store(o_ptrs, out.to(out_ptr.dtype.element_ty), mask=mask_d)


def _launch_config(head_dim: int) -> dict[str, int]:
    """Return pages per step and warps: 32 tokens x D keeps K and V tiles in a few registers."""
    if head_dim > 128:
        return {"pages_per_step": 1, "num_warps": 4}
    return {"pages_per_step": 2, "num_warps": 4}


def _validate(query, k_cache, v_cache, block_tables, seq_lens) -> None:
    """Raise ValueError naming the shapes when the inputs do not fit together."""
    shapes = (f"query {tuple(query.shape)}, k_cache {tuple(k_cache.shape)}, v_cache"
              f" {tuple(v_cache.shape)}, block_tables {tuple(block_tables.shape)},"
              f" seq_lens {tuple(seq_lens.shape)}")  # fmt: skip
    if query.dim() != 3 or k_cache.dim() not in (4, 5) or v_cache.dim() != 4:
        raise ValueError(
            "need query (S, HQ, D) and k/v caches (blocks, HKV, D / x, page, x) and (blocks, HKV,"
            f" D, page), or both (blocks, HKV, page, D); got {shapes}"
        )
    s, hq, d = query.shape
    nb, hkv = k_cache.shape[:2]
    if k_cache.dim() == 5:  # vLLM: split-x keys, values stored (D, page)
        _, _, dx, page_size, x = k_cache.shape
        dk, v_want = dx * x, (nb, hkv, d, page_size)
    else:
        _, _, page_size, dk = k_cache.shape
        v_want = (nb, hkv, page_size, d)
    if tuple(v_cache.shape) != v_want:
        raise ValueError(f"v_cache does not match k_cache's layout (want {v_want}); got {shapes}")
    if block_tables.shape[0] != s or seq_lens.shape != (s,):
        raise ValueError(f"need block_tables (S, max_blocks) and seq_lens (S,); got {shapes}")
    if dk != d or hq % hkv != 0 or d > 256 or page_size & (page_size - 1):
        raise ValueError(f"need matching D <= 256, HQ % HKV == 0, pow-2 pages; got {shapes}")
    if not (query.dtype == k_cache.dtype == v_cache.dtype):
        raise ValueError(f"query, k_cache, v_cache dtypes differ: {query.dtype}, {k_cache.dtype}")
    if block_tables.dtype != torch.int32 or seq_lens.dtype != torch.int32:
        raise ValueError("block_tables and seq_lens must be int32")
    if query.stride(2) != 1 or k_cache.stride(-1) != 1 or v_cache.stride(3) != 1:
        raise ValueError("query and the caches need a contiguous last axis")


def _cache_strides(k_cache, v_cache) -> tuple[int, int, dict[str, int]]:
    """Return the page size, key run length X and the kernel's cache strides (either layout)."""
    if k_cache.dim() == 5:  # (NB, HKV, D / x, page, x) and (NB, HKV, D, page)
        page_size, x = k_cache.shape[3], k_cache.shape[4]
        k_strides = (k_cache.stride(2), k_cache.stride(3))
        v_strides = (v_cache.stride(2), v_cache.stride(3))
    else:  # flat: (NB, HKV, page, D) for both; X = 1, runs of one element D-stride apart
        page_size, x = k_cache.shape[2], 1
        k_strides = (k_cache.stride(3), k_cache.stride(2))
        v_strides = (v_cache.stride(3), v_cache.stride(2))
    strides = {
        "stride_kb": k_cache.stride(0), "stride_kh": k_cache.stride(1),
        "stride_kx": k_strides[0], "stride_kt": k_strides[1],
        "stride_vb": v_cache.stride(0), "stride_vh": v_cache.stride(1),
        "stride_vd": v_strides[0], "stride_vt": v_strides[1],
    }  # fmt: skip
    return page_size, x, strides


def paged_decode_attention_per_head(
    query: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    softmax_scale: float | None = None,
    *,
    pages_per_step: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return one-token-per-sequence attention over a paged KV cache.

    Args:
        query: (S, HQ, D) bf16/fp16/fp32, last axis contiguous.
        k_cache: (num_blocks, HKV, D / x, page_size, x) (vLLM's split-x layout, x = 16 bytes /
            itemsize) or (num_blocks, HKV, page_size, D) (flat); same dtype, last axis
            contiguous; page_size a power of two.
        v_cache: (num_blocks, HKV, D, page_size) with a 5-D k_cache, else (num_blocks, HKV,
            page_size, D); same dtype, last axis contiguous.
        block_tables: (S, max_blocks) int32, logical page -> physical page.
        seq_lens: (S,) int32 cached tokens per sequence (the new token's K/V included).
        softmax_scale: Score scale; None means 1/sqrt(D).
        pages_per_step: Pages gathered per loop iteration (power of two); None: heuristic.
        num_warps: Warps per program; None uses the heuristic.

    Returns:
        (S, HQ, D) tensor of query's dtype.

    Raises:
        ValueError: Shapes, dtypes, layouts or head counts do not fit together.
    """
    _validate(query, k_cache, v_cache, block_tables, seq_lens)
    s, hq, d = query.shape
    hkv = k_cache.shape[1]
    page_size, x, cache_strides = _cache_strides(k_cache, v_cache)
    out = torch.empty_like(query)
    if s == 0:
        return out
    scale = softmax_scale if softmax_scale is not None else d**-0.5
    cfg = _launch_config(d)
    _attention_paged_decode_per_head_kernel[(s, hq)](
        query, k_cache, v_cache, out, block_tables, seq_lens,
        d, scale * 1.4426950408889634,
        stride_qs=query.stride(0), stride_qh=query.stride(1),
        stride_os=out.stride(0), stride_oh=out.stride(1),
        stride_bts=block_tables.stride(0),
        **cache_strides,
        GROUP_SIZE=hq // hkv, PAGE_SIZE=page_size,
        PAGES_PER_STEP=pages_per_step or cfg["pages_per_step"],
        X=x, BLOCK_D=triton.next_power_of_2(d),
        num_warps=num_warps or cfg["num_warps"],
    )  # fmt: skip
    return out


def _flat_caches(k_cache, v_cache) -> tuple[torch.Tensor, torch.Tensor]:
    """Return both caches as (num_blocks, HKV, page, D) views (un-tiling vLLM's layout)."""
    if k_cache.dim() == 4:
        return k_cache, v_cache
    nb, hkv, dx, page_size, x = k_cache.shape
    k = k_cache.permute(0, 1, 3, 2, 4).reshape(nb, hkv, page_size, dx * x)
    return k, v_cache.transpose(2, 3)


def reference(query, k_cache, v_cache, block_tables, seq_lens, softmax_scale=None):
    """Gather each sequence's pages and run softmax attention for its one query in fp32."""
    k_cache, v_cache = _flat_caches(k_cache, v_cache)
    _, hkv, page_size, d = k_cache.shape
    group = query.shape[1] // hkv
    scale = softmax_scale if softmax_scale is not None else d**-0.5
    out = torch.empty_like(query)
    for i in range(query.shape[0]):
        pos = torch.arange(int(seq_lens[i]), device=query.device)
        pages = block_tables[i, pos // page_size].long()
        # (L, HKV, D) -> (HQ, L, D)
        k = k_cache[pages, :, pos % page_size].float().repeat_interleave(group, 1).transpose(0, 1)
        v = v_cache[pages, :, pos % page_size].float().repeat_interleave(group, 1).transpose(0, 1)
        p = (torch.einsum("hd,hld->hl", query[i].float(), k) * scale).softmax(-1)
        out[i] = torch.einsum("hl,hld->hd", p, v).to(query.dtype)
    return out


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return decode queries and a shuffled paged cache.

    ``shape``: ``seq_lens`` (list of cached lengths), ``num_heads_q``, ``num_heads_kv``,
    ``head_dim`` (a multiple of x = 16 bytes / itemsize), optional ``page_size`` (16) and
    ``layout``: ``vllm`` (default; k (blocks, HKV, D / x, page, x), v (blocks, HKV, D, page)) or
    ``flat`` (both (blocks, HKV, page, D)).
    """
    lens = list(shape["seq_lens"])
    hq, hkv, d = shape["num_heads_q"], shape["num_heads_kv"], shape["head_dim"]
    page_size = shape.get("page_size", 16)
    pages_per_seq = [triton.cdiv(n, page_size) for n in lens]
    num_blocks = sum(pages_per_seq) + 3  # spare pages nobody points at
    perm = torch.randperm(num_blocks, device=device).to(torch.int32)  # shuffled physical pages
    block_tables = torch.zeros((len(lens), max(pages_per_seq)), dtype=torch.int32, device=device)
    start = 0
    for i, n in enumerate(pages_per_seq):
        block_tables[i, :n] = perm[start : start + n]
        start += n
    query = torch.randn(len(lens), hq, d, device=device).to(dtype)
    k_cache = torch.randn(num_blocks, hkv, page_size, d, device=device).to(dtype)
    v_cache = torch.randn(num_blocks, hkv, page_size, d, device=device).to(dtype)
    if shape.get("layout", "vllm") == "vllm":  # the same values, stored split-x and (D, page)
        x = 16 // k_cache.element_size()
        k_cache = k_cache.view(num_blocks, hkv, page_size, d // x, x).permute(0, 1, 3, 2, 4)
        k_cache, v_cache = k_cache.contiguous(), v_cache.transpose(2, 3).contiguous()
    return {
        "query": query,
        "k_cache": k_cache,
        "v_cache": v_cache,
        "block_tables": block_tables,
        "seq_lens": torch.tensor(lens, dtype=torch.int32, device=device),
    }
