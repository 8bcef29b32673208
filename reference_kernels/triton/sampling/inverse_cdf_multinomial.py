"""
---
id: inverse_cdf_multinomial
title: One multinomial sample per row by inverse CDF, chunked prefix sums with a running carry
op_family: sampling
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [row-per-program, inverse-cdf, prefix-sum, running-carry, chunked-loop, first-index-min]
status: reference
launcher: inverse_cdf_multinomial
tuning:
  block_v: [1024, 256, 512, 2048, 4096]
  num_warps: [4, 1, 2, 8, 16]
args:
  probs: {shape: [T, V], dtypes: [bf16, fp16, fp32], aliases: [probabilities, weights]}
  u: {shape: [T], dtypes: [fp32], aliases: [uniform, uniform_samples, coins]}
returns:
  - {name: ids, shape: [T], dtype: int64}
problem:
  shapes: [{rows: 16, vocab: 100}]
  dtypes: [fp32]
measured: []
---
Sampling one token id per row from (possibly unnormalised) probabilities, given the row's uniform
draw u in [0, 1) from the caller (so the result is deterministic and testable): the id is the
first index i whose inclusive prefix sum cdf[i] exceeds u * total, total = the row's sum, i.e.
torch.multinomial's inverse-CDF rule with the randomness made explicit. One program per row, two
passes in BLOCK_V chunks: the first sums the row; the second runs tl.cumsum over each chunk plus a
running carry from the chunks before and takes the smallest index with cdf > target (a min over
masked indices; once found, later chunks cannot lower it). Zero-probability entries are never
chosen (their cdf equals the previous one); if rounding leaves every cdf <= target, the last
nonzero entry is returned. fp32 accumulation. Bytes: 2 reads of the row (8 bytes per fp32 logit)
and 8 bytes out. When it wins: sampling after a top-k/top-p filter when a sort-free sampler is
needed; exact, unlike the Gumbel-max trick, for a given u. Limits: results equal a different
summation order exactly only when the partial sums are exact (e.g. dyadic probabilities); the
second pass does not stop early (no data-dependent exit); one program per row.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _inverse_cdf_multinomial_kernel(
    # pointers
    p_ptr,
    u_ptr,
    out_ptr,
    # sizes
    V,
    # strides (elements; last dim contiguous)
    stride_pm,
    # meta
    BLOCK_V: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    p_row = p_ptr + row * stride_pm
    offs = tl.arange(0, BLOCK_V)
    total = tl.zeros((), dtype=tl.float32)
    for start in range(0, V, BLOCK_V):
        p = tl.load(p_row + start + offs, mask=start + offs < V, other=0.0).to(tl.float32)
        total += tl.sum(p, axis=0)
    target = tl.load(u_ptr + row) * total
    carry = tl.zeros((), dtype=tl.float32)
    first = tl.full((), V, tl.int32)  # first index with cdf > target (V = none yet)
    last_nz = tl.zeros((), dtype=tl.int32)  # fallback: the last index with p > 0
    for start in range(0, V, BLOCK_V):
        cols = start + offs
        mask = cols < V
        p = tl.load(p_row + cols, mask=mask, other=0.0).to(tl.float32)
        cdf = carry + tl.cumsum(p, axis=0)
        hit = mask & (cdf > target) & (p > 0)
        first = tl.minimum(first, tl.min(tl.where(hit, cols, V), axis=0))
        last_nz = tl.maximum(last_nz, tl.max(tl.where(mask & (p > 0), cols, 0), axis=0))
        carry += tl.sum(p, axis=0)
    tl.store(out_ptr + row, tl.where(first < V, first, last_nz).to(tl.int64))


def inverse_cdf_multinomial(
    probs: torch.Tensor,
    u: torch.Tensor,
    *,
    block_v: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return one sampled index per row: the first i with cumsum(probs)[i] > u * sum(probs).

    Args:
        probs: (T, V) bf16/fp16/fp32 nonnegative weights (need not sum to 1), last dim contiguous.
        u: (T,) fp32 uniform draws in [0, 1).
        block_v: Vocab chunk per loop step (power of two); None = min(next_pow2(V), 1024).
        num_warps: Warps per program; None picks by chunk width.

    Returns:
        ids: (T,) int64.

    Raises:
        ValueError: The shapes or dtypes do not fit.
    """
    if probs.dim() != 2 or not probs.dtype.is_floating_point:
        raise ValueError(f"probs must be (T, V) float; got {tuple(probs.shape)} {probs.dtype}")
    t, v = probs.shape
    if u.shape != (t,) or u.dtype != torch.float32:
        raise ValueError(f"u must be ({t},) fp32; got {tuple(u.shape)} {u.dtype}")
    if v == 0:
        raise ValueError("probs must have at least one column")
    p = probs if probs.stride(-1) == 1 else probs.contiguous()
    ids = torch.empty(t, dtype=torch.int64, device=probs.device)
    if t == 0:
        return ids
    block = min(triton.next_power_of_2(v), 1024)
    cfg = {"block_v": block, "num_warps": min(max(block // 256, 1), 16)}
    given = {"block_v": block_v, "num_warps": num_warps}
    cfg.update({key: value for key, value in given.items() if value is not None})
    _inverse_cdf_multinomial_kernel[(t,)](
        p, u.contiguous(), ids,
        v,
        p.stride(0),
        BLOCK_V=cfg["block_v"],
        num_warps=cfg["num_warps"],
    )  # fmt: skip
    return ids


def reference(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Return the first index whose fp64 cumsum exceeds u * total (the last nonzero if none)."""
    p = probs.double()
    cdf = p.cumsum(dim=-1)
    target = (u.float() * p.sum(dim=-1).float()).double()[:, None]
    hit = (cdf > target) & (p > 0)
    idx = torch.arange(p.shape[-1], device=p.device).expand_as(p)
    first = torch.where(hit, idx, p.shape[-1]).min(dim=-1).values
    last_nz = torch.where(p > 0, idx, 0).max(dim=-1).values
    return torch.where(first < p.shape[-1], first, last_nz)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"probs", "u"}`` for ``shape = {"rows", "vocab"}``.

    probs are dyadic (k / 64 with k in 0..15, a third of them zero), so every partial sum is exact
    in fp32 and bf16 and the sampled index cannot depend on the summation order.
    """
    k = torch.randint(0, 16, (shape["rows"], shape["vocab"]), device=device)
    k = k * (torch.rand(k.shape, device=device) > 0.33)
    return {"probs": (k / 64.0).to(dtype), "u": torch.rand(shape["rows"], device=device)}
