"""
---
id: mla_decode_attention_latent_tiled
title: MLA decode with exact softmax statistics first, then P V one latent tile at a time
op_family: attention
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [mla-absorbed, latent-cache, varlen, head-tiling, two-pass-softmax,
             latent-dim-tiling, chunked-qk, tensor-core-mma]
status: reference
launcher: mla_decode_attention_latent_tiled
tuning:
  block_h: [16, 32, 64]
  block_r: [128, 64, 256]
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
  shapes: [{seq_lens: [37, 5, 0], num_heads: 5, kv_lora_rank: 48, rope_dim: 16}, {seq_lens: [20], num_heads: 17, kv_lora_rank: 32, rope_dim: 8}]
  dtypes: [fp32, bf16]
  allow_tf32: true
  atol: 0.02
  rtol: 0.02
measured:
  - {device: NVIDIA H200, shape: mla_decode_attention/0, dtype: bf16, latency_us: 49.088, sol_fraction: 0.0619, date: '2026-12-03'}
---
atrex30's mla_decode_attention (DeepSeek MLA decode over the absorbed latent cache: keys are the
full DK = R + P rows of a packed (sum(seq_lens), 1, DK) cache, values their first R = kv_lora_rank
columns, softmax(q k^T / sqrt(DK)) v in fp32). Program (b, head tile) owns BLOCK_H heads of
sequence b and never holds a (BLOCK_H, R) accumulator. Pass 1 streams the sequence's rows once and
keeps only the exact softmax statistics (running max and denominator per head; scores formed on
tensor cores as a loop over DK in BLOCK_DK chunks). Pass 2 loops over the R latent dims in
BLOCK_R tiles; per tile it re-streams the rows, recomputes the scores, forms the FINAL
probabilities p = exp2(s - m) / l (no rescaling of the accumulator, no alpha multiplies) and
accumulates p @ v[:, tile] into a (BLOCK_H, BLOCK_R) fp32 tile that is stored as soon as the rows
are done. Live registers: a quarter of a full-R accumulator at BLOCK_R = 128 and R = 512, inside
one program (unlike the head-grouped design, which splits the value slices over programs and
keeps an online softmax per slice). Cost: the QK^T product runs 1 + R / BLOCK_R times and the rows
are re-read from L2 as often; decode has the FLOPs to spare, HBM reads stay one pass when the
sequence's rows fit in L2. Limits: one program per (sequence, head tile), so a batch of 1 with 16
heads runs one program (see the split designs); the sequence start is an in-kernel O(B) prefix sum.
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
def _scores(q_rows, kv_rows, mask_h, mask_n, dk, scale_log2e, BLOCK_H: tl.constexpr,
            BLOCK_N: tl.constexpr, BLOCK_DK: tl.constexpr, UPCAST: tl.constexpr):  # fmt: skip
    """Return (BLOCK_H, BLOCK_N) scores in the log2 domain, -inf past the sequence end."""
    offs_c = tl.arange(0, BLOCK_DK)
    s = tl.zeros([BLOCK_H, BLOCK_N], tl.float32)
    for c0 in range(0, dk, BLOCK_DK):
        cols = c0 + offs_c
        mask_c = cols < dk
        qc = tl.load(q_rows + cols[None, :], mask=mask_h[:, None] & mask_c[None, :], other=0.0)
        kc = tl.load(kv_rows + cols[None, :], mask=mask_n[:, None] & mask_c[None, :], other=0.0)
        s = _mma(qc, tl.trans(kc), s, UPCAST)
    return tl.where(mask_n[None, :], s * scale_log2e, float("-inf"))


@triton.jit
def _mla_latent_tiled_kernel(
    q_ptr, kv_ptr, seq_lens_ptr, out_ptr, num_heads, dk, rank, scale_log2e,
    stride_qb, stride_qh, stride_kt, stride_ob, stride_oh,
    BLOCK_B: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_DK: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    batch = tl.program_id(0)
    offs_h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    offs_n = tl.arange(0, BLOCK_N)
    offs_r = tl.arange(0, BLOCK_R)
    mask_h = offs_h < num_heads
    # first cache row of this sequence: the sum of the earlier sequences' lengths
    start = tl.zeros([], tl.int64)
    for b0 in range(0, batch, BLOCK_B):
        offs_b = b0 + tl.arange(0, BLOCK_B)
        start += tl.sum(tl.load(seq_lens_ptr + offs_b, mask=offs_b < batch, other=0).to(tl.int64))
    seq_len = tl.load(seq_lens_ptr + batch)
    q_rows = q_ptr + batch * stride_qb + offs_h[:, None] * stride_qh

    # pass 1: exact per-head max and denominator, no accumulator
    m_i = tl.full([BLOCK_H], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_H], tl.float32)
    for n0 in range(0, seq_len, BLOCK_N):
        tok = n0 + offs_n
        mask_n = tok < seq_len
        kv_rows = kv_ptr + (start + tok)[:, None] * stride_kt
        s = _scores(q_rows, kv_rows, mask_h, mask_n, dk, scale_log2e,
                    BLOCK_H, BLOCK_N, BLOCK_DK, UPCAST)  # fmt: skip
        m_new = tl.maximum(m_i, tl.max(s, axis=1))  # finite: each block has a valid row
        l_i = l_i * tl.exp2(m_i - m_new) + tl.sum(tl.exp2(s - m_new[:, None]), axis=1)
        m_i = m_new
    inv_l = 1.0 / tl.where(l_i > 0.0, l_i, 1.0)  # seq_len 0 writes zeros
    m_safe = tl.where(m_i == float("-inf"), 0.0, m_i)

    # pass 2: one latent tile at a time, final probabilities, no rescaling
    for r0 in range(0, rank, BLOCK_R):
        cols = r0 + offs_r
        mask_r = cols < rank
        acc = tl.zeros([BLOCK_H, BLOCK_R], tl.float32)
        for n0 in range(0, seq_len, BLOCK_N):
            tok = n0 + offs_n
            mask_n = tok < seq_len
            kv_rows = kv_ptr + (start + tok)[:, None] * stride_kt
            s = _scores(q_rows, kv_rows, mask_h, mask_n, dk, scale_log2e,
                        BLOCK_H, BLOCK_N, BLOCK_DK, UPCAST)  # fmt: skip
            p = tl.exp2(s - m_safe[:, None]) * inv_l[:, None]
            v = tl.load(kv_rows + cols[None, :], mask=mask_n[:, None] & mask_r[None, :], other=0.0)
            acc = _mma(p, v, acc, UPCAST)
        tl.store(
            out_ptr + batch * stride_ob + offs_h[:, None] * stride_oh + cols[None, :],
            acc.to(out_ptr.dtype.element_ty),
            mask=mask_h[:, None] & mask_r[None, :],
        )


def _interpreting() -> bool:
    """Return whether Triton runs in its CPU interpreter (it then needs fp32 tl.dot operands)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def mla_decode_attention_latent_tiled(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    seq_lens: torch.Tensor,
    kv_lora_rank: int = 512,
    softmax_scale: float | None = None,
    *,
    block_h: int = 16,
    block_r: int = 128,
    block_n: int = 32,
    block_dk: int = 64,
    num_warps: int = 4,
) -> torch.Tensor:
    """Return MLA decode attention of every head over its sequence's latent cache rows.

    Args:
        q: (B, H, DK) bf16/fp16/fp32, DK = kv_lora_rank + rope dim.
        kv_cache: (sum(seq_lens), 1, DK), same dtype; sequence b's rows follow those of 0 .. b-1.
        seq_lens: (B,) int32 cache rows per sequence.
        kv_lora_rank: R, the value width (the first R columns of each row).
        softmax_scale: Score scale; None means 1/sqrt(DK).
        block_h: Heads per program (power of two >= 16).
        block_r: Latent columns per PV tile (power of two >= 16).
        block_n: Cache rows per step (power of two >= 16).
        block_dk: Columns per QK^T chunk (power of two >= 16).
        num_warps: Warps per program.

    Returns:
        (B, H, kv_lora_rank) tensor of q's dtype.

    Raises:
        ValueError: Shapes, dtypes or the rank do not fit together.
    """
    shapes = (
        f"q {tuple(q.shape)}, kv_cache {tuple(kv_cache.shape)}, seq_lens {tuple(seq_lens.shape)}"
    )
    if q.dim() != 3 or kv_cache.dim() != 3 or kv_cache.shape[1] != 1:
        raise ValueError(f"need q (B, H, DK) and kv_cache (T, 1, DK); got {shapes}")
    b, h, dk = q.shape
    if kv_cache.shape[2] != dk or seq_lens.shape != (b,) or not 0 < kv_lora_rank <= dk:
        raise ValueError(f"need matching DK, seq_lens (B,), 0 < kv_lora_rank <= DK; got {shapes}")
    if q.dtype != kv_cache.dtype or seq_lens.dtype != torch.int32:
        raise ValueError(f"need q and kv_cache of one dtype and int32 seq_lens; got {shapes}")
    if q.stride(2) != 1 or kv_cache.stride(2) != 1:
        raise ValueError(f"q and kv_cache need a contiguous last dim; got {shapes}")
    out = torch.empty((b, h, kv_lora_rank), dtype=q.dtype, device=q.device)
    if out.numel() == 0:
        return out
    scale = softmax_scale if softmax_scale is not None else dk**-0.5
    _mla_latent_tiled_kernel[(b, triton.cdiv(h, block_h))](
        q, kv_cache, seq_lens, out, h, dk, kv_lora_rank, scale * 1.4426950408889634,
        q.stride(0), q.stride(1), kv_cache.stride(0), out.stride(0), out.stride(1),
        BLOCK_B=256, BLOCK_H=block_h, BLOCK_R=block_r, BLOCK_N=block_n, BLOCK_DK=block_dk,
        UPCAST=_interpreting(), num_warps=num_warps,
    )  # fmt: skip
    return out


