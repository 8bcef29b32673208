"""
---
id: mla_decode_attention_paged_blocks
title: MLA decode over a packed latent cache in token blocks, one program per (sequence, head tile)
op_family: attention
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [mla-absorbed, latent-cache, varlen, head-tiling, online-softmax, tensor-core-mma]
status: reference
launcher: mla_decode_attention_paged_blocks
tuning:
  block_h: [16, 32, 64]
  block_n: [32, 16, 64]
  num_warps: [8, 4, 2]
args:
  q: {shape: [B, H, DK], dtypes: [bf16, fp16, fp32], aliases: [query]}
  kv_cache: {shape: [TT, 1, DK], like: q, aliases: [latent_cache, kv_c]}
  seq_lens: {shape: [B], dtypes: [int32], aliases: [cache_seqlens, context_lens]}
  kv_lora_rank: {type: int, default: 512, aliases: [rank]}
  softmax_scale: {type: float, default: null, aliases: [scale, sm_scale, attn_scale]}
returns:
  - {name: out, shape: [B, H, kv_lora_rank], dtype: q}
problem:
  shapes: [{seq_lens: [37, 5, 20], num_heads: 5, kv_lora_rank: 48, rope_dim: 16}, {seq_lens: [9], num_heads: 20, kv_lora_rank: 64, rope_dim: 8}]
  dtypes: [fp32, bf16]
  allow_tf32: true
  atol: 0.02
  rtol: 0.02
measured:
  - {device: NVIDIA H200, shape: mla_decode_attention/0, dtype: bf16, latency_us: 13.632, sol_fraction: 0.2136, date: '2026-12-03'}
---
MLA (DeepSeek multi-head latent attention) decode with absorbed projections: every query head of
a sequence attends to one shared latent cache whose rows are [c_kv (kv_lora_rank = R) | k_pe
(rope, P)], DK = R + P = 576 wide; the keys are the full rows and the values their first R
columns, out = softmax(q k^T * scale) v with scale = 1/sqrt(DK) by default. Layout: the cache is
packed (sum of seq_lens, 1, DK), sequence b's rows after those of sequences 0 .. b-1 (the vLLM /
atrex varlen layout); its first row is found in-kernel by summing the earlier seq_lens, so the
launcher needs no host-side prefix sum. One program per (sequence, BLOCK_H heads) walks its
sequence's rows in blocks of BLOCK_N tokens: each block is read once as two column slices of the
same rows, the R-wide latent part (used for both Q K^T and P V, so it is loaded once per block)
and the P-wide rope part, and both products run on tensor cores with an online softmax (exp2,
fp32 state, a (BLOCK_H, R) fp32 accumulator). Bytes: the latent block is read H / BLOCK_H times per
sequence (once per head tile; 128 heads with BLOCK_H = 64 read it twice, mostly from L2) plus q
and out. Limits: B * ceil(H / BLOCK_H) programs, so one short sequence with few heads leaves SMs
idle (split the KV for that); the (BLOCK_H, R) accumulator must fit registers (R <= 512 with
BLOCK_H = 16-32 on 8 warps); the in-kernel prefix sum costs O(B) loads per program.
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
def _mla_decode_paged_blocks_kernel(
    q_ptr, kv_ptr, out_ptr, seq_lens_ptr,
    num_heads, rank, rope_dim, scale_log2e,
    stride_qb, stride_qh, stride_kt, stride_ob, stride_oh,
    BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_R: tl.constexpr,
    BLOCK_P: tl.constexpr, BLOCK_B: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    batch = tl.program_id(0)
    offs_h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    offs_n = tl.arange(0, BLOCK_N)
    offs_r = tl.arange(0, BLOCK_R)
    offs_p = tl.arange(0, BLOCK_P)
    mask_h = offs_h < num_heads
    mask_r = offs_r < rank
    mask_p = offs_p < rope_dim

    # first cache row of this sequence: the sum of the earlier sequences' lengths
    start = tl.zeros([], tl.int64)
    for b0 in range(0, batch, BLOCK_B):
        offs_b = b0 + tl.arange(0, BLOCK_B)
        start += tl.sum(tl.load(seq_lens_ptr + offs_b, mask=offs_b < batch, other=0).to(tl.int64))
    seq_len = tl.load(seq_lens_ptr + batch)

    q_rows = q_ptr + batch * stride_qb + offs_h[:, None] * stride_qh
    q_lat = tl.load(q_rows + offs_r[None, :], mask=mask_h[:, None] & mask_r[None, :], other=0.0)
    q_pe = tl.load(q_rows + rank + offs_p[None, :], mask=mask_h[:, None] & mask_p[None, :],
                   other=0.0)  # fmt: skip

    m_i = tl.full([BLOCK_H], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_H], tl.float32)
    acc = tl.zeros([BLOCK_H, BLOCK_R], tl.float32)
    for n_start in range(0, seq_len, BLOCK_N):
        tok = n_start + offs_n
        mask_n = tok < seq_len
        rows = kv_ptr + (start + tok)[:, None] * stride_kt  # int64 row offsets
        c_kv = tl.load(rows + offs_r[None, :], mask=mask_n[:, None] & mask_r[None, :], other=0.0)
        k_pe = tl.load(rows + rank + offs_p[None, :], mask=mask_n[:, None] & mask_p[None, :],
                       other=0.0)  # fmt: skip
        s = _mma(q_lat, tl.trans(c_kv), tl.zeros([BLOCK_H, BLOCK_N], tl.float32), UPCAST)
        s = _mma(q_pe, tl.trans(k_pe), s, UPCAST) * scale_log2e
        s = tl.where(mask_n[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))  # finite: each block has a valid token
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = _mma(p, c_kv, acc * alpha[:, None], UPCAST)  # the latent block is also V
        m_i = m_new

    out = acc / tl.where(l_i > 0.0, l_i, 1.0)[:, None]  # seq_len 0 writes zeros
    o_ptrs = out_ptr + batch * stride_ob + offs_h[:, None] * stride_oh + offs_r[None, :]
    tl.store(o_ptrs, out.to(out_ptr.dtype.element_ty), mask=mask_h[:, None] & mask_r[None, :])


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


def mla_decode_attention_paged_blocks(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    seq_lens: torch.Tensor,
    kv_lora_rank: int = 512,
    softmax_scale: float | None = None,
    *,
    block_h: int | None = None,
    block_n: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return MLA decode attention of every head over its sequence's packed latent rows.

    Args:
        q: (B, H, DK) bf16/fp16/fp32, DK = kv_lora_rank + rope dim, last axis contiguous.
        kv_cache: (sum(seq_lens), 1, DK) same dtype, sequences stored back to back.
        seq_lens: (B,) int32 cached tokens per sequence.
        kv_lora_rank: Latent width R: the values are the first R columns of each row.
        softmax_scale: Score scale; None means 1/sqrt(DK).
        block_h: Heads per program (power of two >= 16); None = 16, or 32 when R <= 128.
        block_n: Tokens per block (power of two >= 16); None = 32.
        num_warps: Warps per program; None = 8 for R >= 256, else 4.

    Returns:
        (B, H, kv_lora_rank) tensor of q's dtype.

    Raises:
        ValueError: Shapes, dtypes or layouts do not fit together.
    """
    _validate(q, kv_cache, seq_lens, kv_lora_rank)
    b, h, dk = q.shape
    out = torch.empty((b, h, kv_lora_rank), dtype=q.dtype, device=q.device)
    if out.numel() == 0:
        return out
    block_h = block_h or (16 if kv_lora_rank > 128 else 32)
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(dk)
    _mla_decode_paged_blocks_kernel[(b, triton.cdiv(h, block_h))](
        q, kv_cache, out, seq_lens,
        h, kv_lora_rank, dk - kv_lora_rank, scale * 1.4426950408889634,
        q.stride(0), q.stride(1), kv_cache.stride(0), out.stride(0), out.stride(1),
        BLOCK_H=block_h, BLOCK_N=block_n or 32,
        BLOCK_R=max(16, triton.next_power_of_2(kv_lora_rank)),
        BLOCK_P=max(16, triton.next_power_of_2(dk - kv_lora_rank)),
        BLOCK_B=min(1024, triton.next_power_of_2(b)),
        UPCAST=os.environ.get("TRITON_INTERPRET") == "1",
        num_warps=num_warps or (8 if kv_lora_rank >= 256 else 4),
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
