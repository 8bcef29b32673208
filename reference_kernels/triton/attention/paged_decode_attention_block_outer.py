"""
---
id: paged_decode_attention_block_outer
title: Paged decode attention looping over whole pages, one scalar page-id load per page
op_family: attention
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16]
bound: memory
techniques: [paged-kv-gather, page-outer-loop, scalar-page-id, split-x-key-layout,
             gqa-head-packing, online-softmax, tensor-core-mma, exp2-softmax]
status: reference
launcher: paged_decode_attention_block_outer
tuning:
  num_warps: [4, 2, 8]
  num_stages: [2, 1, 3]
args:
  query: {shape: [S, HQ, D], dtypes: [bf16, fp16], aliases: [q]}
  k_cache: {shape: [NB, HKV, '?', PAGE, '?'], like: query, aliases: [key_cache]}
  v_cache: {shape: [NB, HKV, D, PAGE], like: query, aliases: [value_cache]}
  block_tables: {shape: [S, '?'], dtypes: [int32], aliases: [block_table]}
  seq_lens: {shape: [S], dtypes: [int32], aliases: [context_lens, seqused_k]}
  softmax_scale: {type: float, default: null, aliases: [scale, sm_scale, attn_scale]}
returns:
  - {name: out, shape: [S, HQ, D], dtype: query}
problem:
  shapes: [{seq_lens: [37, 16, 0], num_heads_q: 6, num_heads_kv: 2, head_dim: 32}, {seq_lens: [40], num_heads_q: 2, num_heads_kv: 2, head_dim: 24, page: 32}]
  dtypes: [bf16]
  atol: 0.02
  rtol: 0.02
measured:
  - {device: NVIDIA H200, shape: paged_attention_decode/0, dtype: bf16, latency_us: 82.848, sol_fraction: 0.3879, date: '2026-12-03'}
---
atrex30's paged_attention_decode (one query token per sequence, vLLM's cache layout: k_cache
(blocks, HKV, D / x, page, x) with x = 16 / itemsize, v_cache (blocks, HKV, D, page)), with the
key loop over whole pages: BLOCK_N = page size. Program (sequence, KV head) packs the GROUP query
heads of its KV head into the rows of one (BLOCK_G >= 16, D) tile. Per page it loads the physical
page id ONCE as a scalar, so the K^T tile (D, page) and the V tile (page, D) are affine in the
page base (each 16-byte x-run of a key and each page-long V row contiguous; no per-token index
vector, no per-token block-table loads, no gather address math); QK^T and PV are tensor-core MMAs
with fp32 online softmax in the exp2 domain. Full pages run unmasked; only the last, partly filled
page is masked by the sequence length. Bytes: each KV head's K and V once per sequence (2 x L x D x
2 B in bf16), the query and output once, one 4-byte page id per page. Limits: one program per
(sequence, KV head), so a small batch with long contexts leaves SMs idle (see the split-KV
designs); page size >= 16 and a power of two; head_dim <= 256 (a head dim that is not a
power of two, e.g. 80 or 112, pads the tile to the next one and masks every load).
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
def _page_step(q, acc, m_i, l_i, k_ptrs, v_ptrs, valid, mask_d, scale_log2e,
               BLOCK_G: tl.constexpr, PAGE_SIZE: tl.constexpr, MASKED: tl.constexpr,
               PAD_D: tl.constexpr, UPCAST: tl.constexpr):  # fmt: skip
    """One online-softmax step over one page.

    MASKED masks the slots past the sequence end; PAD_D the head-dim columns past D.
    """
    if MASKED or PAD_D:
        k_t = tl.load(k_ptrs, mask=mask_d[:, None] & valid[None, :], other=0.0)  # (D, PAGE)
        v = tl.load(v_ptrs, mask=valid[:, None] & mask_d[None, :], other=0.0)  # (PAGE, D)
    else:  # a full page of a power-of-two head: plain affine loads
        k_t = tl.load(k_ptrs)
        v = tl.load(v_ptrs)
    s = _mma(q, k_t, tl.zeros([BLOCK_G, PAGE_SIZE], tl.float32), UPCAST) * scale_log2e
    if MASKED:
        s = tl.where(valid[None, :], s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, axis=1))  # finite: every page holds a valid token
    alpha = tl.exp2(m_i - m_new)
    p = tl.exp2(s - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, axis=1)
    acc = _mma(p, v, acc * alpha[:, None], UPCAST)
    return acc, m_new, l_i


@triton.jit
def _paged_decode_block_outer_kernel(
    q_ptr, k_cache_ptr, v_cache_ptr, out_ptr, block_tables_ptr, seq_lens_ptr, scale_log2e,
    stride_qs, stride_qh, stride_os, stride_oh, stride_bts,
    stride_kb, stride_kh, stride_kx, stride_kt,  # k_cache (NB, HKV, D / x, PAGE, x)
    stride_vb, stride_vh, stride_vd, stride_vt,  # v_cache (NB, HKV, D, PAGE)
    GROUP_SIZE: tl.constexpr, BLOCK_G: tl.constexpr, X: tl.constexpr,
    PAGE_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
    UPCAST: tl.constexpr,
):  # fmt: skip
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    seq_len = tl.load(seq_lens_ptr + seq)
    offs_g = tl.arange(0, BLOCK_G)
    offs_t = tl.arange(0, PAGE_SIZE)
    offs_d = tl.arange(0, BLOCK_D)
    mask_g = offs_g < GROUP_SIZE
    mask_d = offs_d < HEAD_DIM
    heads = kv_head * GROUP_SIZE + offs_g
    q = tl.load(q_ptr + seq * stride_qs + heads[:, None] * stride_qh + offs_d[None, :],
                mask=mask_g[:, None] & mask_d[None, :], other=0.0)  # fmt: skip
    m_i = tl.full([BLOCK_G], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_G], tl.float32)
    acc = tl.zeros([BLOCK_G, BLOCK_D], tl.float32)
    bt_row = block_tables_ptr + seq.to(tl.int64) * stride_bts
    # page-relative offsets, built once: K^T (D, PAGE) in split-x layout, V (PAGE, D)
    k_rel = ((offs_d // X) * stride_kx + offs_d % X)[:, None] + offs_t[None, :] * stride_kt
    v_rel = offs_t[:, None] * stride_vt + offs_d[None, :] * stride_vd
    k_head = k_cache_ptr + kv_head * stride_kh
    v_head = v_cache_ptr + kv_head * stride_vh
    all_valid = offs_t >= 0

    full_pages = seq_len // PAGE_SIZE
    for blk in range(0, full_pages):
        page = tl.load(bt_row + blk).to(tl.int64)  # one scalar load per page
        acc, m_i, l_i = _page_step(q, acc, m_i, l_i, k_head + page * stride_kb + k_rel,
                                   v_head + page * stride_vb + v_rel, all_valid, mask_d,
                                   scale_log2e, BLOCK_G, PAGE_SIZE, False, BLOCK_D != HEAD_DIM,
                                   UPCAST)  # fmt: skip
    if full_pages * PAGE_SIZE < seq_len:  # the partly filled last page
        page = tl.load(bt_row + full_pages).to(tl.int64)
        valid = full_pages * PAGE_SIZE + offs_t < seq_len
        acc, m_i, l_i = _page_step(q, acc, m_i, l_i, k_head + page * stride_kb + k_rel,
                                   v_head + page * stride_vb + v_rel, valid, mask_d,
                                   scale_log2e, BLOCK_G, PAGE_SIZE, True, BLOCK_D != HEAD_DIM,
                                   UPCAST)  # fmt: skip

    out = acc / tl.where(l_i > 0.0, l_i, 1.0)[:, None]  # seq_len 0 writes zeros
    tl.store(out_ptr + seq * stride_os + heads[:, None] * stride_oh + offs_d[None, :],
             out.to(out_ptr.dtype.element_ty), mask=mask_g[:, None] & mask_d[None, :])  # fmt: skip


def _interpreting() -> bool:
    """Return whether Triton runs in its CPU interpreter (it then needs fp32 tl.dot operands)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


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
    if query.dtype not in (torch.bfloat16, torch.float16):
        raise ValueError(f"query dtype {query.dtype} unsupported: use bf16 or fp16")
    if not (query.dtype == k_cache.dtype == v_cache.dtype):
        raise ValueError(f"query, k_cache, v_cache dtypes differ; got {shapes}")
    s, hq, d = query.shape
    nb, hkv, dx, page, x = k_cache.shape
    if x != 8 or dx * x != d or tuple(v_cache.shape) != (nb, hkv, d, page):
        raise ValueError(f"need the split-x key layout (x = 8 for 16-bit) and D matching; {shapes}")
    if hq % hkv or d > 256 or page < 16 or page & (page - 1):
        raise ValueError(f"need HQ % HKV == 0, D <= 256, pow-2 page >= 16; got {shapes}")
    if block_tables.shape[0] != s or seq_lens.shape != (s,):
        raise ValueError(f"need block_tables (S, W) and seq_lens (S,); got {shapes}")
    if block_tables.dtype != torch.int32 or seq_lens.dtype != torch.int32:
        raise ValueError("block_tables and seq_lens must be int32")
    if query.stride(2) != 1 or k_cache.stride(4) != 1:
        raise ValueError(f"query and k_cache need a contiguous last dim; got {shapes}")


