"""
---
id: decode_attention_sliding_window
title: Sliding-window decode attention on a dense KV cache, one program per (batch, query head)
op_family: attention
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [sliding-window, window-skip, decode-gemv, online-softmax, exp2-softmax, gqa]
status: reference
launcher: decode_attention_sliding_window
tuning:
  block_n: [64, 16, 32, 128]
  num_warps: [4, 1, 2, 8]
args:
  q: {shape: [B, HQ, D], dtypes: [bf16, fp16, fp32], aliases: [query]}
  k: {shape: [B, T, HKV, D], like: q, aliases: [key, k_cache]}
  v: {shape: [B, T, HKV, D], like: q, aliases: [value, v_cache]}
  seq_lens: {shape: [B], dtypes: [int32], aliases: [cache_seqlens, context_lens]}
  window: {type: int, aliases: [sliding_window, window_size]}
  softmax_scale: {type: float, default: null, aliases: [scale, sm_scale]}
returns:
  - {name: out, shape: [B, HQ, D], dtype: q}
problem:
  shapes: [{batch: 2, seq_len: 70, num_heads_q: 4, num_heads_kv: 2, head_dim: 40, window: 33, seq_lens: [70, 20]}, {batch: 1, seq_len: 50, num_heads_q: 3, num_heads_kv: 3, head_dim: 64, window: 1}]
  dtypes: [fp32, bf16]
  atol: 0.02
  rtol: 0.02
measured: []
---
Decode attention (one query per batch entry, at position seq_len - 1) restricted to a sliding
window: the query sees only keys j with seq_len - window <= j < seq_len (Mistral / Gemma local
layers). One program owns one (batch, query head); its key loop starts at the first window block
instead of 0, so the cost is O(window) whatever the context length: a 32k cache with a 4k window
reads 1/8 of the bytes a full decode would. Scores are a GEMV done as a broadcast multiply and a
row reduction (no tensor cores: one query row would waste 15/16 of an MMA tile), softmax is online
in the exp2 domain with fp32 running max, sum and accumulator. Bytes: 2 x min(window, L) x D
elements of K/V per head (GQA heads of one group re-read the same K/V, served from L2). Limits:
no split over the window, so B x HQ programs must fill the GPU; head_dim <= 256; a window of 0 or
seq_len 0 writes zeros.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _decode_attention_sliding_window_kernel(
    # pointers
    q_ptr,
    k_ptr,
    v_ptr,
    out_ptr,
    seq_lens_ptr,
    # sizes and scalars
    head_dim,
    window,
    scale_log2e,  # softmax scale * log2(e)
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
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    batch = tl.program_id(0)
    head = tl.program_id(1)
    kv_head = head // GROUP_SIZE
    seq_len = tl.load(seq_lens_ptr + batch)
    start = tl.maximum(seq_len - window, 0)  # first key inside the window

    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    mask_d = offs_d < head_dim
    q = tl.load(q_ptr + batch * stride_qb + head * stride_qh + offs_d, mask=mask_d, other=0.0)
    q = q.to(tl.float32) * scale_log2e

    m_i = float("-inf")
    l_i = 0.0
    acc = tl.zeros([BLOCK_D], tl.float32)
    k_seq = k_ptr + batch.to(tl.int64) * stride_kb + kv_head * stride_kh
    v_seq = v_ptr + batch.to(tl.int64) * stride_vb + kv_head * stride_vh
    # the loop skips every block before the window: O(window) work for any context length
    for n_start in range(start, seq_len, BLOCK_N):
        tok = n_start + offs_n
        mask_n = tok < seq_len
        mask_nd = mask_n[:, None] & mask_d[None, :]
        k = tl.load(k_seq + tok[:, None] * stride_kt + offs_d[None, :], mask=mask_nd, other=0.0)
        s = tl.sum(k.to(tl.float32) * q[None, :], axis=1)  # GEMV as broadcast + reduce
        s = tl.where(mask_n, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=0))  # finite: each block has a valid key
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=0)
        v = tl.load(v_seq + tok[:, None] * stride_vt + offs_d[None, :], mask=mask_nd, other=0.0)
        acc = acc * alpha + tl.sum(p[:, None] * v.to(tl.float32), axis=0)
        m_i = m_new

    out = acc / tl.where(l_i > 0.0, l_i, 1.0)  # an empty window writes zeros
    tl.store(out_ptr + batch * stride_ob + head * stride_oh + offs_d,
             out.to(out_ptr.dtype.element_ty), mask=mask_d)  # fmt: skip


def _validate(q, k, v, seq_lens, window) -> None:
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
    if window < 0:
        raise ValueError(f"window must be >= 0 keys; got {window}")
    if not (q.dtype == k.dtype == v.dtype) or any(t.stride(-1) != 1 for t in (q, k, v)):
        raise ValueError("q, k, v need one dtype and a contiguous last (head_dim) axis")


def decode_attention_sliding_window(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    seq_lens: torch.Tensor,
    window: int,
    softmax_scale: float | None = None,
    *,
    block_n: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return one-token decode attention over the last ``window`` keys of each entry.

    Args:
        q: (B, HQ, D) bf16/fp16/fp32, last axis contiguous.
        k: (B, T, HKV, D) same dtype, HQ a multiple of HKV.
        v: (B, T, HKV, D) same dtype.
        seq_lens: (B,) int32 valid tokens per entry (<= T); the query is token seq_len - 1.
        window: Keys visited, counting the query's own token (keys j >= seq_len - window).
        softmax_scale: Score scale; None means 1/sqrt(D).
        block_n: Keys per loop step (power of two); None = 64.
        num_warps: Warps per program; None = 4.

    Returns:
        (B, HQ, D) tensor of q's dtype.

    Raises:
        ValueError: Shapes, dtypes, layouts or the window do not fit together.
    """
    _validate(q, k, v, seq_lens, window)
    b, hq, d = q.shape
    out = torch.empty_like(q)
    if out.numel() == 0:
        return out
    scale = softmax_scale if softmax_scale is not None else d**-0.5
    _decode_attention_sliding_window_kernel[(b, hq)](
        q, k, v, out, seq_lens,
        d, window, scale * 1.4426950408889634,
        q.stride(0), q.stride(1),
        k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2),
        out.stride(0), out.stride(1),
        GROUP_SIZE=hq // k.shape[2], BLOCK_N=block_n or 64,
        BLOCK_D=triton.next_power_of_2(d), num_warps=num_warps or 4,
    )  # fmt: skip
    return out