def reference(q, kv_cache, seq_lens, kv_lora_rank=512, softmax_scale=None):
    """Per sequence, fp32 softmax attention of all heads over its latent rows."""
    scale = softmax_scale if softmax_scale is not None else q.shape[2] ** -0.5
    out = torch.zeros(q.shape[0], q.shape[1], kv_lora_rank, dtype=q.dtype, device=q.device)
    start = 0
    for i, n in enumerate(seq_lens.tolist()):
        kv = kv_cache[start : start + n, 0].float()
        start += n
        if n:
            p = (q[i].float() @ kv.T * scale).softmax(-1)
            out[i] = (p @ kv[:, :kv_lora_rank]).to(q.dtype)
    return out


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return N(0, 1) q and a packed latent cache (atrex scale) with int32 lengths.

    ``shape``: ``seq_lens`` (list), ``num_heads``, ``kv_lora_rank``, ``rope_dim``.
    """
    lens = list(shape["seq_lens"])
    h, r, p = shape["num_heads"], shape["kv_lora_rank"], shape["rope_dim"]
    return {
        "q": torch.randn(len(lens), h, r + p, device=device).to(dtype),
        "kv_cache": torch.randn(sum(lens), 1, r + p, device=device).to(dtype),
        "seq_lens": torch.tensor(lens, dtype=torch.int32, device=device),
        "kv_lora_rank": r,
    }