def paged_decode_attention_block_outer(
    query: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    softmax_scale: float | None = None,
    *,
    num_warps: int = 4,
    num_stages: int = 2,
) -> torch.Tensor:
    """Return decode attention of one query token per sequence over a paged KV cache.

    Args:
        query: (S, HQ, D) bf16/fp16, D <= 256 and a multiple of 8.
        k_cache: (num_blocks, HKV, D / 8, page_size, 8), same dtype.
        v_cache: (num_blocks, HKV, D, page_size), same dtype.
        block_tables: (S, max_pages) int32, logical page -> physical page.
        seq_lens: (S,) int32 context lengths.
        softmax_scale: Score scale; None means 1/sqrt(D).
        num_warps: Warps per program.
        num_stages: Software-pipelining stages of the page loop (GPU only).

    Returns:
        (S, HQ, D) tensor of query's dtype.

    Raises:
        ValueError: Shapes, dtypes or head counts do not fit together.
    """
    _validate(query, k_cache, v_cache, block_tables, seq_lens)
    out = torch.empty_like(query)
    (s, hq, d), hkv, page = query.shape, k_cache.shape[1], k_cache.shape[3]
    if out.numel() == 0:
        return out
    scale = softmax_scale if softmax_scale is not None else d**-0.5
    group = hq // hkv
    _paged_decode_block_outer_kernel[(s, hkv)](
        query, k_cache, v_cache, out, block_tables, seq_lens, scale * 1.4426950408889634,
        query.stride(0), query.stride(1), out.stride(0), out.stride(1), block_tables.stride(0),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), k_cache.stride(3),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), v_cache.stride(3),
        GROUP_SIZE=group, BLOCK_G=max(16, triton.next_power_of_2(group)), X=8,
        PAGE_SIZE=page, HEAD_DIM=d, BLOCK_D=max(16, triton.next_power_of_2(d)),
        UPCAST=_interpreting(),
        num_warps=num_warps, num_stages=num_stages,
    )  # fmt: skip
    return out


