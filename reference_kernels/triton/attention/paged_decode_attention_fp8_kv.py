"""
---
id: paged_decode_attention_fp8_kv
title: Paged decode attention over an fp8 e4m3 KV cache, per-tensor scales folded out of the loop
op_family: attention
dsl: triton
vendor: nvidia
arch: [sm_89, sm_90]
dtypes: [bf16, fp16, fp32, fp8_e4m3fn]
bound: memory
techniques: [fp8-kv-cache, fp8-e4m3, static-scale, scale-folding, paged-kv-gather, gqa-packing]
status: reference
launcher: paged_decode_attention_fp8_kv
tuning:
  num_warps: [4, 2, 8]
args:
  query: {shape: [S, HQ, D], dtypes: [bf16, fp16, fp32], aliases: [q]}
  key_cache: {shape: [NB, PAGE, HKV, D], dtypes: [fp8_e4m3fn], layout: any, aliases: [k_cache]}
  value_cache: {shape: [NB, PAGE, HKV, D], dtypes: [fp8_e4m3fn], layout: any, aliases: [v_cache]}
  block_tables: {shape: [S, '?'], dtypes: [int32], aliases: [block_table]}
  seq_lens: {shape: [S], dtypes: [int32], aliases: [context_lens, seqused_k]}
  k_scale: {type: float, default: 1.0}
  v_scale: {type: float, default: 1.0}
  softmax_scale: {type: float, default: null, aliases: [scale, sm_scale, attn_scale]}
returns:
  - {name: out, shape: [S, HQ, D], dtype: query}
problem:
  shapes: [{num_seqs: 3, seq_lens: [37, 16, 5], num_heads_q: 6, num_heads_kv: 2, head_dim: 64, page: 16}, {num_seqs: 2, seq_lens: [40, 0], num_heads_q: 2, num_heads_kv: 2, head_dim: 40, page: 32}]
  dtypes: [fp32, bf16]
  allow_tf32: true
  atol: 0.02
  rtol: 0.02
measured: []
---
Decode attention (one query per sequence, GQA) over a paged KV cache stored as float8_e4m3fn with
per-tensor scales (vLLM kv_cache_dtype="fp8": K = k_scale * key_cache, V = v_scale * value_cache),
in the flash layout (num_blocks, PAGE, HKV, D) that reshape_and_cache_fp8 writes. One program owns
one (sequence, KV head), packs its GROUP query heads into the rows of a tensor-core tile (padded
to 16) and walks the block table one page per step. The scales never touch the cache tiles: q.K =
k_scale * (q . key_cache) folds k_scale into the softmax scale, and sum p V = v_scale * sum p
value_cache folds v_scale into the final normalisation, so the only per-element work is the fp8 ->
16-bit conversion feeding the MMA. Bytes: 1 per cached element (half of a bf16 cache), which is
what makes fp8 KV worth it for bandwidth-bound decode. Limits: per-tensor scales only (no per-head
or per-token scales); page size a power of two >= 16; no split over the context; D <= 256;
sm_89+ for hardware fp8 conversion (older GPUs convert in software). A seq_len longer than its
block-table row is clipped to the row in the kernel (the launcher reads no length on the host;
check_inputs raises for it, with a sync, outside the launch).
"""

import os

import torch
import triton
import triton.language as tl

LOG2E = 1.4426950408889634


@triton.jit
def _mma(a, b, acc, UPCAST: tl.constexpr):
    """Return acc + a @ b with an fp32 accumulator (exact fp32 operands under the interpreter)."""
    if UPCAST:
        acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
    else:
        acc = tl.dot(a, b, acc)
    return acc


