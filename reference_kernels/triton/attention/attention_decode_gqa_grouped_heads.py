"""
---
id: attention_decode_gqa_grouped_heads
title: Split-KV decode attention on a head-major cache, each program serving a whole GQA group
op_family: attention
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [gqa-head-packing, split-kv, flash-decoding, lse-reduce, online-softmax,
  exp2-softmax, fp32-accumulate, head-major-cache]
status: reference
launcher: attention_decode_gqa_grouped_heads
tuning:
  max_splits: [16, 1, 4, 64]
  block_n: [64, 16, 32, 128]
  num_warps: [4, 2, 8]
args:
  q: {shape: [B, HQ, D], dtypes: [bf16, fp16, fp32], aliases: [query]}
  k_cache: {shape: [B, HKV, T, D], like: q, aliases: [k, key, key_cache]}
  v_cache: {shape: [B, HKV, T, D], like: q, aliases: [v, value, value_cache]}
  seq_lens: {shape: [B], dtypes: [int32], optional: true, aliases: [cache_seqlens, context_lens]}
  softmax_scale: {type: float, default: null, aliases: [scale, sm_scale, attn_scale]}
returns:
  - {name: out, shape: [B, HQ, D], dtype: q}
problem:
  shapes: [{batch: 2, heads: 8, kv_heads: 2, capacity: 80, d: 32, seq_lens: [80, 37]}, {batch: 3, heads: 3, kv_heads: 1, capacity: 40, d: 40, seq_lens: [0, 1, 40]}]
  dtypes: [fp32, bf16]
  allow_tf32: true
measured: []
---
Decode attention (one query token per batch entry) over a dense head-major KV cache (B, HKV, T,
D), the layout of HF's static cache, where each head's T x D slab is contiguous. The grid is
(batch, KV head, split): a program takes all GROUP = HQ / HKV query heads of its KV head as the M
rows of a tensor-core tile (padded to 16) and one contiguous chunk of the valid tokens, so each K
and V element is read from HBM exactly once for the whole group AND a short batch with few KV
heads still launches enough programs (splits are added until B x HKV x splits reaches two waves of
SMs, capped by max_splits and by the token tiles). Each split runs an exp2-domain online softmax
and writes its unnormalised fp32 partial (running max, denominator, D accumulators per head); a
second kernel, one program per (batch, query head), merges the splits with the log-sum-exp rule
and writes the output. Bytes: 2 x valid tokens x HKV x D x 2 B (bf16) for K and V, plus (D + 2) x
4 B per head per split written and read back. Limits: splits are sized by the cache capacity T,
so with very uneven seq_lens the short entries launch splits that exit at once; head_dim <= 256;
groups over 16 heads use taller tiles.
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
def _decode_split_kernel(
    q_ptr, k_ptr, v_ptr, seq_lens_ptr, part_acc_ptr, part_ml_ptr,
    HQ, head_dim, chunk, scale_log2e,
    stride_qb, stride_qh, stride_kb, stride_kh, stride_kt, stride_vb, stride_vh, stride_vt,
    GROUP_SIZE: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr, NUM_SPLITS: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    batch = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    seq_len = tl.load(seq_lens_ptr + batch)
    lo = split * chunk
    hi = tl.minimum(seq_len, lo + chunk)

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
    # this head's contiguous (T, D) slab; int64 base: B x HKV x T x D can pass 2^31
    k_slab = k_ptr + batch.to(tl.int64) * stride_kb + kv_head.to(tl.int64) * stride_kh
    v_slab = v_ptr + batch.to(tl.int64) * stride_vb + kv_head.to(tl.int64) * stride_vh
    for n_start in range(lo, hi, BLOCK_N):
        tok = n_start + offs_n
        mask_n = tok < hi
        k_t = tl.load(k_slab + tok[None, :] * stride_kt + offs_d[:, None],
                      mask=mask_d[:, None] & mask_n[None, :], other=0.0)  # fmt: skip
        s = _mma(q, k_t, tl.zeros([BLOCK_G, BLOCK_N], tl.float32), UPCAST) * scale_log2e
        s = tl.where(mask_n[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))  # finite: each step has a valid token
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(v_slab + tok[:, None] * stride_vt + offs_d[None, :],
                    mask=mask_n[:, None] & mask_d[None, :], other=0.0)  # fmt: skip
        acc = _mma(p, v, acc * alpha[:, None], UPCAST)
        m_i = m_new

    # partials: acc (B, HQ, NUM_SPLITS, BLOCK_D) and (max, denominator) (B, HQ, NUM_SPLITS, 2)
    row = (batch * HQ + heads).to(tl.int64) * NUM_SPLITS + split
    tl.store(part_acc_ptr + row[:, None] * BLOCK_D + offs_d[None, :], acc, mask=mask_g[:, None])
    tl.store(part_ml_ptr + row * 2, m_i, mask=mask_g)  # -inf for an empty split
    tl.store(part_ml_ptr + row * 2 + 1, l_i, mask=mask_g)


@triton.jit
def _decode_merge_kernel(
    part_acc_ptr, part_ml_ptr, out_ptr, HQ, head_dim, stride_ob, stride_oh,
    BLOCK_D: tl.constexpr, NUM_SPLITS: tl.constexpr, BLOCK_S: tl.constexpr,
):  # fmt: skip
    batch = tl.program_id(0)
    head = tl.program_id(1)
    offs_s = tl.arange(0, BLOCK_S)
    offs_d = tl.arange(0, BLOCK_D)
    mask_s = offs_s < NUM_SPLITS
    rows = (batch * HQ + head).to(tl.int64) * NUM_SPLITS + offs_s
    m = tl.load(part_ml_ptr + rows * 2, mask=mask_s, other=float("-inf"))
    l_split = tl.load(part_ml_ptr + rows * 2 + 1, mask=mask_s, other=0.0)
    m_max = tl.max(m, axis=0)
    m_safe = tl.where(m_max == float("-inf"), 0.0, m_max)  # every split empty: seq_len 0
    weight = tl.where(m == float("-inf"), 0.0, tl.exp2(m - m_safe))  # log-sum-exp rescale
    acc = tl.load(part_acc_ptr + rows[:, None] * BLOCK_D + offs_d[None, :],
                  mask=mask_s[:, None], other=0.0)  # fmt: skip
    num = tl.sum(acc * weight[:, None], axis=0)
    den = tl.sum(l_split * weight, axis=0)
    out = num / tl.where(den > 0.0, den, 1.0)  # seq_len 0 writes zeros
    tl.store(out_ptr + batch * stride_ob + head * stride_oh + offs_d,
             out.to(out_ptr.dtype.element_ty), mask=offs_d < head_dim)  # fmt: skip


def _num_sms(device: torch.device) -> int:
    """Return the device's SM count (4 on the CPU, where the interpreter runs tests)."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4


