"""
---
id: topk_filter_radix
title: Top-k logit mask by split-row 8-bit radix select (global histograms per pass), then a mask
op_family: sampling
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [fp32]
bound: memory
techniques: [radix-select, histogram, order-preserving-int-key, split-row-grid, atomic-histogram,
  multi-kernel-passes, elementwise-mask]
status: reference
launcher: topk_filter_radix
tuning:
  block_v: [4096, 1024, 16384]
  num_warps: [4, 1, 8]
args:
  logits: {shape: [T, V], dtypes: [fp32], aliases: [x, scores, input]}
  top_k: {type: int, default: 50, aliases: [k, topk]}
returns:
  - {name: out, shape: [T, V], dtype: fp32}
problem:
  shapes: [{rows: 3, vocab: 1001, top_k: 50}, {rows: 2, vocab: 700, top_k: 7, ties: true}]
  dtypes: [fp32]
measured:
  - {device: NVIDIA H200, shape: topk_filter/0, dtype: fp32, latency_us: 362.72, sol_fraction: 0.0079, date: '2026-12-04'}
---
atrex30's topk_filter: per row, keep every logit >= the row's k-th largest (ties with it all kept,
kept values bit-identical) and set the rest to -inf; a row with at most k entries is copied whole.
The k-th value is found by an exact radix select on order-preserving uint32 keys (negative floats
have all bits flipped, others the sign bit set), one byte per pass, most significant first, with
every pass spread over the whole row instead of one program per row: in pass p, program (r, c) of
a (rows, V / BLOCK_V) grid builds a 256-bin tl.histogram of byte p of the keys of its BLOCK_V chunk
that match the row's prefix so far, and adds it into a global (rows, 256) int32 histogram with
atomics; then one tiny program per row turns the histogram into the next byte (the bin holding the
remaining rank, by a suffix count) and the remaining rank, kept in a per-row state. After 4 passes
the key is exact; a last (rows, V / BLOCK_V) elementwise kernel converts it back to the float
threshold and writes x where x >= threshold (a float compare, as the reference: -0.0 and 0.0 tie)
and -inf elsewhere. Each pass reads the row once (4 B per logit, from L2 when the batch's rows fit:
152K vocab * 4 B = 0.6 MB per row), so 5 reads + 1 write per element in 9 launches. Unlike one
program per row (topk_filter_bisect, topk_radix_select) the whole GPU works on a decode batch of 1
to 8 rows; for many rows the 9 launches cost more than they save. Limits: no NaN; 1 <= top_k.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _ordered_key(x):
    """Map fp32 to uint32 keys of the same order (negatives flipped, positives get the sign bit)."""
    bits = x.to(tl.uint32, bitcast=True)
    flip = tl.where((bits >> 31) == 1, 0xFFFFFFFF, 0x80000000).to(tl.uint32)
    return bits ^ flip


@triton.jit
def _radix_hist_kernel(
    x_ptr, state_ptr, hist_ptr, V, stride_x,
    SHIFT: tl.constexpr, KNOWN: tl.constexpr, BLOCK_V: tl.constexpr,
):  # fmt: skip
    """Add the 256-bin histogram of byte SHIFT / 8 of this chunk's prefix-matching keys."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_V + tl.arange(0, BLOCK_V)
    valid = cols < V
    key = _ordered_key(tl.load(x_ptr + row * stride_x + cols, mask=valid, other=0.0))
    prefix = tl.load(state_ptr + row * 2).to(tl.uint32)  # bytes of the threshold found so far
    match = valid & ((key & tl.full((), KNOWN, tl.uint32)) == prefix)
    digit = ((key >> SHIFT) & 0xFF).to(tl.int32)
    hist = tl.histogram(digit, 256, mask=match)
    tl.atomic_add(hist_ptr + row * 256 + tl.arange(0, 256), hist)


@triton.jit
def _radix_pick_kernel(hist_ptr, state_ptr, K, SHIFT: tl.constexpr, FIRST: tl.constexpr):
    """Pick the bin holding the remaining rank; update the row's prefix and remaining rank."""
    row = tl.program_id(0).to(tl.int64)
    bins = tl.arange(0, 256)
    hist = tl.load(hist_ptr + row * 256 + bins)
    if FIRST:
        prefix = tl.zeros((), dtype=tl.int64)
        remaining = tl.zeros((), dtype=tl.int64) + K
    else:
        prefix = tl.load(state_ptr + row * 2)
        remaining = tl.load(state_ptr + row * 2 + 1)
    above = (tl.sum(hist, axis=0) - tl.cumsum(hist, axis=0)).to(tl.int64)  # count in bins > b
    hit = (above < remaining) & (above + hist >= remaining)
    chosen = tl.max(tl.where(hit, bins, -1), axis=0)
    remaining -= tl.sum(tl.where(bins == chosen, above, 0), axis=0)
    prefix = prefix | (chosen.to(tl.int64) << SHIFT)
    tl.store(state_ptr + row * 2, prefix)
    tl.store(state_ptr + row * 2 + 1, remaining)


