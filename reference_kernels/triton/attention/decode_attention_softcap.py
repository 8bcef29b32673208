"""
---
id: decode_attention_softcap
title: Decode attention with tanh logit softcapping (Gemma-2), GQA group packed into one MMA tile
op_family: attention
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [logit-softcap, tanh-via-exp, gqa-head-packing, online-softmax, fp32-accumulate]
status: reference
launcher: decode_attention_softcap
tuning:
  block_n: [64, 16, 32, 128]
  num_warps: [4, 2, 8]
args:
  q: {shape: [B, HQ, D], dtypes: [bf16, fp16, fp32], aliases: [query]}
  k: {shape: [B, T, HKV, D], like: q, aliases: [key, k_cache]}
  v: {shape: [B, T, HKV, D], like: q, aliases: [value, v_cache]}
  seq_lens: {shape: [B], dtypes: [int32], aliases: [cache_seqlens, context_lens]}
  softcap: {type: float, default: 50.0, aliases: [logit_softcap, attn_logit_softcapping]}
  softmax_scale: {type: float, default: null, aliases: [scale, sm_scale]}
returns:
  - {name: out, shape: [B, HQ, D], dtype: q}
problem:
  shapes: [{batch: 2, seq_len: 70, num_heads_q: 4, num_heads_kv: 2, head_dim: 40, softcap: 5.0, seq_lens: [70, 20]}, {batch: 1, seq_len: 33, num_heads_q: 8, num_heads_kv: 1, head_dim: 64}]
  dtypes: [fp32, bf16]
  allow_tf32: true
  atol: 0.02
  rtol: 0.02
measured: []
---
Decode attention whose logits are squashed before the softmax: s = cap * tanh(scale * q.k / cap)
(Gemma-2's attn_logit_softcapping, cap = 50), which bounds every logit to (-cap, cap). One program
owns one (batch, KV head) and stacks the GROUP = HQ / HKV query heads that share it as the M rows
of a tensor-core tile (padded to 16), so each K/V block is read once per group. The softcap is
fused into the score tile: tanh(x) = sign(x) (1 - e) / (1 + e) with e = exp(-2|x|), which never
overflows and saturates to +-1 for large |x|, for one exp and one division per score; the
softmax is online (fp32 running max, sum and accumulator). Bytes: the valid K/V once plus Q/O, as
plain decode; the extra exp per score is hidden behind the loads. Limits: no split over T, so
small B x HKV with long contexts under-fills the GPU; head_dim <= 256; cap must be > 0.
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
        acc = tl.dot(a.to(b.dtype), b, acc)
    return acc


@triton.jit
def _decode_attention_softcap_kernel(
    # pointers
    q_ptr,
    k_ptr,
    v_ptr,
    out_ptr,
    seq_lens_ptr,
    # sizes and scalars
    head_dim,
    scale_over_cap,  # softmax scale / cap: the tanh argument is q.k * this
    cap_log2e,  # cap * log2(e): capped scores go through exp2
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
    GROUP_SIZE: tl.constexpr,
    BLOCK_G: tl.constexpr,  # GROUP_SIZE padded to a power of two >= 16
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
    q = tl.load(q_ptr + batch * stride_qb + heads[:, None] * stride_qh + offs_d[None, :],
                mask=mask_g[:, None] & mask_d[None, :], other=0.0)  # fmt: skip

    m_i = tl.full([BLOCK_G], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_G], tl.float32)
    acc = tl.zeros([BLOCK_G, BLOCK_D], tl.float32)
    k_seq = k_ptr + batch.to(tl.int64) * stride_kb + kv_head * stride_kh
    v_seq = v_ptr + batch.to(tl.int64) * stride_vb + kv_head * stride_vh
    for n_start in range(0, seq_len, BLOCK_N):
        tok = n_start + offs_n
        mask_n = tok < seq_len
        k_t = tl.load(k_seq + tok[None, :] * stride_kt + offs_d[:, None],
                      mask=mask_d[:, None] & mask_n[None, :], other=0.0)  # fmt: skip
        x = _mma(q, k_t, tl.zeros([BLOCK_G, BLOCK_N], tl.float32), UPCAST) * scale_over_cap
        # softcap: cap * tanh(x), tanh through one exp of -2|x| (never overflows)
        e = tl.exp(-2.0 * tl.abs(x))
        t = (1.0 - e) / (1.0 + e)
        s = tl.where(x < 0, -t, t) * cap_log2e
        s = tl.where(mask_n[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(v_seq + tok[:, None] * stride_vt + offs_d[None, :],
                    mask=mask_n[:, None] & mask_d[None, :], other=0.0)  # fmt: skip
        acc = _mma(p, v, acc * alpha[:, None], UPCAST)
        m_i = m_new

    out = acc / tl.where(l_i > 0.0, l_i, 1.0)[:, None]  # seq_len 0 writes zeros
    tl.store(out_ptr + batch * stride_ob + heads[:, None] * stride_oh + offs_d[None, :],
             out.to(out_ptr.dtype.element_ty), mask=mask_g[:, None] & mask_d[None, :])  # fmt: skip


def _validate(q, k, v, seq_lens, softcap) -> None:
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
    if not softcap > 0:
        raise ValueError(
            f"softcap must be > 0 (use plain decode attention for no cap); got {softcap}"
        )
    if not (q.dtype == k.dtype == v.dtype) or any(t.stride(-1) != 1 for t in (q, k, v)):
        raise ValueError("q, k, v need one dtype and a contiguous last (head_dim) axis")


def decode_attention_softcap(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    seq_lens: torch.Tensor,
    softcap: float = 50.0,
    softmax_scale: float | None = None,
    *,
    block_n: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return decode attention with logits cap * tanh(scale * q.k / cap).

    Args:
        q: (B, HQ, D) bf16/fp16/fp32, last axis contiguous.
        k: (B, T, HKV, D) same dtype, HQ a multiple of HKV.
        v: (B, T, HKV, D) same dtype.
        seq_lens: (B,) int32 valid tokens per entry (<= T).
        softcap: The cap (> 0); logits end in (-cap, cap).
        softmax_scale: Score scale applied before the cap; None means 1/sqrt(D).
        block_n: Keys per loop step (power of two >= 16); None = 64.
        num_warps: Warps per program; None = 4.

    Returns:
        (B, HQ, D) tensor of q's dtype.

    Raises:
        ValueError: Shapes, dtypes, layouts or the cap do not fit together.
    """
    _validate(q, k, v, seq_lens, softcap)
    b, hq, d = q.shape
    hkv = k.shape[2]
    out = torch.empty_like(q)
    if out.numel() == 0:
        return out
    scale = softmax_scale if softmax_scale is not None else d**-0.5
    group = hq // hkv
    _decode_attention_softcap_kernel[(b, hkv)](
        q, k, v, out, seq_lens,
        d, scale / softcap, softcap * LOG2E,
        q.stride(0), q.stride(1),
        k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2),
        out.stride(0), out.stride(1),
        GROUP_SIZE=group, BLOCK_G=max(16, triton.next_power_of_2(group)),
        BLOCK_N=block_n or 64, BLOCK_D=max(16, triton.next_power_of_2(d)),
        UPCAST=os.environ.get("TRITON_INTERPRET") == "1",
        num_warps=num_warps or 4, num_stages=3,
    )  # fmt: skip
    return out


