"""
---
id: paged_decode_attention_split_kv
title: Flash-decoding over a paged KV cache, split-KV partials plus a log-sum-exp reduce kernel
op_family: attention
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [split-kv, flash-decoding, lse-reduce, paged-kv-gather, online-softmax, fp32-accumulate]
status: reference
launcher: paged_decode_attention_split_kv
tuning:
  partition_size: [512, 256, 128, 64, 16]
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
  - {device: NVIDIA H200, shape: paged_attention_decode/0, dtype: bf16, latency_us: 101.936, sol_fraction: 0.3135, date: '2026-12-04'}
---
Decode attention (one query token per sequence) over a paged cache in either of the two layouts
paged_decode_attention_per_head takes, told apart by k_cache's rank in the launcher and passed to
the kernel as strides plus the key run length X (a constexpr): vLLM's (the header's, atrex30's
paged_attention_decode and make_inputs' default), k_cache (num_blocks, HKV, D / x, PAGE, x) with
x = 16 bytes / itemsize and v_cache (num_blocks, HKV, D, PAGE), or the flat (num_blocks, HKV,
PAGE, D) for both (X = 1; make_inputs' ``layout: flat``). The sequence length is cut into
partitions of PARTITION_SIZE tokens, and the grid is sequence x query head x partition, so a
small batch with a long context still fills the GPU. Each partition program runs an online
softmax over its pages (exp2 domain, fp32) and writes its unnormalised partial (running max m,
denominator l, accumulator acc) to an fp32 workspace; a second kernel,
one program per (sequence, head), rescales the partials by exp2(m - max m) and divides the summed
accumulators by the summed denominators (a log-sum-exp merge). Bytes: K and V read once per query
head (2 x L x D x 2 B in bf16) plus (D + 2) x 4 B written and read per partition. Limits: the
workspace is sized by block_tables' width, so partitions past a sequence's end are launched and
exit at once; the default partition (512, halved while the grid is under two waves) trades
reduce traffic against parallelism; page size a power of two dividing the partition; head_dim
<= 256 (a multiple of x in the vLLM layout).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _attention_paged_decode_split_partial_kernel(
    # pointers
    q_ptr,
    k_cache_ptr,
    v_cache_ptr,
    m_part_ptr,  # (S, HQ, SPLITS) fp32 running max (log2 domain)
    l_part_ptr,  # (S, HQ, SPLITS) fp32 denominator
    acc_part_ptr,  # (S, HQ, SPLITS, D) fp32 unnormalised output
    block_tables_ptr,
    seq_lens_ptr,
    # sizes and scalars
    head_dim,
    num_splits,
    scale_log2e,
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
    stride_bts,
    # meta
    GROUP_SIZE: tl.constexpr,
    PAGE_SIZE: tl.constexpr,  # also the tokens per loop step
    PARTITION_SIZE: tl.constexpr,  # tokens per program, a multiple of PAGE_SIZE
    X: tl.constexpr,  # contiguous key elements per run: 16 B / itemsize (vLLM), 1 (flat)
    BLOCK_D: tl.constexpr,
):
    seq = tl.program_id(0)
    head = tl.program_id(1)
    split = tl.program_id(2)
    kv_head = head // GROUP_SIZE

    seq_len = tl.load(seq_lens_ptr + seq)
    split_start = split * PARTITION_SIZE
    if split_start >= seq_len:  # past this sequence's end: the reduce never reads this slot
        return
    split_end = tl.minimum(seq_len, split_start + PARTITION_SIZE)

    offs_n = tl.arange(0, PAGE_SIZE)
    offs_d = tl.arange(0, BLOCK_D)
    mask_d = offs_d < head_dim
    q = tl.load(q_ptr + seq * stride_qs + head * stride_qh + offs_d, mask=mask_d, other=0.0)
    q = q.to(tl.float32)

    m_i = float("-inf")
    l_i = 0.0
    acc = tl.zeros([BLOCK_D], tl.float32)  # fp32 accumulation
    bt_row = block_tables_ptr + seq.to(tl.int64) * stride_bts
    k_head = k_cache_ptr + kv_head * stride_kh
    v_head = v_cache_ptr + kv_head * stride_vh
    # page-relative offsets, built once: key element d sits in run d // X at lane d % X
    k_slab = offs_n[:, None] * stride_kt + ((offs_d // X) * stride_kx + offs_d % X)[None, :]
    v_slab = offs_n[:, None] * stride_vt + offs_d[None, :] * stride_vd
    for n_start in range(split_start, split_end, PAGE_SIZE):
        # one page per step: a single block-table load, then one page's PAGE x D tile
        page = tl.load(bt_row + n_start // PAGE_SIZE).to(tl.int64)
        mask_n = n_start + offs_n < split_end
        kv_mask = mask_n[:, None] & mask_d[None, :]
        k = tl.load(k_head + page * stride_kb + k_slab, mask=kv_mask, other=0.0).to(tl.float32)
        s = tl.sum(k * q[None, :], axis=1) * scale_log2e
        s = tl.where(mask_n, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=0))  # finite: each step has a valid key
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=0)
        v = tl.load(v_head + page * stride_vb + v_slab, mask=kv_mask, other=0.0).to(tl.float32)
        acc = acc * alpha + tl.sum(p[:, None] * v, axis=0)
        m_i = m_new

    # workspace is contiguous: (seq, head, split) row-major
    slot = (seq * tl.num_programs(1) + head).to(tl.int64) * num_splits + split
    tl.store(m_part_ptr + slot, m_i)
    tl.store(l_part_ptr + slot, l_i)
    tl.store(acc_part_ptr + slot * head_dim + offs_d, acc, mask=mask_d)


@triton.jit
def _attention_paged_decode_split_reduce_kernel(
    # pointers
    m_part_ptr,
    l_part_ptr,
    acc_part_ptr,
    out_ptr,
    seq_lens_ptr,
    # sizes
    head_dim,
    num_splits,
    # strides (elements)
    stride_os,
    stride_oh,
    # meta
    PARTITION_SIZE: tl.constexpr,
    BLOCK_S: tl.constexpr,  # partitions merged per step
    BLOCK_D: tl.constexpr,
):
    seq = tl.program_id(0)
    head = tl.program_id(1)
    seq_len = tl.load(seq_lens_ptr + seq)
    used = tl.cdiv(seq_len, PARTITION_SIZE)  # only these partitions were written
    base = (seq * tl.num_programs(1) + head).to(tl.int64) * num_splits
    offs_s = tl.arange(0, BLOCK_S)
    offs_d = tl.arange(0, BLOCK_D)
    mask_d = offs_d < head_dim

    # pass 1: the global max over the partitions' maxima
    m_max = float("-inf")
    for s0 in range(0, used, BLOCK_S):
        m = tl.load(m_part_ptr + base + s0 + offs_s, mask=s0 + offs_s < used, other=float("-inf"))
        m_max = tl.maximum(m_max, tl.max(m, axis=0))
    m_safe = tl.where(m_max == float("-inf"), 0.0, m_max)  # seq_len 0: no partitions

    # pass 2: weight each partial by exp2(m - max) and sum numerators and denominators
    denom = 0.0
    acc = tl.zeros([BLOCK_D], tl.float32)
    for s0 in range(0, used, BLOCK_S):
        mask_s = s0 + offs_s < used
        m = tl.load(m_part_ptr + base + s0 + offs_s, mask=mask_s, other=float("-inf"))
        w = tl.exp2(m - m_safe)  # masked partitions: exp2(-inf) = 0
        l_s = tl.load(l_part_ptr + base + s0 + offs_s, mask=mask_s, other=0.0)
        denom += tl.sum(w * l_s, axis=0)
        a_ptrs = acc_part_ptr + (base + s0 + offs_s)[:, None] * head_dim + offs_d[None, :]
        a = tl.load(a_ptrs, mask=mask_s[:, None] & mask_d[None, :], other=0.0)
        acc += tl.sum(w[:, None] * a, axis=0)

    out = acc / tl.where(denom > 0.0, denom, 1.0)
    o_ptrs = out_ptr + seq * stride_os + head * stride_oh + offs_d
    tl.store(o_ptrs, out.to(out_ptr.dtype.element_ty), mask=mask_d)


def _launch_config(base_programs: int, max_len: int, device: torch.device) -> dict[str, int]:
    """Return the partition size: 512 tokens, halved (to 64) while the grid is under two waves."""
    sms = (
        torch.cuda.get_device_properties(device).multi_processor_count
        if device.type == "cuda"
        else 132
    )
    partition = 512
    while partition > 64 and base_programs * triton.cdiv(max_len, partition) < 2 * sms:
        partition //= 2
    return {"partition_size": partition, "num_warps": 4}


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


def paged_decode_attention_split_kv(
    query: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    softmax_scale: float | None = None,
    *,
    partition_size: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return one-token-per-sequence attention over a paged KV cache with split-KV parallelism.

    Args:
        query: (S, HQ, D) bf16/fp16/fp32, last axis contiguous.
        k_cache: (num_blocks, HKV, D / x, page_size, x) (vLLM's split-x layout, x = 16 bytes /
            itemsize) or (num_blocks, HKV, page_size, D) (flat); same dtype, last axis
            contiguous; page_size a power of two.
        v_cache: (num_blocks, HKV, D, page_size) with a 5-D k_cache, else (num_blocks, HKV,
            page_size, D); same dtype, last axis contiguous.
        block_tables: (S, max_blocks) int32, logical page -> physical page.
        seq_lens: (S,) int32 cached tokens per sequence, each <= max_blocks * page_size.
        softmax_scale: Score scale; None means 1/sqrt(D).
        partition_size: Tokens per split program (power of two, multiple of the page size);
            None: the heuristic.
        num_warps: Warps per split program; None uses the heuristic.

    Returns:
        (S, HQ, D) tensor of query's dtype.

    Raises:
        ValueError: Shapes, dtypes, layouts, head counts or the partition size do not fit.
    """
    _validate(query, k_cache, v_cache, block_tables, seq_lens)
    s, hq, d = query.shape
    hkv = k_cache.shape[1]
    page_size, x, cache_strides = _cache_strides(k_cache, v_cache)
    out = torch.empty_like(query)
    max_len = block_tables.shape[1] * page_size  # an upper bound, read without a host sync
    if s == 0 or max_len == 0:
        return out.zero_()
    cfg = _launch_config(s * hq, max_len, query.device)
    partition = partition_size or cfg["partition_size"]
    if partition % page_size or partition & (partition - 1):
        raise ValueError(f"partition_size {partition} must be a power of two and a multiple of "
                         f"the page size {page_size}")  # fmt: skip
    scale = softmax_scale if softmax_scale is not None else d**-0.5
    num_splits = triton.cdiv(max_len, partition)
    # fp32 workspace for the partials; slots past a sequence's end stay unwritten and unread
    m_part = torch.empty((s, hq, num_splits), dtype=torch.float32, device=query.device)
    l_part = torch.empty_like(m_part)
    acc_part = torch.empty((s, hq, num_splits, d), dtype=torch.float32, device=query.device)
    block_d = triton.next_power_of_2(d)
    _attention_paged_decode_split_partial_kernel[(s, hq, num_splits)](
        query, k_cache, v_cache, m_part, l_part, acc_part, block_tables, seq_lens,
        d, num_splits, scale * 1.4426950408889634,
        stride_qs=query.stride(0), stride_qh=query.stride(1),
        stride_bts=block_tables.stride(0),
        **cache_strides,
        GROUP_SIZE=hq // hkv, PAGE_SIZE=page_size, PARTITION_SIZE=partition, X=x,
        BLOCK_D=block_d,
        num_warps=num_warps or cfg["num_warps"],
    )  # fmt: skip
    _attention_paged_decode_split_reduce_kernel[(s, hq)](
        m_part, l_part, acc_part, out, seq_lens,
        d, num_splits,
        out.stride(0), out.stride(1),
        PARTITION_SIZE=partition, BLOCK_S=min(32, triton.next_power_of_2(num_splits)),
        BLOCK_D=block_d, num_warps=4,
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
