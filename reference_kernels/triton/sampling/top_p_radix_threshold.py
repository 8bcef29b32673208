"""
---
id: top_p_radix_threshold
title: Top-p (nucleus) logit mask without sorting, by a radix-16 search of the threshold's mass
op_family: sampling
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [fp32]
bound: memory
techniques:
  [row-per-program, k-ary-threshold-search, mass-histogram, order-preserving-int-key,
   online-softmax, chunked-loop]
status: reference
launcher: top_p_radix_threshold
tuning:
  radix: [16, 2, 4]
  block_v: [256, 64, 128, 512, 1024]
  num_warps: [4, 1, 2, 8, 16]
args:
  logits: {shape: [T, V], dtypes: [fp32], aliases: [x, scores]}
  top_p: {type: float, default: 0.9, aliases: [p, topp]}
returns:
  - {name: out, shape: [T, V], dtype: fp32}
problem:
  shapes: [{rows: 3, vocab: 100, top_p: 0.9}, {rows: 2, vocab: 37, top_p: 0.3}]
  dtypes: []
measured: []
---
Nucleus filtering of sampling logits without a sort: with p = softmax(row), entry x is kept iff the
probability mass of the entries strictly more likely than x is < top_p (the smallest set of most
likely tokens whose mass reaches top_p; ties at the boundary all kept); the rest become -inf. The
threshold is the largest key tau (the fp32 bits of the weight e = exp(x - max), which order like
the weights) with mass(key >= tau) >= top_p * Z. One program per row finds max and Z in one
online pass, then searches tau RADIX-ways instead of by bisection: each pass splits the current key
range into RADIX buckets, sums the weights falling in each bucket (a (BLOCK_V, RADIX) one-hot
reduction: a mass histogram), turns them into suffix masses (plus the mass already known above the
range) and descends into the last bucket whose suffix still reaches top_p * Z. With RADIX = 16 the
32-bit key is settled in 8 passes instead of 32 (top_k_top_p_combined and topk_filter_bisect
bisect, one bit per pass), for RADIX compares per weight per pass; a last pass writes x or -inf.
Cost: 10 reads of the row (4 bytes each, mostly from L2) and 9 exps per logit at RADIX 16. When it
wins: vocabulary rows where the 33 L2 passes of a bisection dominate. Limits: fp32 only; BLOCK_V *
RADIX <= 16384 (registers); bucket sums are fp32 in chunk order, so an entry whose exclusive mass
lies within rounding of top_p may differ from a sorted cumsum; one program per row; no NaNs.
Not atrex30's topk_filter: that operator keeps each row's k largest logits
(a rank cut), while this keeps the top-p probability mass, so their -inf positions differ.
"""

import torch
import triton
import triton.language as tl

_MAX_TILE = 16384  # BLOCK_V * RADIX one-hot elements per program


