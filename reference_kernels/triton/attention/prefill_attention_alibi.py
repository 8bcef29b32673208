"""
---
id: prefill_attention_alibi
title: Causal prefill flash attention with ALiBi per-head linear position biases, dense (B, H, S, D)
op_family: attention
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: compute
techniques: [alibi, flash-attention, causal-block-skip, online-softmax, exp2-softmax]
status: reference
launcher: prefill_attention_alibi
tuning:
  block_m: [64, 16, 32, 128]
  block_n: [64, 16, 32, 128]
  num_warps: [4, 2, 8]
args:
  q: {shape: [B, H, S, D], dtypes: [bf16, fp16, fp32], aliases: [query]}
  k: {shape: [B, H, S, D], like: q, aliases: [key]}
  v: {shape: [B, H, S, D], like: q, aliases: [value]}
  alibi_slopes: {shape: [H], dtypes: [fp32], aliases: [slopes]}
  softmax_scale: {type: float, default: null, aliases: [scale, sm_scale]}
returns:
  - {name: out, shape: [B, H, S, D], dtype: q}
problem:
  shapes: [{batch: 1, heads: 2, seq_len: 45, head_dim: 40}, {batch: 2, heads: 4, seq_len: 16, head_dim: 64}]
  dtypes: [fp32, bf16]
  allow_tf32: true
  atol: 0.02
  rtol: 0.02
measured: []
---
Causal self-attention for prefill with ALiBi (BLOOM, MPT, Baichuan): the score of query i and key
j <= i gets the bias -slope_h * (i - j), a per-head linear distance penalty that replaces
positional embeddings. One program owns BLOCK_M queries of one (batch, head) and streams key
blocks 0 .. its diagonal block through two tensor-core products and an online softmax; blocks
entirely above the diagonal are skipped (half the FLOPs of full attention). The bias is computed
in registers from the two index vectors (one FMA per score, in the exp2 domain), so no (S, S)
bias tensor is ever read: torch's SDPA with an explicit ALiBi mask reads S^2 extra elements per
head. FLOPs: 2 x S^2 x D per head (causal half of 4 S^2 D). Limits: keys beyond the diagonal that
ALiBi would make negligible are still visited (no ALiBi-driven early exit); one KV head per query
head (no GQA); head_dim <= 256.
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
def _prefill_attention_alibi_kernel(
    # pointers
    q_ptr,
    k_ptr,
    v_ptr,
    out_ptr,
    slopes_ptr,
    # sizes and scalars
    num_heads,
    seq_len,
    head_dim,
    scale_log2e,
    # strides (elements; head_dim contiguous)
    stride_qb,
    stride_qh,
    stride_qs,
    stride_kb,
    stride_kh,
    stride_ks,
    stride_vb,
    stride_vh,
    stride_vs,
    stride_ob,
    stride_oh,
    stride_os,
    # meta
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    UPCAST: tl.constexpr,
):
    start_m = tl.program_id(0) * BLOCK_M
    bh = tl.program_id(1)
    batch = (bh // num_heads).to(tl.int64)
    head = bh % num_heads
    slope_log2e = tl.load(slopes_ptr + head) * 1.4426950408889634

    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    mask_m = offs_m < seq_len
    mask_d = offs_d < head_dim
    q_base = q_ptr + batch * stride_qb + head * stride_qh
    q = tl.load(q_base + offs_m[:, None] * stride_qs + offs_d[None, :],
                mask=mask_m[:, None] & mask_d[None, :], other=0.0)  # fmt: skip
    k_base = k_ptr + batch * stride_kb + head * stride_kh
    v_base = v_ptr + batch * stride_vb + head * stride_vh

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    # causal: key blocks past this query block's last row are skipped
    end_n = tl.minimum(start_m + BLOCK_M, seq_len)
    for n_start in range(0, end_n, BLOCK_N):
        tok = n_start + offs_n
        mask_n = tok < seq_len
        k_t = tl.load(k_base + tok[None, :] * stride_ks + offs_d[:, None],
                      mask=mask_d[:, None] & mask_n[None, :], other=0.0)  # fmt: skip
        s = _mma(q, k_t, tl.zeros([BLOCK_M, BLOCK_N], tl.float32), UPCAST) * scale_log2e
        dist = (offs_m[:, None] - tok[None, :]).to(tl.float32)  # i - j >= 0 where visible
        s = s - slope_log2e * dist  # ALiBi from the indices: no bias tensor in memory
        visible = (dist >= 0) & mask_n[None, :]
        s = tl.where(visible, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))  # finite: key 0 is visible to every row
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(v_base + tok[:, None] * stride_vs + offs_d[None, :],
                    mask=mask_n[:, None] & mask_d[None, :], other=0.0)  # fmt: skip
        acc = _mma(p, v, acc * alpha[:, None], UPCAST)
        m_i = m_new

    out = acc / tl.where(l_i > 0.0, l_i, 1.0)[:, None]
    o_base = out_ptr + batch * stride_ob + head * stride_oh
    tl.store(o_base + offs_m[:, None] * stride_os + offs_d[None, :],
             out.to(out_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_d[None, :])  # fmt: skip


def prefill_attention_alibi(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    alibi_slopes: torch.Tensor,
    softmax_scale: float | None = None,
    *,
    block_m: int | None = None,
    block_n: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return causal softmax(q k^T * scale - slope_h * (i - j)) v per (batch, head).

    Args:
        q: (B, H, S, D) bf16/fp16/fp32, last axis contiguous.
        k: (B, H, S, D) same dtype.
        v: (B, H, S, D) same dtype.
        alibi_slopes: (H,) fp32 per-head slopes (>= 0 penalises distance).
        softmax_scale: Score scale; None means 1/sqrt(D).
        block_m: Queries per program (power of two >= 16); None = 64.
        block_n: Keys per loop step (power of two >= 16); None = 64.
        num_warps: Warps per program; None = 4.

    Returns:
        (B, H, S, D) tensor of q's dtype.

    Raises:
        ValueError: Shapes, dtypes or layouts do not fit together.
    """
    shapes = f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
    if q.dim() != 4 or k.shape != q.shape or v.shape != q.shape:
        raise ValueError(f"need q, k, v of one (B, H, S, D) shape; got {shapes}")
    b, h, s, d = q.shape
    if alibi_slopes.shape != (h,) or alibi_slopes.dtype != torch.float32:
        raise ValueError(
            f"alibi_slopes must be fp32 of shape (H,) = ({h},); got "
            f"{tuple(alibi_slopes.shape)} {alibi_slopes.dtype}"
        )
    if d > 256 or not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"need head_dim <= 256 and one dtype; got {shapes}, {q.dtype}")
    if any(t.stride(-1) != 1 for t in (q, k, v)):
        raise ValueError("q, k, v need a contiguous last (head_dim) axis")
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    if out.numel() == 0:
        return out
    scale = softmax_scale if softmax_scale is not None else d**-0.5
    bm, bn = block_m or 64, block_n or 64
    slopes = alibi_slopes.contiguous()
    _prefill_attention_alibi_kernel[(triton.cdiv(s, bm), b * h)](
        q, k, v, out, slopes,
        h, s, d, scale * LOG2E,
        q.stride(0), q.stride(1), q.stride(2),
        k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2),
        out.stride(0), out.stride(1), out.stride(2),
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_D=max(16, triton.next_power_of_2(d)),
        UPCAST=os.environ.get("TRITON_INTERPRET") == "1",
        num_warps=num_warps or 4, num_stages=2,
    )  # fmt: skip
    return out


