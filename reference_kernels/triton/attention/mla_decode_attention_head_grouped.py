"""
---
id: mla_decode_attention_head_grouped
title: MLA decode on a (sequence, head group, value slice) grid, scores in DK chunks, PV per slice
op_family: attention
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [mla-absorbed, latent-cache, varlen, head-tiling, value-dim-split, chunked-qk,
  online-softmax, tensor-core-mma]
status: reference
launcher: mla_decode_attention_head_grouped
tuning:
  block_h: [16, 32, 64]
  block_dv: [128, 64, 256, 512]
  block_n: [32, 16, 64]
  block_dk: [64, 32, 128]
  num_warps: [4, 2, 8]
args:
  q: {shape: [B, H, DK], dtypes: [bf16, fp16, fp32], aliases: [query]}
  kv_cache: {shape: [TT, 1, DK], like: q, aliases: [latent_cache, kv_c]}
  seq_lens: {shape: [B], dtypes: [int32], aliases: [cache_seqlens, context_lens]}
  kv_lora_rank: {type: int, default: 512, aliases: [rank]}
  softmax_scale: {type: float, default: null, aliases: [scale, sm_scale, attn_scale]}
returns:
  - {name: out, shape: [B, H, kv_lora_rank], dtype: q}
problem:
  shapes: [{seq_lens: [37, 5, 20], num_heads: 5, kv_lora_rank: 48, rope_dim: 16}, {seq_lens: [3], num_heads: 20, kv_lora_rank: 40, rope_dim: 8}]
  dtypes: [fp32, bf16]
  allow_tf32: true
measured:
  - {device: NVIDIA H200, shape: mla_decode_attention/0, dtype: bf16, latency_us: 19.216, sol_fraction: 0.1532, date: '2026-12-03'}
---
atrex30's mla_decode_attention (DeepSeek MLA decode over the absorbed latent cache: keys are the
full DK = R + P rows [c_kv | k_pe] of a packed (sum(seq_lens), 1, DK) cache, values their first R
= kv_lora_rank columns, softmax(q k^T / sqrt(DK)) v in fp32). Program (b, g, d) of a 3-D grid owns
sequence b, a group of BLOCK_H heads (sharing every cache row it loads, like the per-head-tile
design) and a BLOCK_DV-wide slice d of the R value columns. Per block of BLOCK_N cache rows it
forms the (BLOCK_H, BLOCK_N) scores on tensor cores as a loop over DK in BLOCK_DK-wide column
chunks (q chunk @ k chunk^T), so no full (BLOCK_N, DK) tile is ever live, then runs the online
softmax (exp2, fp32 state) and accumulates P @ v only into its (BLOCK_H, BLOCK_DV) slice. Compared
with mla_decode_attention_paged_blocks (one program per sequence and head tile holding a (BLOCK_H,
R) accumulator and the whole latent block), the R / BLOCK_DV value slices multiply the programs
(B = 1, H = 16, R = 512: 4 programs instead of 1 with BLOCK_DV = 128) and cut the live registers to
a quarter, at the price of recomputing the scores once per slice (R / BLOCK_DV times the QK
FLOPs, which decode has to spare) and re-reading the rows from L2 once per slice. Wins for small
batches of long contexts where (B * H / BLOCK_H) is far below the SM count and split-KV's merge
pass is not wanted. Limits: the score recomputation makes it compute-heavier for large batches
(use the per-head-tile design there); the sequence start is an in-kernel O(B) prefix sum.
"""

import math
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
def _mla_head_grouped_kernel(
    q_ptr, kv_ptr, out_ptr, seq_lens_ptr,
    num_heads, rank, dk, scale_log2e,
    stride_qb, stride_qh, stride_kt, stride_ob, stride_oh,
    BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_DK: tl.constexpr,
    BLOCK_DV: tl.constexpr, BLOCK_B: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    batch = tl.program_id(0)
    offs_h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    offs_v = tl.program_id(2) * BLOCK_DV + tl.arange(0, BLOCK_DV)  # this program's value slice
    offs_n = tl.arange(0, BLOCK_N)
    offs_c = tl.arange(0, BLOCK_DK)
    mask_h = offs_h < num_heads
    mask_v = offs_v < rank

    # first cache row of this sequence: the sum of the earlier sequences' lengths
    start = tl.zeros([], tl.int64)
    for b0 in range(0, batch, BLOCK_B):
        offs_b = b0 + tl.arange(0, BLOCK_B)
        start += tl.sum(tl.load(seq_lens_ptr + offs_b, mask=offs_b < batch, other=0).to(tl.int64))
    seq_len = tl.load(seq_lens_ptr + batch)
    q_rows = q_ptr + batch * stride_qb + offs_h[:, None] * stride_qh

    m_i = tl.full([BLOCK_H], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_H], tl.float32)
    acc = tl.zeros([BLOCK_H, BLOCK_DV], tl.float32)
    for n_start in range(0, seq_len, BLOCK_N):
        tok = n_start + offs_n
        mask_n = tok < seq_len
        rows = kv_ptr + (start + tok)[:, None] * stride_kt  # int64 row offsets
        s = tl.zeros([BLOCK_H, BLOCK_N], tl.float32)
        for c0 in range(0, dk, BLOCK_DK):  # scores over DK in column chunks
            cols = c0 + offs_c
            mc = cols < dk
            qc = tl.load(q_rows + cols[None, :], mask=mask_h[:, None] & mc[None, :], other=0.0)
            kc = tl.load(rows + cols[None, :], mask=mask_n[:, None] & mc[None, :], other=0.0)
            s = _mma(qc, tl.trans(kc), s, UPCAST)
        s = tl.where(mask_n[None, :], s * scale_log2e, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))  # finite: each block has a valid token
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(rows + offs_v[None, :], mask=mask_n[:, None] & mask_v[None, :], other=0.0)
        acc = _mma(p, v, acc * alpha[:, None], UPCAST)
        m_i = m_new

    out = acc / tl.where(l_i > 0.0, l_i, 1.0)[:, None]  # seq_len 0 writes zeros
    o_ptrs = out_ptr + batch * stride_ob + offs_h[:, None] * stride_oh + offs_v[None, :]
    tl.store(o_ptrs, out.to(out_ptr.dtype.element_ty), mask=mask_h[:, None] & mask_v[None, :])


