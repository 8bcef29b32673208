"""
---
id: top_k_top_p_combined
title: Top-k then top-p logit mask in one program per row, both thresholds found by key bisection
op_family: sampling
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [fp32]
bound: memory
techniques: [row-per-program, radix-bisection, order-preserving-int-key, chunked-loop,
  online-max, fused-filters]
status: reference
launcher: top_k_top_p_combined
tuning:
  block_v: [1024, 256, 512, 2048, 4096]
  num_warps: [4, 1, 2, 8, 16]
args:
  logits: {shape: [T, V], dtypes: [fp32], aliases: [x, scores]}
  top_k: {type: int, default: 50, aliases: [topk, k]}
  top_p: {type: float, default: 1.0, aliases: [topp, p]}
returns:
  - {name: out, shape: [T, V], dtype: fp32}
problem:
  shapes: [{rows: 3, vocab: 300, top_k: 50, top_p: 0.8}, {rows: 2, vocab: 129, top_k: 200, top_p: 0.5}]
  dtypes: [fp32]
measured:
  - {device: NVIDIA H200, shape: topk_filter/0, dtype: fp32, latency_us: 965.04, sol_fraction: 0.0031, date: '2026-12-03'}
---
The usual sampling filter chain, top-k and then top-p, as one kernel with no sort. Semantics: an
entry survives top-k if it is >= the row's k-th largest logit (ties kept; k >= V keeps all); among
the survivors, with p_i = softmax over the survivors, an entry x survives top-p if the probability
mass of survivors strictly greater than x is < top_p (the smallest prefix of the descending order
whose mass reaches top_p, ties at its end kept; top_p >= 1 skips the step); everything else becomes
-inf. One program per row maps logits to int32 keys whose order is the float order and bisects the
key range twice: 32 halvings that count keys >= mid (top-k threshold), then the max and the
normaliser Z of the survivors (one pass), then 32 halvings that sum exp(x - max) over survivors with
key >= mid and compare with top_p * Z (top-p threshold: the largest key whose mass >= top_p * Z),
then one masked write. Passes over the row: 33 without top-p, 67 with it, each BLOCK_V-chunked
(registers bounded for any vocab; reads beyond the first come from L2 for rows up to a few MB), plus
one 4-byte write per logit; about 68 exps per logit with top-p. Limits: NaNs are not handled; one
program per row (a single 150K decode row uses one SM); the mass comparisons are fp32 sums in chunk
order, so an entry whose mass above lies within ~1e-6 of top_p may fall either side (a sorted cumsum
has the same ambiguity in another order).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _ordered_key(x):
    """Map fp32 to int32 so that integer order equals float order (-0.0 sorts just below +0.0)."""
    bits = x.to(tl.int32, bitcast=True)
    return tl.where(bits < 0, bits ^ 0x7FFFFFFF, bits)


@triton.jit
def _top_k_top_p_combined_kernel(
    # pointers
    x_ptr,
    y_ptr,
    # sizes
    V,
    k,
    # strides (elements; the last dim is contiguous)
    stride_xm,
    stride_ym,
    # scalars
    top_p,
    # meta
    APPLY_TOP_P: tl.constexpr,
    BLOCK_V: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride can pass 2^31 elements
    x_row = x_ptr + row * stride_xm
    offs = tl.arange(0, BLOCK_V)

    # top-k: invariant count(key >= lo) >= k > count(key >= hi); int64 so hi = 2^31 fits
    lo = tl.full((), -(2**31), tl.int64)
    hi = tl.full((), 2**31, tl.int64)
    for _ in range(32):
        mid = lo + ((hi - lo) >> 1)
        count = tl.zeros((), dtype=tl.int32)
        for start in range(0, V, BLOCK_V):
            cols = start + offs
            mask = cols < V
            key = _ordered_key(tl.load(x_row + cols, mask=mask, other=0.0)).to(tl.int64)
            count += tl.sum(((key >= mid) & mask).to(tl.int32), axis=0)
        enough = count >= k
        lo = tl.where(enough, mid, lo)
        hi = tl.where(enough, hi, mid)
    k_key = lo  # the k-th largest key (or -2^31 when k >= V: all kept)

    if APPLY_TOP_P:
        # max and normaliser over the top-k survivors (online: rescale the sum when the max grows)
        m = tl.full((), float("-inf"), tl.float32)
        z = tl.zeros((), dtype=tl.float32)
        for start in range(0, V, BLOCK_V):
            cols = start + offs
            x = tl.load(x_row + cols, mask=cols < V, other=float("-inf"))
            x = tl.where(_ordered_key(x).to(tl.int64) >= k_key, x, float("-inf"))
            m_new = tl.maximum(m, tl.max(x, axis=0))
            z = z * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
            m = m_new
        # top-p: largest key whose survivor mass (keys >= it) still reaches top_p * z
        target = top_p * z
        lo_p = k_key
        hi_p = tl.full((), 2**31, tl.int64)
        for _ in range(32):
            mid = lo_p + ((hi_p - lo_p) >> 1)
            mass = tl.zeros((), dtype=tl.float32)
            for start in range(0, V, BLOCK_V):
                cols = start + offs
                x = tl.load(x_row + cols, mask=cols < V, other=float("-inf"))
                keep = _ordered_key(x).to(tl.int64) >= mid
                mass += tl.sum(tl.where(keep, tl.exp(x - m), 0.0), axis=0)
            enough = mass >= target
            lo_p = tl.where(enough, mid, lo_p)
            hi_p = tl.where(enough, hi_p, mid)
        k_key = lo_p

    y_row = y_ptr + row * stride_ym
    for start in range(0, V, BLOCK_V):
        cols = start + offs
        mask = cols < V
        x = tl.load(x_row + cols, mask=mask, other=0.0)
        keep = _ordered_key(x).to(tl.int64) >= k_key
        tl.store(y_row + cols, tl.where(keep, x, float("-inf")), mask=mask)


def _launch_config(v: int) -> dict[str, int]:
    """Return the chunk width (at most 4096, at least the row) and warps (about 8 per thread)."""
    block_v = min(triton.next_power_of_2(v), 4096)
    return {"block_v": block_v, "num_warps": min(max(block_v // 256, 1), 16)}


def top_k_top_p_combined(
    logits: torch.Tensor,
    top_k: int = 50,
    top_p: float = 1.0,
    *,
    block_v: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return logits with entries outside the top-k, then outside the top-p mass, set to -inf.

    Args:
        logits: (T, V) fp32, last dimension contiguous.
        top_k: Entries kept by the first filter (>= 1; ties kept; >= V keeps all).
        top_p: Mass kept by the second filter, in (0, 1]; 1 skips it.
        block_v: Vocab chunk per loop step (power of two); None = min(next_pow2(V), 4096).
        num_warps: Warps per program; None picks by chunk width.

    Returns:
        out: (T, V) fp32, contiguous; kept entries are bit copies of the input.

    Raises:
        ValueError: logits is not 2D fp32, top_k < 1, or top_p outside (0, 1].
    """
    if logits.dim() != 2 or logits.dtype != torch.float32:
        raise ValueError(f"logits must be (T, V) fp32; got {tuple(logits.shape)} {logits.dtype}")
    if top_k < 1:
        raise ValueError(f"top_k must be >= 1; got {top_k}")
    if not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1]; got {top_p}")
    x = logits if logits.stride(-1) == 1 else logits.contiguous()
    t, v = x.shape
    y = torch.empty((t, v), dtype=x.dtype, device=x.device)
    if y.numel() == 0:
        return y
    cfg = _launch_config(v)
    given = {"block_v": block_v, "num_warps": num_warps}
    cfg.update({key: value for key, value in given.items() if value is not None})
    _top_k_top_p_combined_kernel[(t,)](
        x, y,
        v, min(top_k, v),
        x.stride(0), y.stride(0),
        float(top_p),
        APPLY_TOP_P=top_p < 1.0, BLOCK_V=cfg["block_v"],
        num_warps=cfg["num_warps"],
    )  # fmt: skip
    return y