@triton.jit
def _radix_mask_kernel(
    x_ptr, state_ptr, out_ptr, V, stride_x, stride_o,
    KEEP_ALL: tl.constexpr, BLOCK_V: tl.constexpr,
):  # fmt: skip
    """Write x where x >= the row's threshold value, else -inf."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_V + tl.arange(0, BLOCK_V)
    valid = cols < V
    x = tl.load(x_ptr + row * stride_x + cols, mask=valid, other=0.0)
    if KEEP_ALL:
        out = x
    else:
        key = tl.load(state_ptr + row * 2).to(tl.uint32)
        unflip = tl.where((key >> 31) == 1, 0x80000000, 0xFFFFFFFF).to(tl.uint32)
        threshold = (key ^ unflip).to(tl.float32, bitcast=True)  # the k-th largest value
        out = tl.where(x >= threshold, x, float("-inf"))
    tl.store(out_ptr + row * stride_o + cols, out, mask=valid)


def topk_filter_radix(
    logits: torch.Tensor,
    top_k: int = 50,
    *,
    block_v: int = 4096,
    num_warps: int = 4,
) -> torch.Tensor:
    """Return logits with everything below each row's top_k-th largest value set to -inf.

    Args:
        logits: (T, V) fp32, last dimension contiguous, no NaN.
        top_k: Values kept per row (ties with the k-th all kept); >= V keeps rows whole.
        block_v: Logits per program of the histogram and mask passes (power of two >= 256).
        num_warps: Warps per program.

    Returns:
        out: (T, V) fp32, kept entries bit-identical to logits, the others -inf.

    Raises:
        ValueError: logits is not 2-D fp32 with a contiguous last dim, top_k < 1, or block_v is bad.
    """
    if logits.dim() != 2 or logits.dtype != torch.float32 or logits.stride(1) != 1:
        raise ValueError(
            f"logits must be (T, V) fp32 with a contiguous last dim; got {logits.dtype} "
            f"{tuple(logits.shape)} strides {logits.stride()}"
        )
    if top_k < 1:
        raise ValueError(f"top_k must be >= 1; got {top_k}")
    if block_v < 256 or block_v & (block_v - 1):
        raise ValueError(f"block_v must be a power of two >= 256; got {block_v}")
    t, v = logits.shape
    out = torch.empty_like(logits)
    if out.numel() == 0:
        return out
    grid = (t, triton.cdiv(v, block_v))
    state = torch.zeros((t, 2), dtype=torch.int64, device=logits.device)  # prefix, remaining
    keep_all = top_k >= v
    if not keep_all:
        hist = torch.zeros((4, t, 256), dtype=torch.int32, device=logits.device)
        for p in range(4):
            shift = 24 - 8 * p
            known = (0xFFFFFFFF << (shift + 8)) & 0xFFFFFFFF  # bytes found by earlier passes
            _radix_hist_kernel[grid](
                logits, state, hist[p], v, logits.stride(0),
                SHIFT=shift, KNOWN=known, BLOCK_V=block_v, num_warps=num_warps,
            )  # fmt: skip
            _radix_pick_kernel[(t,)](hist[p], state, top_k, SHIFT=shift, FIRST=p == 0,
                                     num_warps=1)  # fmt: skip
    _radix_mask_kernel[grid](
        logits, state, out, v, logits.stride(0), out.stride(0),
        KEEP_ALL=keep_all, BLOCK_V=block_v, num_warps=num_warps,
    )  # fmt: skip
    return out


def reference(logits: torch.Tensor, top_k: int = 50) -> torch.Tensor:
    """Return atrex30 topk_filter's output: entries below the k-th largest set to -inf."""
    if top_k >= logits.shape[-1]:
        return logits.clone()
    kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
    return logits.masked_fill(logits < kth, float("-inf"))


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"logits", "top_k"}`` for ``{"rows", "vocab"}`` and optional ``"top_k"`` (50).

    N(0, 1) logits (atrex30's draw); ``"ties": True`` rounds them to multiples of 0.25 so that the
    k-th value is tied many times over.
    """
    if dtype != torch.float32:
        raise ValueError(f"topk_filter_radix works on fp32 logits; got {dtype}")
    logits = torch.randn(shape["rows"], shape["vocab"], device=device)
    if shape.get("ties"):
        logits = (logits * 4).round() / 4
    return {"logits": logits, "top_k": shape.get("top_k", 50)}