def _interpreting() -> bool:
    """Return whether Triton runs in its CPU interpreter (it then needs fp32 tl.dot operands)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def _check(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor) -> None:
    """Raise ValueError when the shapes, dtypes or layouts do not fit."""
    if q.dim() != 3 or k_cache.dim() != 4 or k_cache.shape != v_cache.shape:
        raise ValueError(
            f"need q (B, HQ, D) and k_cache, v_cache (B, HKV, T, D); got q {tuple(q.shape)}, "
            f"k_cache {tuple(k_cache.shape)}, v_cache {tuple(v_cache.shape)}"
        )
    b, hq, d = q.shape
    hkv = k_cache.shape[1]
    if k_cache.shape[0] != b or k_cache.shape[3] != d or hkv == 0 or hq % hkv:
        raise ValueError(
            f"k_cache {tuple(k_cache.shape)} must share q's batch and head_dim, HKV dividing HQ"
        )
    if d > 256:
        raise ValueError(f"head_dim {d} > 256 does not fit in registers")
    dtypes = {q.dtype, k_cache.dtype, v_cache.dtype}
    if len(dtypes) != 1 or q.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise ValueError(f"need one bf16/fp16/fp32 dtype; got {sorted(map(str, dtypes))}")
    if q.stride(-1) != 1 or k_cache.stride(-1) != 1 or v_cache.stride(-1) != 1:
        raise ValueError("q, k_cache and v_cache need a contiguous last (head_dim) dimension")


def attention_decode_gqa_grouped_heads(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    seq_lens: torch.Tensor | None = None,
    softmax_scale: float | None = None,
    *,
    max_splits: int | None = None,
    block_n: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return one decode step of attention over a head-major dense cache.

    Args:
        q: (B, HQ, D) bf16/fp16/fp32, head_dim contiguous.
        k_cache: (B, HKV, T, D) same dtype, HKV dividing HQ.
        v_cache: (B, HKV, T, D) same dtype.
        seq_lens: (B,) int32 valid tokens per entry (<= T); None = all T.
        softmax_scale: Score scale; None = 1 / sqrt(D).
        max_splits: Most KV splits per (batch, KV head) (>= 1); None = 16.
        block_n: Tokens per step (power of two >= 16); None = 64.
        num_warps: Warps per program; None = 4.

    Returns:
        out: (B, HQ, D) in q's dtype, contiguous.

    Raises:
        ValueError: The shapes, dtypes, layouts or seq_lens do not fit.
    """
    _check(q, k_cache, v_cache)
    b, hq, d = q.shape
    hkv, t = k_cache.shape[1], k_cache.shape[2]
    if seq_lens is None:
        seq_lens = torch.full((b,), t, dtype=torch.int32, device=q.device)
    elif seq_lens.shape != (b,) or seq_lens.dtype != torch.int32:
        raise ValueError(
            f"seq_lens must be ({b},) int32; got {tuple(seq_lens.shape)} {seq_lens.dtype}"
        )
    if max_splits is not None and max_splits < 1:
        raise ValueError(f"max_splits must be >= 1, got {max_splits}")
    out = torch.empty((b, hq, d), dtype=q.dtype, device=q.device)
    if out.numel() == 0:
        return out
    cfg = {"max_splits": 16, "block_n": 64, "num_warps": 4}
    given = {"max_splits": max_splits, "block_n": block_n, "num_warps": num_warps}
    cfg.update({key: value for key, value in given.items() if value is not None})
    tiles = max(1, triton.cdiv(t, cfg["block_n"]))
    wanted = triton.cdiv(2 * _num_sms(q.device), b * hkv)  # two waves of programs
    splits = max(1, min(cfg["max_splits"], tiles, wanted))
    chunk = triton.cdiv(tiles, splits) * cfg["block_n"]  # whole tiles per split
    splits = triton.cdiv(t, chunk) if t else 1
    group = hq // hkv
    block_d = max(16, triton.next_power_of_2(d))
    part_acc = torch.empty((b * hq * splits, block_d), dtype=torch.float32, device=q.device)
    part_ml = torch.empty((b * hq * splits, 2), dtype=torch.float32, device=q.device)
    scale = 1.0 / math.sqrt(d) if softmax_scale is None else softmax_scale
    _decode_split_kernel[(b, hkv, splits)](
        q, k_cache, v_cache, seq_lens, part_acc, part_ml,
        hq, d, chunk, scale * 1.4426950408889634,
        q.stride(0), q.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
        GROUP_SIZE=group, BLOCK_G=max(16, triton.next_power_of_2(group)),
        BLOCK_N=cfg["block_n"], BLOCK_D=block_d, NUM_SPLITS=splits, UPCAST=_interpreting(),
        num_warps=cfg["num_warps"],
    )  # fmt: skip
    _decode_merge_kernel[(b, hq)](
        part_acc, part_ml, out, hq, d, out.stride(0), out.stride(1),
        BLOCK_D=block_d, NUM_SPLITS=splits, BLOCK_S=triton.next_power_of_2(splits),
        num_warps=cfg["num_warps"],
    )  # fmt: skip
    return out


