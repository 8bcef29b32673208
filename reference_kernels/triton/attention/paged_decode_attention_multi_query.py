"""
---
id: paged_decode_attention_multi_query
title: Paged decode for several new tokens per sequence (speculative verify), tokens x heads packed
op_family: attention
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [paged-kv-gather, multi-token-decode, speculative-verification, gqa-head-packing,
             causal-among-new-tokens, online-softmax, tensor-core-mma, exp2-softmax]
status: reference
launcher: paged_decode_attention_multi_query
tuning:
  block_n: [32, 16, 64]
  num_warps: [4, 2, 8]
args:
  q: {shape: [S, NQ, HQ, D], dtypes: [bf16, fp16, fp32], aliases: [query]}
  k_cache: {shape: [NB, PAGE, HKV, D], like: q, aliases: [key_cache]}
  v_cache: {shape: [NB, PAGE, HKV, D], like: q, aliases: [value_cache]}
  block_table: {shape: [S, '?'], dtypes: [int32], aliases: [block_tables]}
  seq_lens: {shape: [S], dtypes: [int32], aliases: [seqused_k, context_lens]}
  softmax_scale: {type: float, default: null, aliases: [scale, sm_scale, attn_scale]}
returns:
  - {name: out, shape: [S, NQ, HQ, D], dtype: q}
problem:
  shapes: [{seq_lens: [37, 4], num_queries: 4, num_heads_q: 4, num_heads_kv: 2, head_dim: 24}, {seq_lens: [20], num_queries: 1, num_heads_q: 2, num_heads_kv: 2, head_dim: 16, page: 32}]
  dtypes: [fp32, bf16]
  allow_tf32: true
  atol: 0.02
  rtol: 0.02
measured: []
---
Decode with NQ new query tokens per sequence, as in speculative-decoding verification (the target
model scores NQ - 1 draft tokens plus the bonus position in one pass). The NQ tokens' keys and
values are already in the paged cache (blocks, page, HKV, D); seq_lens counts them, so token j of
sequence s sits at position seq_lens[s] - NQ + j and sees every key up to and including itself
(causal among the new tokens, full over the cached prefix). Program (sequence, KV head) packs the
NQ x GROUP (token, query head) pairs of its KV head into the rows of one tile (row = token *
GROUP + head in group, padded to >= 16), so every K/V tile gathered through the block table is read
ONCE for all new tokens and all heads sharing it and feeds a real tensor-core MMA (a single-token
decode wastes most of the 16-row MMA; NQ = 4 with GROUP = 4 fills it). The key loop is one online
softmax (exp2, fp32 state) with the per-row causal limit applied as a mask. Bytes: K and V of each
KV head once per sequence (2 x L x D x 2 B in bf16), q and out once. Limits: NQ x GROUP <= 128
rows per program; one program per (sequence, KV head), so few long sequences leave SMs idle; page
size a power of two; head_dim <= 256; all sequences verify the same NQ tokens.
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
def _paged_decode_multi_query_kernel(
    q_ptr, k_cache_ptr, v_cache_ptr, out_ptr, block_table_ptr, seq_lens_ptr, scale_log2e,
    stride_qs, stride_qj, stride_qh, stride_os, stride_oj, stride_oh,
    stride_kb, stride_kt, stride_kh, stride_vb, stride_vt, stride_vh, stride_bts,
    NUM_QUERIES: tl.constexpr, GROUP_SIZE: tl.constexpr, PAGE_SIZE: tl.constexpr,
    HEAD_DIM: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    seq_len = tl.load(seq_lens_ptr + seq)
    offs_r = tl.arange(0, BLOCK_R)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    token = offs_r // GROUP_SIZE  # row -> (new token, query head)
    head = kv_head * GROUP_SIZE + offs_r % GROUP_SIZE
    mask_r = token < NUM_QUERIES
    mask_d = offs_d < HEAD_DIM
    q_off = seq.to(tl.int64) * stride_qs + token * stride_qj + head * stride_qh
    q = tl.load(q_ptr + q_off[:, None] + offs_d[None, :], mask=mask_r[:, None] & mask_d[None, :],
                other=0.0)  # fmt: skip
    q_pos = seq_len - NUM_QUERIES + token  # each row's last visible key

    m_i = tl.full([BLOCK_R], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_R], tl.float32)
    acc = tl.zeros([BLOCK_R, BLOCK_D], tl.float32)
    bt_row = block_table_ptr + seq.to(tl.int64) * stride_bts
    for n_start in range(0, seq_len, BLOCK_N):
        kv_pos = n_start + offs_n
        mask_n = kv_pos < seq_len
        page = tl.load(bt_row + kv_pos // PAGE_SIZE, mask=mask_n, other=0).to(tl.int64)
        slot = kv_pos % PAGE_SIZE
        kv_mask = mask_n[:, None] & mask_d[None, :]
        k = tl.load(
            k_cache_ptr
            + page[:, None] * stride_kb
            + slot[:, None] * stride_kt
            + kv_head * stride_kh
            + offs_d[None, :],
            mask=kv_mask,
            other=0.0,
        )
        s = _mma(q, tl.trans(k), tl.zeros([BLOCK_R, BLOCK_N], tl.float32), UPCAST) * scale_log2e
        s = tl.where((q_pos[:, None] >= kv_pos[None, :]) & mask_n[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # padded rows see nothing
        alpha = tl.exp2(m_i - m_safe)
        p = tl.exp2(s - m_safe[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(
            v_cache_ptr
            + page[:, None] * stride_vb
            + slot[:, None] * stride_vt
            + kv_head * stride_vh
            + offs_d[None, :],
            mask=kv_mask,
            other=0.0,
        )
        acc = _mma(p, v, acc * alpha[:, None], UPCAST)
        m_i = m_new

    out = acc / tl.where(l_i > 0.0, l_i, 1.0)[:, None]
    o_off = seq.to(tl.int64) * stride_os + token * stride_oj + head * stride_oh
    tl.store(out_ptr + o_off[:, None] + offs_d[None, :], out.to(out_ptr.dtype.element_ty),
             mask=mask_r[:, None] & mask_d[None, :])  # fmt: skip


def _interpreting() -> bool:
    """Return whether Triton runs in its CPU interpreter (it then needs fp32 tl.dot operands)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def _validate(q, k_cache, v_cache, block_table, seq_lens) -> None:
    """Raise ValueError naming the shapes when the inputs do not fit together."""
    shapes = (f"q {tuple(q.shape)}, k_cache {tuple(k_cache.shape)}, v_cache {tuple(v_cache.shape)},"
              f" block_table {tuple(block_table.shape)},"
              f" seq_lens {tuple(seq_lens.shape)}")  # fmt: skip
    if q.dim() != 4 or k_cache.dim() != 4 or k_cache.shape != v_cache.shape:
        raise ValueError(
            f"need q (S, NQ, HQ, D) and k/v caches (blocks, page, HKV, D); got {shapes}"
        )
    s, nq, hq, d = q.shape
    page, hkv = k_cache.shape[1], k_cache.shape[2]
    if block_table.shape[0] != s or seq_lens.shape != (s,):
        raise ValueError(f"need block_table (S, W) and seq_lens (S,); got {shapes}")
    if k_cache.shape[3] != d or hq % hkv or d > 256 or page & (page - 1):
        raise ValueError(f"need matching D <= 256, HQ % HKV == 0, pow-2 pages; got {shapes}")
    if nq * (hq // hkv) > 128:
        raise ValueError(f"NQ x (HQ / HKV) = {nq * (hq // hkv)} rows > 128 per program; {shapes}")
    if not (q.dtype == k_cache.dtype == v_cache.dtype):
        raise ValueError(f"q, k_cache, v_cache dtypes differ: {q.dtype}, {k_cache.dtype}")
    if block_table.dtype != torch.int32 or seq_lens.dtype != torch.int32:
        raise ValueError("block_table and seq_lens must be int32")
    if q.stride(3) != 1 or k_cache.stride(3) != 1 or v_cache.stride(3) != 1:
        raise ValueError(f"q and the caches need a contiguous last (head) dim; got {shapes}")


def paged_decode_attention_multi_query(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    softmax_scale: float | None = None,
    *,
    block_n: int = 32,
    num_warps: int = 4,
) -> torch.Tensor:
    """Return attention of NQ new tokens per sequence over its paged cache, causal among them.

    Args:
        q: (S, NQ, HQ, D) bf16/fp16/fp32, the new tokens of each sequence.
        k_cache: (num_blocks, page_size, HKV, D), same dtype, holding the new tokens' keys too.
        v_cache: (num_blocks, page_size, HKV, D), same dtype.
        block_table: (S, max_pages) int32, logical page -> physical page.
        seq_lens: (S,) int32 key counts including the NQ new tokens (each >= NQ).
        softmax_scale: Score scale; None means 1/sqrt(D).
        block_n: Keys per loop step (power of two >= 16).
        num_warps: Warps per program.

    Returns:
        (S, NQ, HQ, D) tensor of q's dtype.

    Raises:
        ValueError: Shapes, dtypes or head counts do not fit together.
    """
    _validate(q, k_cache, v_cache, block_table, seq_lens)
    out = torch.empty_like(q)
    (s, nq, hq, d), page, hkv = q.shape, k_cache.shape[1], k_cache.shape[2]
    if out.numel() == 0:
        return out
    scale = softmax_scale if softmax_scale is not None else d**-0.5
    group = hq // hkv
    _paged_decode_multi_query_kernel[(s, hkv)](
        q, k_cache, v_cache, out, block_table, seq_lens, scale * 1.4426950408889634,
        q.stride(0), q.stride(1), q.stride(2), out.stride(0), out.stride(1), out.stride(2),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), block_table.stride(0),
        NUM_QUERIES=nq, GROUP_SIZE=group, PAGE_SIZE=page, HEAD_DIM=d,
        BLOCK_R=max(16, triton.next_power_of_2(nq * group)), BLOCK_N=block_n,
        BLOCK_D=max(16, triton.next_power_of_2(d)), UPCAST=_interpreting(), num_warps=num_warps,
    )  # fmt: skip
    return out


