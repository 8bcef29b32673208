"""
---
id: attention_decode_dense_gqa
title: Decode attention on a dense KV cache, one program per (batch, KV head) packing the GQA group
op_family: attention
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [gqa-head-packing, decode-gemv, online-softmax, fp32-accumulate, exp2-softmax]
status: reference
launcher: attention_decode_dense_gqa
tuning:
  block_n: [64, 16, 32, 128]
  num_warps: [4, 2, 8]
args:
  q: {shape: [B, HQ, D], dtypes: [bf16, fp16, fp32], aliases: [query]}
  k: {shape: [B, T, HKV, D], like: q, aliases: [key, k_cache]}
  v: {shape: [B, T, HKV, D], like: q, aliases: [value, v_cache]}
  seq_lens: {shape: [B], dtypes: [int32], optional: true, aliases: [cache_seqlens, context_lens]}
  softmax_scale: {type: float, default: null, aliases: [scale, sm_scale, attn_scale]}
returns:
  - {name: out, shape: [B, HQ, D], dtype: q}
problem:
  shapes: [{batch: 3, seq_len: 33, seq_lens: [1, 17, 33], num_heads_q: 4, num_heads_kv: 2, head_dim: 32}, {batch: 2, seq_len: 40, seq_lens: [0, 40], num_heads_q: 6, num_heads_kv: 2, head_dim: 40}]
  dtypes: [fp32, bf16]
  allow_tf32: true
measured: []
---
Decode attention (one query token per batch entry) over a dense, unpaged KV cache k, v of shape
(B, T, HKV, D), with seq_lens marking each entry's valid prefix. One program owns one KV head of
one batch entry and all GROUP = HQ / HKV query heads that share it: the group's query rows form
the M dimension of a tensor-core tile (padded to 16 rows, padding masked), so each K/V tile is
read from HBM exactly once however large the group is. The key loop streams BLOCK_N tokens per
step through two products and an online softmax (exp2 domain, fp32 running max, denominator and
accumulator). Bytes: the whole valid cache once (2 x L x HKV x D x 2 B in bf16) plus Q/O; this
is the floor for decode, so the kernel is bound by HBM bandwidth when B x HKV fills the GPU.
Limits: only B x HKV programs (no split over T), so a small batch with few KV heads and a long
context leaves SMs idle; groups above 16 heads use a taller tile; head_dim <= 256.
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
def _attention_decode_dense_gqa_kernel(
    # pointers
    q_ptr,
    k_ptr,
    v_ptr,
    out_ptr,
    seq_lens_ptr,
    # sizes and scalars
    head_dim,
    scale_log2e,  # softmax scale * log2(e): scores go through exp2
    # strides (elements; head_dim contiguous)
    stride_qb,
    stride_qh,
    stride_kb,
    stride_kt,
    stride_kh,
    stride_vb,
    stride_vt,
    stride_vh,
    stride_ob,
    stride_oh,
    # meta
    GROUP_SIZE: tl.constexpr,  # query heads per KV head
    BLOCK_G: tl.constexpr,  # GROUP_SIZE padded to a power of two >= 16 (tensor-core M)
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    UPCAST: tl.constexpr,
):
    batch = tl.program_id(0)
    kv_head = tl.program_id(1)
    seq_len = tl.load(seq_lens_ptr + batch)

    offs_g = tl.arange(0, BLOCK_G)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    mask_g = offs_g < GROUP_SIZE
    mask_d = offs_d < head_dim
    heads = kv_head * GROUP_SIZE + offs_g

    # the group's query rows: (BLOCK_G, BLOCK_D), padding rows are zeros
    q_ptrs = q_ptr + batch * stride_qb + heads[:, None] * stride_qh + offs_d[None, :]
    q = tl.load(q_ptrs, mask=mask_g[:, None] & mask_d[None, :], other=0.0)

    m_i = tl.full([BLOCK_G], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_G], tl.float32)
    acc = tl.zeros([BLOCK_G, BLOCK_D], tl.float32)  # fp32 accumulation

    # int64 batch base: B x T x HKV x D passes 2^31 for long caches
    k_seq = k_ptr + batch.to(tl.int64) * stride_kb + kv_head * stride_kh
    v_seq = v_ptr + batch.to(tl.int64) * stride_vb + kv_head * stride_vh
    for n_start in range(0, seq_len, BLOCK_N):
        tok = n_start + offs_n
        mask_n = tok < seq_len
        # K as (BLOCK_D, BLOCK_N) through its strides, read once for the whole group
        k_t = tl.load(k_seq + tok[None, :] * stride_kt + offs_d[:, None],
                      mask=mask_d[:, None] & mask_n[None, :], other=0.0)  # fmt: skip
        s = _mma(q, k_t, tl.zeros([BLOCK_G, BLOCK_N], tl.float32), UPCAST) * scale_log2e
        s = tl.where(mask_n[None, :], s, float("-inf"))

        m_new = tl.maximum(m_i, tl.max(s, axis=1))  # finite: each step has a valid token
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(v_seq + tok[:, None] * stride_vt + offs_d[None, :],
                    mask=mask_n[:, None] & mask_d[None, :], other=0.0)  # fmt: skip
        acc = _mma(p, v, acc * alpha[:, None], UPCAST)
        m_i = m_new

    out = acc / tl.where(l_i > 0.0, l_i, 1.0)[:, None]  # seq_len 0 writes zeros
    o_ptrs = out_ptr + batch * stride_ob + heads[:, None] * stride_oh + offs_d[None, :]
    tl.store(o_ptrs, out.to(out_ptr.dtype.element_ty), mask=mask_g[:, None] & mask_d[None, :])


def _launch_config(head_dim: int) -> dict[str, int]:
    """Return tokens per step and warps: 64 tokens keep two K/V tiles in flight per program."""
    if head_dim > 128:
        return {"block_n": 32, "num_warps": 4}
    return {"block_n": 64, "num_warps": 4}


def _interpreting() -> bool:
    """Return whether Triton runs in its CPU interpreter (it then needs fp32 tl.dot operands)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def _validate(q, k, v, seq_lens) -> None:
    """Raise ValueError naming the shapes when the inputs do not fit together."""
    shapes = (f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)},"
              f" seq_lens {tuple(seq_lens.shape)}")  # fmt: skip
    if q.dim() != 3 or k.dim() != 4 or k.shape != v.shape:
        raise ValueError(f"need q (B, HQ, D) and k, v (B, T, HKV, D); got {shapes}")
    b, hq, d = q.shape
    if k.shape[0] != b or k.shape[3] != d or hq % k.shape[2] or seq_lens.shape != (b,):
        raise ValueError(
            f"batch, head_dim, head counts (HQ % HKV == 0) or seq_lens disagree: {shapes}"
        )
    if d > 256 or seq_lens.dtype != torch.int32:
        raise ValueError(f"need head_dim <= 256 and int32 seq_lens: {shapes}, {seq_lens.dtype}")
    if not (q.dtype == k.dtype == v.dtype) or any(t.stride(-1) != 1 for t in (q, k, v)):
        raise ValueError("q, k, v need one dtype and a contiguous last (head_dim) axis")