def reference(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    seq_lens: torch.Tensor | None = None,
    softmax_scale: float | None = None,
) -> torch.Tensor:
    """Return softmax(q k^T * scale) v per entry over its valid prefix (fp32), in q's dtype."""
    b, hq, d = q.shape
    group = hq // k_cache.shape[1]
    scale = 1.0 / math.sqrt(d) if softmax_scale is None else softmax_scale
    out = torch.zeros(b, hq, d, dtype=torch.float32, device=q.device)
    for i in range(b):
        n = k_cache.shape[2] if seq_lens is None else int(seq_lens[i])
        if n == 0:
            continue
        k = k_cache[i, :, :n].float().repeat_interleave(group, dim=0)  # (HQ, n, D)
        v = v_cache[i, :, :n].float().repeat_interleave(group, dim=0)
        p = torch.softmax((k @ q[i].float()[:, :, None]).squeeze(-1) * scale, dim=-1)
        out[i] = (p[:, None, :] @ v).squeeze(1)
    return out.to(q.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return the operands for ``{"batch", "heads", "kv_heads", "capacity", "d", "seq_lens"}``.

    q and the caches ~ N(0, 1); ``seq_lens`` (a list) becomes the int32 tensor.
    """
    b, hq, hkv = shape["batch"], shape["heads"], shape["kv_heads"]
    t, d = shape["capacity"], shape["d"]
    return {
        "q": torch.randn(b, hq, d, device=device).to(dtype),
        "k_cache": torch.randn(b, hkv, t, d, device=device).to(dtype),
        "v_cache": torch.randn(b, hkv, t, d, device=device).to(dtype),
        "seq_lens": torch.tensor(shape["seq_lens"], dtype=torch.int32, device=device),
    }