def reference(q, k, v, seq_lens, window, softmax_scale=None):
    """Run windowed one-query softmax attention per batch entry in fp32, cast to q's dtype."""
    group = q.shape[1] // k.shape[2]
    scale = softmax_scale if softmax_scale is not None else q.shape[2] ** -0.5
    out = torch.zeros_like(q)
    for i in range(q.shape[0]):
        n = int(seq_lens[i])
        lo = max(n - window, 0)
        if n == lo:
            continue
        ks = k[i, lo:n].float().repeat_interleave(group, dim=1)  # (n - lo, HQ, D)
        vs = v[i, lo:n].float().repeat_interleave(group, dim=1)
        p = (torch.einsum("hd,nhd->hn", q[i].float(), ks) * scale).softmax(-1)
        out[i] = torch.einsum("hn,nhd->hd", p, vs).to(q.dtype)
    return out


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return N(0, 1) queries, a dense cache, seq_lens and the window.

    ``shape``: ``batch``, ``seq_len`` (T), ``num_heads_q``, ``num_heads_kv``, ``head_dim``,
    ``window``, optional ``seq_lens`` (list, each <= T; default all T).
    """
    b, t = shape["batch"], shape["seq_len"]
    hq, hkv, d = shape["num_heads_q"], shape["num_heads_kv"], shape["head_dim"]
    return {
        "q": torch.randn(b, hq, d, device=device).to(dtype),
        "k": torch.randn(b, t, hkv, d, device=device).to(dtype),
        "v": torch.randn(b, t, hkv, d, device=device).to(dtype),
        "seq_lens": torch.tensor(shape.get("seq_lens", [t] * b), dtype=torch.int32, device=device),
        "window": shape["window"],
    }
