"""
---
id: linear_attention_chunked
title: Causal linear attention in chunks, intra-chunk masked QK^T V plus a running KV state
op_family: other
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: compute
techniques: [linear-attention, chunked-parallel, state-in-registers, causal-mask, tensor-core-mma]
status: reference
launcher: linear_attention_chunked
tuning:
  block_c: [64, 16, 32, 128]
  num_warps: [4, 2, 8]
args:
  q: {shape: [B, H, L, K], dtypes: [bf16, fp16, fp32], aliases: [query]}
  k: {shape: [B, H, L, K], like: q, aliases: [key]}
  v: {shape: [B, H, L, V], like: q, aliases: [value]}
  scale: {type: float, default: null, aliases: [softmax_scale]}
returns:
  - {name: o, shape: [B, H, L, V], dtype: q}
  - {name: final_state, shape: [B, H, K, V], dtype: fp32}
problem:
  shapes: [{batch: 1, heads: 2, seqlen: 45, dk: 32, dv: 24}, {batch: 2, heads: 1, seqlen: 16, dk: 64, dv: 64}]
  dtypes: [fp32, bf16]
  allow_tf32: true
  atol: 0.02
  rtol: 0.02
measured: []
---
Causal linear attention without gating or normalisation: o_t = scale * sum_{s <= t} (q_t . k_s)
v_s, i.e. o_t = scale * q_t S_t with the state S_t = sum_{s <= t} k_s^T v_s (K x V). One program
owns one (batch, head) and walks the sequence in chunks of BLOCK_C tokens with S in fp32
registers: per chunk, o = q S (the past, one C x K x V product) + tril(q k^T) v (the chunk
itself, two C x C products), then S += k^T v (one K x C x V product). All four products run on
tensor cores, so the cost is O(L (C K + K V)) instead of the O(L^2 K) of masked quadratic
attention or the O(L K V) of a token-serial scan with no MMA. Bytes: q, k, v and o once each.
Limits: K, V <= 128 (state (K, V) in registers); B x H programs only (no split over V or the
sequence), so few heads with long sequences under-fill the GPU; the state enters the MMA in the
input dtype (bf16 rounding of S on the GPU, fp32 in the interpreter).
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
        acc = tl.dot(a, b.to(a.dtype), acc)
    return acc


@triton.jit
def _linear_attention_chunked_kernel(
    # pointers
    q_ptr,
    k_ptr,
    v_ptr,
    o_ptr,
    state_ptr,
    # sizes and scalars
    num_heads,
    seqlen,
    dk,
    dv,
    scale,
    # strides (elements; last axis contiguous)
    stride_qb,
    stride_qh,
    stride_ql,
    stride_kb,
    stride_kh,
    stride_kl,
    stride_vb,
    stride_vh,
    stride_vl,
    stride_ob,
    stride_oh,
    stride_ol,
    stride_sb,
    stride_sh,
    stride_sk,
    # meta
    BLOCK_C: tl.constexpr,
    BLOCK_K: tl.constexpr,
    BLOCK_V: tl.constexpr,
    UPCAST: tl.constexpr,
):
    bh = tl.program_id(0)
    batch = (bh // num_heads).to(tl.int64)
    head = bh % num_heads
    offs_c = tl.arange(0, BLOCK_C)
    offs_k = tl.arange(0, BLOCK_K)
    offs_v = tl.arange(0, BLOCK_V)
    mask_k = offs_k < dk
    mask_v = offs_v < dv
    causal = offs_c[:, None] >= offs_c[None, :]
    q_base = q_ptr + batch * stride_qb + head * stride_qh
    k_base = k_ptr + batch * stride_kb + head * stride_kh
    v_base = v_ptr + batch * stride_vb + head * stride_vh
    o_base = o_ptr + batch * stride_ob + head * stride_oh

    state = tl.zeros([BLOCK_K, BLOCK_V], tl.float32)  # sum of k^T v over all past chunks
    for c0 in range(0, seqlen, BLOCK_C):
        rows = c0 + offs_c
        mask_c = rows < seqlen
        q = tl.load(q_base + rows[:, None] * stride_ql + offs_k[None, :],
                    mask=mask_c[:, None] & mask_k[None, :], other=0.0)  # fmt: skip
        k_t = tl.load(k_base + rows[None, :] * stride_kl + offs_k[:, None],
                      mask=mask_k[:, None] & mask_c[None, :], other=0.0)  # fmt: skip
        v = tl.load(v_base + rows[:, None] * stride_vl + offs_v[None, :],
                    mask=mask_c[:, None] & mask_v[None, :], other=0.0)  # fmt: skip
        # the past through the state, the chunk itself through a masked quadratic tile
        o = _mma(q, state, tl.zeros([BLOCK_C, BLOCK_V], tl.float32), UPCAST)
        s = _mma(q, k_t, tl.zeros([BLOCK_C, BLOCK_C], tl.float32), UPCAST)
        s = tl.where(causal, s, 0.0)
        o = _mma(s.to(q.dtype), v, o, UPCAST) * scale
        tl.store(o_base + rows[:, None] * stride_ol + offs_v[None, :],
                 o.to(o_ptr.dtype.element_ty), mask=mask_c[:, None] & mask_v[None, :])  # fmt: skip
        state = _mma(k_t, v, state, UPCAST)  # masked rows are zeros: no effect

    s_ptrs = state_ptr + batch * stride_sb + head * stride_sh + offs_k[:, None] * stride_sk
    tl.store(s_ptrs + offs_v[None, :], state, mask=mask_k[:, None] & mask_v[None, :])


def linear_attention_chunked(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float | None = None,
    *,
    block_c: int | None = None,
    num_warps: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return causal linear attention o and the final state sum_s k_s^T v_s.

    Args:
        q: (B, H, L, K) bf16/fp16/fp32, last axis contiguous.
        k: (B, H, L, K) same dtype.
        v: (B, H, L, V) same dtype.
        scale: Multiplies q . k; None means K^-0.5.
        block_c: Tokens per chunk (power of two >= 16); None = 64.
        num_warps: Warps per program; None = 4.

    Returns:
        ``(o, final_state)``: (B, H, L, V) in q's dtype and (B, H, K, V) fp32.

    Raises:
        ValueError: Shapes, dtypes or layouts do not fit together.
    """
    shapes = f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
    if q.dim() != 4 or k.shape != q.shape or v.dim() != 4 or v.shape[:3] != q.shape[:3]:
        raise ValueError(f"need q, k (B, H, L, K) and v (B, H, L, V); got {shapes}")
    b, h, seqlen, dk = q.shape
    dv = v.shape[3]
    if dk > 128 or dv > 128:
        raise ValueError(f"K and V must be <= 128 (the state is in registers); got {shapes}")
    if not (q.dtype == k.dtype == v.dtype) or any(t.stride(-1) != 1 for t in (q, k, v)):
        raise ValueError(f"q, k, v need one dtype and a contiguous last axis; got {shapes}")
    o = torch.empty(b, h, seqlen, dv, dtype=q.dtype, device=q.device)
    state = torch.zeros(b, h, dk, dv, dtype=torch.float32, device=q.device)
    if o.numel() == 0:
        return o, state
    _linear_attention_chunked_kernel[(b * h,)](
        q, k, v, o, state,
        h, seqlen, dk, dv, scale if scale is not None else dk**-0.5,
        q.stride(0), q.stride(1), q.stride(2),
        k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2),
        o.stride(0), o.stride(1), o.stride(2),
        state.stride(0), state.stride(1), state.stride(2),
        BLOCK_C=block_c or 64, BLOCK_K=max(16, triton.next_power_of_2(dk)),
        BLOCK_V=max(16, triton.next_power_of_2(dv)),
        UPCAST=os.environ.get("TRITON_INTERPRET") == "1", num_warps=num_warps or 4,
    )  # fmt: skip
    return o, state


def reference(q, k, v, scale=None):
    """Masked quadratic form in fp32: o = scale * tril(q k^T) v; state = k^T v."""
    scale = scale if scale is not None else q.shape[-1] ** -0.5
    qf, kf, vf = q.float(), k.float(), v.float()
    seqlen = q.shape[2]
    causal = torch.ones(seqlen, seqlen, dtype=torch.bool, device=q.device).tril()
    s = (qf @ kf.transpose(-1, -2)).masked_fill(~causal, 0.0)
    return (scale * s @ vf).to(q.dtype), kf.transpose(-1, -2) @ vf


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return N(0, 1) q, v and k / sqrt(L) (o stays O(1)); ``batch, heads, seqlen, dk, dv``."""
    b, h, seq, dk, dv = (shape[n] for n in ("batch", "heads", "seqlen", "dk", "dv"))
    return {
        "q": torch.randn(b, h, seq, dk, device=device).to(dtype),
        "k": (torch.randn(b, h, seq, dk, device=device) / seq**0.5).to(dtype),
        "v": torch.randn(b, h, seq, dv, device=device).to(dtype),
    }