def reference(logits: torch.Tensor, top_k: int = 50, top_p: float = 1.0) -> torch.Tensor:
    """Top-k by torch.topk, then top-p from a sorted cumulative sum of the survivors' softmax."""
    k = min(top_k, logits.shape[-1])
    kth = torch.topk(logits, k, dim=-1).values[..., -1:]
    out = logits.masked_fill(logits < kth, float("-inf"))
    if top_p >= 1.0:
        return out
    probs = torch.softmax(out, dim=-1)
    asc, order = torch.sort(out, dim=-1)
    cum = torch.cumsum(probs.gather(-1, order), dim=-1)  # mass of entries <= each sorted value
    # mass strictly above x = 1 - mass of entries <= x (the last position of x's run of ties)
    last = torch.searchsorted(asc, out, right=True) - 1
    above = 1.0 - cum.gather(-1, last)
    return out.masked_fill(above >= top_p, float("-inf"))


def make_inputs(shape: dict, dtype: torch.dtype = torch.float32, device: str = "cpu") -> dict:
    """Return inputs for ``{"rows", "vocab", "top_k", "top_p"}``; N(0, 1) * 2 logits."""
    logits = (torch.randn(shape["rows"], shape["vocab"], device=device) * 2).to(dtype)
    return {"logits": logits, "top_k": shape.get("top_k", 50), "top_p": shape.get("top_p", 1.0)}