def reference(q, k_cache, v_cache, block_table, seq_lens, softmax_scale=None):
    """Gather each sequence's keys and run fp32 attention, new token j seeing keys <= its own."""
    s, nq, hq, d = q.shape
    page, hkv = k_cache.shape[1], k_cache.shape[2]
    scale = softmax_scale if softmax_scale is not None else d**-0.5
    out = torch.empty_like(q)
    for i in range(s):
        n = int(seq_lens[i])
        pos = torch.arange(n, device=q.device)
        pages = block_table[i, pos // page].long()
        k = k_cache[pages, pos % page].float().repeat_interleave(hq // hkv, dim=1)
        v = v_cache[pages, pos % page].float().repeat_interleave(hq // hkv, dim=1)
        scores = torch.einsum("jhd,khd->hjk", q[i].float(), k) * scale
        q_pos = n - nq + torch.arange(nq, device=q.device)
        scores = scores.masked_fill(pos[None, None, :] > q_pos[None, :, None], -torch.inf)
        out[i] = torch.einsum("hjk,khd->jhd", scores.softmax(-1), v).to(q.dtype)
    return out


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return N(0, 1) new-token queries and a shuffled paged cache.

    ``shape``: ``seq_lens`` (key counts incl. the new tokens), ``num_queries``, ``num_heads_q``,
    ``num_heads_kv``, ``head_dim``, optional ``page`` (16).
    """
    lens = list(shape["seq_lens"])
    nq, hq, hkv, d = (shape["num_queries"], shape["num_heads_q"], shape["num_heads_kv"],
                      shape["head_dim"])  # fmt: skip
    page = shape.get("page", 16)
    width = max(triton.cdiv(n, page) for n in lens)
    nb = len(lens) * width
    return {
        "q": torch.randn(len(lens), nq, hq, d, device=device).to(dtype),
        "k_cache": torch.randn(nb, page, hkv, d, device=device).to(dtype),
        "v_cache": torch.randn(nb, page, hkv, d, device=device).to(dtype),
        "block_table": torch.randperm(nb, device=device).to(torch.int32).view(len(lens), width),
        "seq_lens": torch.tensor(lens, dtype=torch.int32, device=device),
    }