def reference(query, k_cache, v_cache, block_tables, seq_lens, softmax_scale=None):
    """Un-tile the split-x keys, gather each sequence's pages and run fp32 softmax attention."""
    s, hq, d = query.shape
    hkv, page = v_cache.shape[1], v_cache.shape[3]
    width = block_tables.shape[1]
    blocks = block_tables.long()
    k = k_cache[blocks].permute(0, 2, 1, 4, 3, 5).reshape(s, hkv, width * page, d)
    v = v_cache[blocks].permute(0, 2, 1, 4, 3).reshape(s, hkv, width * page, d)
    scale = softmax_scale if softmax_scale is not None else d**-0.5
    qf = query.float().view(s, hkv, hq // hkv, d)
    scores = torch.matmul(qf, k.float().transpose(-1, -2)) * scale
    pos = torch.arange(width * page, device=query.device)
    valid = pos.view(1, 1, 1, -1) < seq_lens.view(-1, 1, 1, 1).long()
    probs = torch.nan_to_num(torch.softmax(scores.masked_fill(~valid, -torch.inf), dim=-1))
    return torch.matmul(probs, v.float()).reshape(s, hq, d).to(query.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return N(0, 1) query and caches (atrex scale) with shuffled block tables.

    ``shape``: ``seq_lens``, ``num_heads_q``, ``num_heads_kv``, ``head_dim``, ``page`` (16).
    """
    lens = list(shape["seq_lens"])
    hq, hkv, d, page = (
        shape["num_heads_q"],
        shape["num_heads_kv"],
        shape["head_dim"],
        shape.get("page", 16),
    )
    width = max(1, max(triton.cdiv(n, page) for n in lens))
    nb = len(lens) * width
    return {
        "query": torch.randn(len(lens), hq, d, device=device).to(dtype),
        "k_cache": torch.randn(nb, hkv, d // 8, page, 8, device=device).to(dtype),
        "v_cache": torch.randn(nb, hkv, d, page, device=device).to(dtype),
        "block_tables": torch.randperm(nb, device=device).to(torch.int32).view(len(lens), width),
        "seq_lens": torch.tensor(lens, dtype=torch.int32, device=device),
    }