def attention_decode_dense_gqa(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    seq_lens: torch.Tensor | None = None,
    softmax_scale: float | None = None,
    *,
    block_n: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return one-token decode attention against a dense KV cache.

    Args:
        q: (B, HQ, D) bf16/fp16/fp32, last axis contiguous.
        k: (B, T, HKV, D) same dtype, HQ a multiple of HKV.
        v: (B, T, HKV, D) same dtype.
        seq_lens: (B,) int32 valid tokens per entry (<= T); None means all T.
        softmax_scale: Score scale; None means 1/sqrt(D).
        block_n: Tokens per loop step (power of two >= 16); None uses the heuristic.
        num_warps: Warps per program; None uses the heuristic.

    Returns:
        (B, HQ, D) tensor of q's dtype.

    Raises:
        ValueError: Shapes, dtypes or layouts do not fit together.
    """
    if seq_lens is None:
        seq_lens = torch.full((q.shape[0],), k.shape[1], dtype=torch.int32, device=q.device)
    _validate(q, k, v, seq_lens)
    b, hq, d = q.shape
    hkv = k.shape[2]
    out = torch.empty_like(q)
    if b == 0:
        return out
    scale = softmax_scale if softmax_scale is not None else d**-0.5
    cfg = _launch_config(d)
    group = hq // hkv
    _attention_decode_dense_gqa_kernel[(b, hkv)](
        q, k, v, out, seq_lens,
        d, scale * 1.4426950408889634,
        q.stride(0), q.stride(1),
        k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2),
        out.stride(0), out.stride(1),
        GROUP_SIZE=group, BLOCK_G=max(16, triton.next_power_of_2(group)),
        BLOCK_N=block_n or cfg["block_n"], BLOCK_D=max(16, triton.next_power_of_2(d)),
        UPCAST=_interpreting(), num_warps=num_warps or cfg["num_warps"], num_stages=3,
    )  # fmt: skip
    return out


def reference(q, k, v, seq_lens=None, softmax_scale=None):
    """Run one-query softmax attention per batch entry in fp32, cast to q's dtype."""
    group = q.shape[1] // k.shape[2]
    scale = softmax_scale if softmax_scale is not None else q.shape[2] ** -0.5
    out = torch.empty_like(q)
    for i in range(q.shape[0]):
        n = k.shape[1] if seq_lens is None else int(seq_lens[i])
        ks = k[i, :n].float().repeat_interleave(group, dim=1)  # (n, HQ, D)
        vs = v[i, :n].float().repeat_interleave(group, dim=1)
        p = (torch.einsum("hd,nhd->hn", q[i].float(), ks) * scale).softmax(-1)
        out[i] = torch.einsum("hn,nhd->hd", p, vs).to(q.dtype)
    return out


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return N(0, 1) decode queries and a dense KV cache.

    ``shape``: ``batch``, ``seq_len`` (cache length T), ``num_heads_q``, ``num_heads_kv``,
    ``head_dim``, optional ``seq_lens`` (list, each <= T; default all T).
    """
    b, t = shape["batch"], shape["seq_len"]
    hq, hkv, d = shape["num_heads_q"], shape["num_heads_kv"], shape["head_dim"]
    return {
        "q": torch.randn(b, hq, d, device=device).to(dtype),
        "k": torch.randn(b, t, hkv, d, device=device).to(dtype),
        "v": torch.randn(b, t, hkv, d, device=device).to(dtype),
        "seq_lens": torch.tensor(shape.get("seq_lens", [t] * b), dtype=torch.int32, device=device),
    }