def _validate(q, kv_cache, seq_lens, kv_lora_rank) -> None:
    """Raise ValueError naming the shapes when the inputs do not fit together."""
    shapes = (
        f"q {tuple(q.shape)}, kv_cache {tuple(kv_cache.shape)}, seq_lens {tuple(seq_lens.shape)}"
    )
    if q.dim() != 3 or kv_cache.dim() != 3 or kv_cache.shape[1] != 1:
        raise ValueError(f"need q (B, H, DK) and kv_cache (total tokens, 1, DK); got {shapes}")
    if kv_cache.shape[2] != q.shape[2] or not 0 < kv_lora_rank < q.shape[2]:
        raise ValueError(f"need one DK and 0 < kv_lora_rank ({kv_lora_rank}) < DK; got {shapes}")
    if seq_lens.shape != (q.shape[0],) or seq_lens.dtype != torch.int32:
        raise ValueError(f"seq_lens must be int32 ({q.shape[0]},); got {seq_lens.dtype} {shapes}")
    if q.dtype != kv_cache.dtype:
        raise ValueError(f"q and kv_cache dtypes differ: {q.dtype}, {kv_cache.dtype}")
    if q.stride(2) != 1 or kv_cache.stride(2) != 1:
        raise ValueError("q and kv_cache need a contiguous last (DK) axis")


def mla_decode_attention_head_grouped(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    seq_lens: torch.Tensor,
    kv_lora_rank: int = 512,
    softmax_scale: float | None = None,
    *,
    block_h: int = 16,
    block_dv: int = 128,
    block_n: int = 32,
    block_dk: int = 64,
    num_warps: int = 4,
) -> torch.Tensor:
    """Return MLA decode attention of every head over its sequence's packed latent rows.

    Args:
        q: (B, H, DK) bf16/fp16/fp32, DK = kv_lora_rank + rope dim, last axis contiguous.
        kv_cache: (sum(seq_lens), 1, DK) same dtype, sequences stored back to back.
        seq_lens: (B,) int32 cached tokens per sequence.
        kv_lora_rank: Latent width R: the values are the first R columns of each row.
        softmax_scale: Score scale; None means 1/sqrt(DK).
        block_h: Heads per program (power of two >= 16).
        block_dv: Value columns per program (power of two >= 16).
        block_n: Cache rows per block (power of two >= 16).
        block_dk: DK chunk of the score product (power of two >= 16).
        num_warps: Warps per program.

    Returns:
        (B, H, kv_lora_rank) tensor of q's dtype.

    Raises:
        ValueError: Shapes, dtypes, layouts or block sizes do not fit.
    """
    _validate(q, kv_cache, seq_lens, kv_lora_rank)
    for name, value in (("block_h", block_h), ("block_dv", block_dv), ("block_n", block_n),
                        ("block_dk", block_dk)):  # fmt: skip
        if value < 16 or value & (value - 1):
            raise ValueError(f"{name} must be a power of two >= 16; got {value}")
    b, h, dk = q.shape
    out = torch.empty((b, h, kv_lora_rank), dtype=q.dtype, device=q.device)
    if out.numel() == 0:
        return out
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(dk)
    grid = (b, triton.cdiv(h, block_h), triton.cdiv(kv_lora_rank, block_dv))
    _mla_head_grouped_kernel[grid](
        q, kv_cache, out, seq_lens,
        h, kv_lora_rank, dk, scale * 1.4426950408889634,
        q.stride(0), q.stride(1), kv_cache.stride(0), out.stride(0), out.stride(1),
        BLOCK_H=block_h, BLOCK_N=block_n, BLOCK_DK=block_dk, BLOCK_DV=block_dv,
        BLOCK_B=min(1024, triton.next_power_of_2(b)),
        UPCAST=os.environ.get("TRITON_INTERPRET") == "1", num_warps=num_warps,
    )  # fmt: skip
    return out


def reference(q, kv_cache, seq_lens, kv_lora_rank=512, softmax_scale=None):
    """Per sequence, fp32 softmax attention of all heads over its latent rows."""
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(q.shape[2])
    out = torch.empty(q.shape[0], q.shape[1], kv_lora_rank, dtype=q.dtype, device=q.device)
    start = 0
    for i, n in enumerate(seq_lens.tolist()):
        kv = kv_cache[start : start + n, 0].float()
        start += n
        p = (q[i].float() @ kv.T * scale).softmax(-1)
        out[i] = (p @ kv[:, :kv_lora_rank]).to(q.dtype)
    return out


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return q, a packed latent cache and lengths.

    ``shape``: ``seq_lens`` (list, >= 1 each), ``num_heads``, ``kv_lora_rank``, ``rope_dim``.
    """
    lens = list(shape["seq_lens"])
    h, r, p = shape["num_heads"], shape["kv_lora_rank"], shape["rope_dim"]
    return {
        "q": torch.randn(len(lens), h, r + p, device=device).to(dtype),
        "kv_cache": torch.randn(sum(lens), 1, r + p, device=device).to(dtype),
        "seq_lens": torch.tensor(lens, dtype=torch.int32, device=device),
        "kv_lora_rank": r,
    }