def reference(q, k, v, seq_lens, softcap=50.0, softmax_scale=None):
    """Run softcapped one-query attention per batch entry in fp32, cast to q's dtype."""
    group = q.shape[1] // k.shape[2]
    scale = softmax_scale if softmax_scale is not None else q.shape[2] ** -0.5
    out = torch.zeros_like(q)
    for i in range(q.shape[0]):
        n = int(seq_lens[i])
        if n == 0:
            continue
        ks = k[i, :n].float().repeat_interleave(group, dim=1)
        vs = v[i, :n].float().repeat_interleave(group, dim=1)
        s = torch.einsum("hd,nhd->hn", q[i].float(), ks) * scale
        p = (softcap * torch.tanh(s / softcap)).softmax(-1)
        out[i] = torch.einsum("hn,nhd->hd", p, vs).to(q.dtype)
    return out


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return queries, a dense cache and seq_lens; q is scaled by 4 so the cap bites.

    ``shape``: ``batch``, ``seq_len`` (T), ``num_heads_q``, ``num_heads_kv``, ``head_dim``,
    optional ``softcap`` (default 50), ``seq_lens`` (list, each <= T; default all T).
    """
    b, t = shape["batch"], shape["seq_len"]
    hq, hkv, d = shape["num_heads_q"], shape["num_heads_kv"], shape["head_dim"]
    return {
        "q": (4 * torch.randn(b, hq, d, device=device)).to(dtype),
        "k": torch.randn(b, t, hkv, d, device=device).to(dtype),
        "v": torch.randn(b, t, hkv, d, device=device).to(dtype),
        "seq_lens": torch.tensor(shape.get("seq_lens", [t] * b), dtype=torch.int32, device=device),
        "softcap": shape.get("softcap", 50.0),
    }
