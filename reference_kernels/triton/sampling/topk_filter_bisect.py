"""
---
id: topk_filter_bisect
title: Top-k logit mask by exact bisection on order-preserving integer keys, chunked over the vocab
op_family: sampling
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [fp32]
bound: memory
techniques: [row-per-program, radix-bisection, order-preserving-int-key, chunked-loop, counting]
status: reference
launcher: topk_filter_bisect
tuning:
  block_v: [1024, 256, 512, 2048, 4096]
  num_warps: [4, 1, 2, 8, 16]
args:
  logits: {shape: [T, V], dtypes: [fp32], aliases: [x, scores]}
  top_k: {type: int, default: 50, aliases: [topk, k]}
returns:
  - {name: out, shape: [T, V], dtype: fp32}
problem:
  shapes: [{rows: 3, vocab: 100, top_k: 50}, {rows: 9, vocab: 64, top_k: 1}]
  dtypes: [fp32]
measured:
  - {device: NVIDIA H200, shape: topk_filter/0, dtype: fp32, latency_us: 964.896, sol_fraction: 0.0031, date: '2026-12-03'}
---
Top-k filtering of sampling logits: entries >= the k-th largest value of their row are kept, the
rest become -inf (ties at the threshold are all kept). Each fp32 logit is mapped to an int32 key
whose signed order equals the float order (negative floats get their 31 low bits flipped), and one
program per row bisects the key space: 32 halvings of [-2^31, 2^31), each counting keys >= mid over
the row in BLOCK_V chunks, leave exactly the k-th largest key. No sort, no shared-memory histogram,
no data-dependent loop trip count. Cost: 33 passes over the row (32 counts + the masked write), so
about 33 * 4 bytes read per logit, mostly from L2 for vocab rows of <= 1 MB, plus a 4-byte write.
Limits: NaNs are not handled (a NaN key is ordered like a huge or tiny value); one program per row,
so a single 150K-wide decode row uses one SM (a split-row count with atomics would spread it).
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
def _topk_filter_bisect_kernel(
    # pointers
    x_ptr,
    y_ptr,
    # sizes
    V,
    k,
    # strides (elements; the last dim is contiguous)
    stride_xm,
    stride_ym,
    # meta
    BLOCK_V: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride can pass 2^31 elements
    x_row = x_ptr + row * stride_xm
    y_row = y_ptr + row * stride_ym
    offs = tl.arange(0, BLOCK_V)

    # invariant: count(key >= lo) >= k and count(key >= hi) < k; int64 so hi = 2^31 fits
    lo = tl.full((), -(2**31), tl.int64)
    hi = tl.full((), 2**31, tl.int64)
    for _ in range(32):  # 32 halvings of a 2^32-wide range leave hi = lo + 1
        mid = lo + ((hi - lo) >> 1)
        count = tl.zeros((), dtype=tl.int32)
        for start in range(0, V, BLOCK_V):
            cols = start + offs
            mask = cols < V
            key = _ordered_key(tl.load(x_row + cols, mask=mask, other=0.0))
            count += tl.sum(((key.to(tl.int64) >= mid) & mask).to(tl.int32), axis=0)
        enough = count >= k
        lo = tl.where(enough, mid, lo)
        hi = tl.where(enough, hi, mid)
    # lo is now the k-th largest key itself (if k > V it stays -2^31 and every entry is kept)
    for start in range(0, V, BLOCK_V):
        cols = start + offs
        mask = cols < V
        x = tl.load(x_row + cols, mask=mask, other=0.0)
        keep = _ordered_key(x).to(tl.int64) >= lo
        tl.store(y_row + cols, tl.where(keep, x, float("-inf")), mask=mask)


def _launch_config(v: int) -> dict[str, int]:
    """Return the chunk width (at most 4096, at least the row) and warps (about 8 per thread)."""
    block_v = min(triton.next_power_of_2(v), 4096)
    return {"block_v": block_v, "num_warps": min(max(block_v // 256, 1), 16)}


def topk_filter_bisect(
    logits: torch.Tensor,
    top_k: int = 50,
    *,
    block_v: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return logits with every entry below the row's top_k-th largest value set to -inf.

    Args:
        logits: (T, V) fp32, last dimension contiguous.
        top_k: Entries kept per row (>= 1; ties at the threshold are all kept; >= V keeps all).
        block_v: Vocab chunk per loop step (power of two); None = min(next_pow2(V), 4096).
        num_warps: Warps per program; None picks by chunk width.

    Returns:
        out: (T, V) fp32, contiguous.

    Raises:
        ValueError: logits is not 2D fp32, or top_k < 1.
    """
    if logits.dim() != 2 or logits.dtype != torch.float32:
        raise ValueError(f"logits must be (T, V) fp32; got {tuple(logits.shape)} {logits.dtype}")
    if top_k < 1:
        raise ValueError(f"top_k must be >= 1; got {top_k}")
    x = logits if logits.stride(-1) == 1 else logits.contiguous()
    t, v = x.shape
    y = torch.empty((t, v), dtype=x.dtype, device=x.device)
    if y.numel() == 0:
        return y
    cfg = _launch_config(v)
    given = {"block_v": block_v, "num_warps": num_warps}
    cfg.update({key: value for key, value in given.items() if value is not None})
    _topk_filter_bisect_kernel[(t,)](
        x, y,
        v, min(top_k, v),
        x.stride(0), y.stride(0),
        BLOCK_V=cfg["block_v"],
        num_warps=cfg["num_warps"],
    )  # fmt: skip
    return y


def reference(logits: torch.Tensor, top_k: int = 50) -> torch.Tensor:
    """Return logits masked to -inf below each row's top_k-th largest value (ties kept)."""
    k = min(top_k, logits.shape[-1])
    kth = torch.topk(logits, k, dim=-1).values[..., -1:]
    return logits.masked_fill(logits < kth, float("-inf"))


def make_inputs(shape: dict, dtype: torch.dtype = torch.float32, device: str = "cpu") -> dict:
    """Return ``{"logits", "top_k"}`` for ``shape = {"rows", "vocab", "top_k"}``; N(0, 1) logits."""
    logits = torch.randn(shape["rows"], shape["vocab"], device=device).to(dtype)
    return {"logits": logits, "top_k": shape.get("top_k", 50)}