def reference(q, k, v, alibi_slopes, softmax_scale=None):
    """Causal ALiBi attention in fp32 with an explicit (S, S) bias, cast to q's dtype."""
    s, d = q.shape[2], q.shape[3]
    scale = softmax_scale if softmax_scale is not None else d**-0.5
    pos = torch.arange(s, device=q.device)
    dist = (pos[:, None] - pos[None, :]).float()  # i - j
    bias = -alibi_slopes.float()[:, None, None] * dist  # (H, S, S)
    scores = torch.einsum("bhid,bhjd->bhij", q.float(), k.float()) * scale + bias
    scores = scores.masked_fill(dist < 0, float("-inf"))
    return torch.einsum("bhij,bhjd->bhid", scores.softmax(-1), v.float()).to(q.dtype)


def alibi_slopes_for(num_heads: int) -> torch.Tensor:
    """Return the standard ALiBi slopes 2^(-8 i / n) for i = 1..n (n = num_heads, power of 2)."""
    return torch.tensor([2.0 ** (-8.0 * (i + 1) / num_heads) for i in range(num_heads)])


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return N(0, 1) q, k, v of (batch, heads, seq_len, head_dim) and standard slopes."""
    b, h, s, d = shape["batch"], shape["heads"], shape["seq_len"], shape["head_dim"]
    return {
        "q": torch.randn(b, h, s, d, device=device).to(dtype),
        "k": torch.randn(b, h, s, d, device=device).to(dtype),
        "v": torch.randn(b, h, s, d, device=device).to(dtype),
        "alibi_slopes": alibi_slopes_for(h).to(device),
    }