@triton.jit
def _top_p_radix_threshold_kernel(
    # pointers
    x_ptr,
    y_ptr,
    # sizes
    V,
    # strides (elements; last dim contiguous)
    stride_xm,
    stride_ym,
    # scalars
    top_p,
    # meta
    RADIX: tl.constexpr,
    LOG2_RADIX: tl.constexpr,
    BLOCK_V: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_xm
    y_row = y_ptr + row * stride_ym
    offs = tl.arange(0, BLOCK_V)
    # pass 1: online max and sum of exp
    m = tl.full((), float("-inf"), tl.float32)
    z = tl.zeros((), dtype=tl.float32)
    for start in range(0, V, BLOCK_V):
        mask = start + offs < V
        x = tl.load(x_row + start + offs, mask=mask, other=float("-inf"))
        m_new = tl.maximum(m, tl.max(x, axis=0))
        z = z * tl.exp(m - m_new) + tl.sum(tl.where(mask, tl.exp(x - m_new), 0.0), axis=0)
        m = m_new
    target = top_p * z
    # search range [base, base + 2^shift * RADIX); above = mass of the keys past the range
    base = tl.zeros((), dtype=tl.int64)
    above = tl.zeros((), dtype=tl.float32)
    buckets = tl.arange(0, RADIX)
    shift = tl.full((), 32, tl.int64)
    for _ in range(32 // LOG2_RADIX):
        shift -= LOG2_RADIX  # bucket width 2^shift
        mass = tl.zeros((RADIX,), dtype=tl.float32)
        for start in range(0, V, BLOCK_V):
            mask = start + offs < V
            e = tl.exp(tl.load(x_row + start + offs, mask=mask, other=float("-inf")) - m)
            key = e.to(tl.int32, bitcast=True).to(tl.int64)
            bucket = (key - base) >> shift
            live = mask & (key >= base) & (bucket < RADIX)
            hit = live[:, None] & (bucket[:, None] == buckets[None, :])
            mass += tl.sum(tl.where(hit, e[:, None], 0.0), axis=0)
        # suffix[b] = mass of keys >= base + b * 2^shift
        suffix = above + tl.sum(mass, axis=0) - (tl.cumsum(mass, axis=0) - mass)
        pick = tl.max(tl.where(suffix >= target, buckets, 0), axis=0)
        above = tl.sum(tl.where(buckets == pick, suffix - mass, 0.0), axis=0)
        base += pick.to(tl.int64) << shift
    # base = the largest key whose upper mass reaches top_p: keep every entry with key >= base
    for start in range(0, V, BLOCK_V):
        mask = start + offs < V
        x = tl.load(x_row + start + offs, mask=mask, other=float("-inf"))
        keep = tl.exp(x - m).to(tl.int32, bitcast=True).to(tl.int64) >= base
        tl.store(y_row + start + offs, tl.where(keep, x, float("-inf")), mask=mask)


def top_p_radix_threshold(
    logits: torch.Tensor,
    top_p: float = 0.9,
    *,
    radix: int | None = None,
    block_v: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return logits with everything outside each row's top-p nucleus set to -inf.

    Args:
        logits: (T, V) fp32, last dimension contiguous.
        top_p: Nucleus mass in (0, 1]; 1.0 keeps every entry with nonzero probability.
        radix: Buckets per search pass, 2, 4 or 16 (32 / log2(radix) passes); None = 16.
        block_v: Vocab chunk per loop step (power of two); None = min(next_pow2(V), 4096 / radix).
        num_warps: Warps per program; None = 4.

    Returns:
        out: (T, V) fp32, contiguous.

    Raises:
        ValueError: logits is not 2D fp32, top_p is outside (0, 1], radix is not 2/4/16, or
            block_v * radix > 16384.
    """
    if logits.dim() != 2 or logits.dtype != torch.float32:
        raise ValueError(f"logits must be (T, V) fp32; got {tuple(logits.shape)} {logits.dtype}")
    if not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must lie in (0, 1]; got {top_p}")
    rdx = 16 if radix is None else radix
    if rdx not in (2, 4, 16):
        raise ValueError(f"radix must be 2, 4 or 16 (a power of 2 dividing 32 bits); got {rdx}")
    x = logits if logits.stride(-1) == 1 else logits.contiguous()
    t, v = x.shape
    y = torch.empty((t, v), dtype=x.dtype, device=x.device)
    cfg = {"block_v": min(triton.next_power_of_2(max(v, 1)), 4096 // rdx), "num_warps": 4}
    given = {"block_v": block_v, "num_warps": num_warps}
    cfg.update({key: value for key, value in given.items() if value is not None})
    if cfg["block_v"] * rdx > _MAX_TILE:
        raise ValueError(f"block_v * radix = {cfg['block_v'] * rdx} > {_MAX_TILE}; lower one")
    if y.numel() == 0:
        return y
    _top_p_radix_threshold_kernel[(t,)](
        x, y,
        v,
        x.stride(0), y.stride(0),
        float(top_p),
        RADIX=rdx, LOG2_RADIX=rdx.bit_length() - 1, BLOCK_V=cfg["block_v"],
        num_warps=cfg["num_warps"],
    )  # fmt: skip
    return y


def reference(logits: torch.Tensor, top_p: float = 0.9) -> torch.Tensor:
    """Sort-based nucleus: keep x iff the mass of strictly more likely entries is < top_p."""
    probs = torch.softmax(logits.float(), dim=-1)
    sorted_p, _ = probs.sort(dim=-1, descending=True)
    exclusive = sorted_p.cumsum(dim=-1) - sorted_p
    # the smallest kept probability of each row, then keep every entry >= it (ties kept)
    kept_min = torch.where(exclusive < top_p, sorted_p, torch.inf).min(dim=-1, keepdim=True).values
    return logits.masked_fill(probs < kept_min, float("-inf"))


def make_inputs(shape: dict, dtype: torch.dtype = torch.float32, device: str = "cpu") -> dict:
    """Return ``{"logits", "top_p"}`` for ``{"rows", "vocab", "top_p"}``; 2 * N(0, 1) logits."""
    logits = 2.0 * torch.randn(shape["rows"], shape["vocab"], device=device)
    return {"logits": logits.to(dtype), "top_p": shape.get("top_p", 0.9)}