@triton.jit
def _paged_decode_attention_fp8_kv_kernel(
    # pointers
    q_ptr,
    k_ptr,
    v_ptr,
    out_ptr,
    block_tables_ptr,
    seq_lens_ptr,
    # sizes and scalars
    head_dim,
    max_tokens,  # block_tables width x PAGE: a longer seq_len is clipped (no table overrun)
    qk_scale_log2e,  # softmax scale * k_scale * log2(e): k_scale folded into the scores
    v_scale,  # folded into the final normalisation
    # strides (elements; head_dim contiguous)
    stride_qs,
    stride_qh,
    stride_kb,
    stride_kp,
    stride_kh,
    stride_vb,
    stride_vp,
    stride_vh,
    stride_os,
    stride_oh,
    stride_bt,
    # meta
    GROUP_SIZE: tl.constexpr,
    BLOCK_G: tl.constexpr,
    PAGE: tl.constexpr,
    BLOCK_D: tl.constexpr,
    UPCAST: tl.constexpr,
):
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    seq_len = tl.minimum(tl.load(seq_lens_ptr + seq), max_tokens)
    offs_g = tl.arange(0, BLOCK_G)
    offs_p = tl.arange(0, PAGE)
    offs_d = tl.arange(0, BLOCK_D)
    mask_g = offs_g < GROUP_SIZE
    mask_d = offs_d < head_dim
    heads = kv_head * GROUP_SIZE + offs_g
    q = tl.load(q_ptr + seq * stride_qs + heads[:, None] * stride_qh + offs_d[None, :],
                mask=mask_g[:, None] & mask_d[None, :], other=0.0)  # fmt: skip

    m_i = tl.full([BLOCK_G], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_G], tl.float32)
    acc = tl.zeros([BLOCK_G, BLOCK_D], tl.float32)
    for page_idx in range(0, tl.cdiv(seq_len, PAGE)):
        block = tl.load(block_tables_ptr + seq * stride_bt + page_idx).to(tl.int64)
        tok = page_idx * PAGE + offs_p
        mask_n = tok < seq_len
        k_page = k_ptr + block * stride_kb + kv_head * stride_kh
        k_t = tl.load(k_page + offs_p[None, :] * stride_kp + offs_d[:, None],
                      mask=mask_d[:, None] & mask_n[None, :], other=0.0)  # fmt: skip
        # fp8 -> query dtype is the only per-element dequant work: the scale is folded
        s = _mma(q, k_t.to(q.dtype), tl.zeros([BLOCK_G, PAGE], tl.float32), UPCAST)
        s = tl.where(mask_n[None, :], s * qk_scale_log2e, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v_page = v_ptr + block * stride_vb + kv_head * stride_vh
        v = tl.load(v_page + offs_p[:, None] * stride_vp + offs_d[None, :],
                    mask=mask_n[:, None] & mask_d[None, :], other=0.0)  # fmt: skip
        acc = _mma(p.to(q.dtype), v.to(q.dtype), acc * alpha[:, None], UPCAST)
        m_i = m_new

    out = acc * (v_scale / tl.where(l_i > 0.0, l_i, 1.0))[:, None]  # v_scale folded here
    tl.store(out_ptr + seq * stride_os + heads[:, None] * stride_oh + offs_d[None, :],
             out.to(out_ptr.dtype.element_ty), mask=mask_g[:, None] & mask_d[None, :])  # fmt: skip


def _validate(query, key_cache, value_cache, block_tables, seq_lens) -> None:
    """Raise ValueError naming the shapes when the inputs do not fit together."""
    shapes = (f"query {tuple(query.shape)}, key_cache {tuple(key_cache.shape)}, value_cache"
              f" {tuple(value_cache.shape)}, block_tables {tuple(block_tables.shape)},"
              f" seq_lens {tuple(seq_lens.shape)}")  # fmt: skip
    if query.dim() != 3 or key_cache.dim() != 4 or key_cache.shape != value_cache.shape:
        raise ValueError(f"need query (S, HQ, D) and caches (NB, PAGE, HKV, D); got {shapes}")
    s, hq, d = query.shape
    page, hkv = key_cache.shape[1], key_cache.shape[2]
    if key_cache.shape[3] != d or hq % hkv or d > 256:
        raise ValueError(f"head_dim (<= 256) or head counts (HQ % HKV == 0) disagree: {shapes}")
    if page < 16 or page & (page - 1):
        raise ValueError(f"page size {page} must be a power of two >= 16: {shapes}")
    for name, cache in (("key_cache", key_cache), ("value_cache", value_cache)):
        if cache.dtype != torch.float8_e4m3fn or cache.stride(-1) != 1:
            raise ValueError(
                f"{name} must be float8_e4m3fn with contiguous head_dim; got {cache.dtype}"
            )
    if block_tables.dim() != 2 or block_tables.shape[0] != s or block_tables.dtype != torch.int32:
        raise ValueError(f"block_tables must be int32 (S, max_pages) with S = {s}: {shapes}")
    if seq_lens.shape != (s,) or seq_lens.dtype != torch.int32:
        raise ValueError(f"seq_lens must be int32 of shape (S,) = ({s},): {shapes}")
    if query.dtype not in (torch.bfloat16, torch.float16, torch.float32) or query.stride(-1) != 1:
        raise ValueError(
            f"query must be bf16/fp16/fp32 with contiguous head_dim; got {query.dtype}"
        )


def paged_decode_attention_fp8_kv(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
    softmax_scale: float | None = None,
    *,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return decode attention against a paged fp8 cache dequantised by per-tensor scales.

    Args:
        query: (S, HQ, D) bf16/fp16/fp32, last axis contiguous.
        key_cache: (NB, PAGE, HKV, D) float8_e4m3fn; keys are k_scale * key_cache.
        value_cache: (NB, PAGE, HKV, D) float8_e4m3fn; values are v_scale * value_cache.
        block_tables: (S, max_pages) int32 physical page of each logical page.
        seq_lens: (S,) int32 context length per sequence.
        k_scale: Per-tensor key scale.
        v_scale: Per-tensor value scale.
        softmax_scale: Score scale; None means 1/sqrt(D).
        num_warps: Warps per program; None = 4.

    Returns:
        (S, HQ, D) tensor of query's dtype.

    Raises:
        ValueError: Shapes, dtypes or layouts do not fit together (check_inputs checks the
            seq_lens values against the block table).
    """
    _validate(query, key_cache, value_cache, block_tables, seq_lens)
    s, hq, d = query.shape
    page, hkv = key_cache.shape[1], key_cache.shape[2]
    out = torch.empty_like(query, memory_format=torch.contiguous_format)
    if out.numel() == 0:
        return out
    scale = softmax_scale if softmax_scale is not None else d**-0.5
    group = hq // hkv
    kc, vc = key_cache, value_cache
    _paged_decode_attention_fp8_kv_kernel[(s, hkv)](
        query, kc, vc, out, block_tables, seq_lens,
        d, block_tables.shape[1] * page, scale * k_scale * LOG2E, v_scale,
        query.stride(0), query.stride(1),
        kc.stride(0), kc.stride(1), kc.stride(2),
        vc.stride(0), vc.stride(1), vc.stride(2),
        out.stride(0), out.stride(1), block_tables.stride(0),
        GROUP_SIZE=group, BLOCK_G=max(16, triton.next_power_of_2(group)), PAGE=page,
        BLOCK_D=max(16, triton.next_power_of_2(d)),
        UPCAST=os.environ.get("TRITON_INTERPRET") == "1", num_warps=num_warps or 4,
    )  # fmt: skip
    return out


def check_inputs(
    key_cache: torch.Tensor, block_tables: torch.Tensor, seq_lens: torch.Tensor
) -> None:
    """Raise ValueError if a seq_len exceeds its block-table row (reads seq_lens: a sync).

    Outside the timed path: the launcher does not read seq_lens on the host; its kernel clips such
    a length to the row instead.
    """
    page = key_cache.shape[1]
    if seq_lens.numel() and int(seq_lens.max()) > block_tables.shape[1] * page:
        raise ValueError(
            f"a seq_len ({int(seq_lens.max())}) exceeds block_tables width x page size "
            f"({block_tables.shape[1]} x {page})"
        )


def reference(query, key_cache, value_cache, block_tables, seq_lens, k_scale=1.0, v_scale=1.0,
              softmax_scale=None):  # fmt: skip
    """Gather each sequence's pages, dequantise in fp32 and run one-query attention."""
    s, hq, d = query.shape
    page, hkv = key_cache.shape[1], key_cache.shape[2]
    scale = softmax_scale if softmax_scale is not None else d**-0.5
    out = torch.zeros_like(query, memory_format=torch.contiguous_format)
    for i in range(s):
        n = int(seq_lens[i])
        if n == 0:
            continue
        pages = block_tables[i, : (n + page - 1) // page].long()
        ks = (key_cache[pages].float() * k_scale).reshape(-1, hkv, d)[:n]
        vs = (value_cache[pages].float() * v_scale).reshape(-1, hkv, d)[:n]
        ks, vs = ks.repeat_interleave(hq // hkv, 1), vs.repeat_interleave(hq // hkv, 1)
        p = (torch.einsum("hd,nhd->hn", query[i].float(), ks) * scale).softmax(-1)
        out[i] = torch.einsum("hn,nhd->hd", p, vs).to(query.dtype)
    return out


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return a query and an fp8 paged cache quantised from N(0, 1) with scales 1/64 and 1/32.

    ``shape``: ``num_seqs``, ``ctx_len`` (or ``seq_lens`` list), ``num_heads_q``,
    ``num_heads_kv``, ``head_dim``, ``page``. Pages are handed out in a shuffled order.
    """
    s, hq, hkv, d, page = (
        shape[k] for k in ("num_seqs", "num_heads_q", "num_heads_kv", "head_dim", "page")
    )
    lens = shape.get("seq_lens", [shape.get("ctx_len", 0)] * s)
    width = max(1, (max(lens) + page - 1) // page)
    order = torch.randperm(s * width).to(torch.int32).reshape(s, width)
    k_scale, v_scale = 1.0 / 64, 1.0 / 32
    kc = (torch.randn(s * width, page, hkv, d) / k_scale).clamp(-448, 448)
    vc = (torch.randn(s * width, page, hkv, d) / v_scale).clamp(-448, 448)
    return {
        "query": torch.randn(s, hq, d, device=device).to(dtype),
        "key_cache": kc.to(torch.float8_e4m3fn).to(device),
        "value_cache": vc.to(torch.float8_e4m3fn).to(device),
        "block_tables": order.to(device),
        "seq_lens": torch.tensor(lens, dtype=torch.int32, device=device),
        "k_scale": k_scale,
        "v_scale": v_scale,
    }
