"""
---
id: topk_filter_sorted_block
title: Top-k logit mask by an in-register bitonic sort of whole rows, BLOCK_M rows per program
op_family: sampling
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [fp32]
bound: latency
techniques: [multi-row-tile, in-register-sort, bitonic-sort, rank-select]
status: reference
launcher: topk_filter_sorted_block
tuning:
  block_m: [1, 2, 4, 8]
  num_warps: [8, 2, 4, 16]
args:
  logits: {shape: [T, V], dtypes: [fp32], aliases: [x, scores]}
  top_k: {type: int, default: 50, aliases: [topk, k]}
returns:
  - {name: out, shape: [T, V], dtype: fp32}
problem:
  shapes: [{rows: 3, vocab: 100, top_k: 50}, {rows: 9, vocab: 64, top_k: 1}]
  dtypes: [fp32]
measured:
  - {device: NVIDIA H200, shape: kernel.topk_filter_sorted_block/smoke0_rows3_vocab100_top_k50_fp32, dtype: fp32, latency_us: 4.64, sol_fraction: 0.6276, date: '2026-12-04'}
  - {device: NVIDIA H200, shape: kernel.topk_filter_sorted_block/smoke1_rows9_vocab64_top_k1_fp32, dtype: fp32, latency_us: 4.0, sol_fraction: 0.728, date: '2026-12-04'}
---
Top-k filtering of sampling logits (entries >= the k-th largest value of the row are kept, the rest
set to -inf, ties at the threshold kept) for rows that fit in registers: each program loads a
(BLOCK_M, next_pow2(V)) tile padded with -inf, sorts every row descending with one tl.sort along
axis 1 (a bitonic network over registers and shuffles, O(V log^2 V) compare-exchanges per row),
picks each row's value at rank k - 1 with a masked max and writes the masked rows. Logits are read
once and written once (8 bytes each), and the work does not depend on k. BLOCK_M > 1 suits batches
of short rows (V of 1..4K); BLOCK_M = 1 suits wider rows. Limits: BLOCK_M * V <= 16384 (registers
and shuffles grow with the tile; 150K-wide vocab rows need topk_filter_bisect); the sort is
compute-heavy, so a radix or bisection select does fewer operations on wide rows; NaNs are not
handled.
"""

import torch
import triton
import triton.language as tl

_MAX_V = 16384


@triton.jit
def _topk_filter_sorted_block_kernel(
    # pointers
    x_ptr,
    y_ptr,
    # sizes
    T,
    V,
    k,
    # strides (elements; the last dim is contiguous)
    stride_xm,
    stride_ym,
    # meta
    BLOCK_M: tl.constexpr,
    BLOCK_V: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_V)
    mask = (rows < T)[:, None] & (cols < V)[None, :]
    rows64 = rows.to(tl.int64)[:, None]  # int64: rows * stride can pass 2^31 elements

    # -inf padding sorts last and so never becomes the threshold unless k > V (then all are kept)
    x = tl.load(x_ptr + rows64 * stride_xm + cols[None, :], mask=mask, other=float("-inf"))
    ranked = tl.sort(x, dim=1, descending=True)  # each row sorted independently
    # the k-th largest value per row: only the lane of rank k - 1 survives the masked max
    kth = tl.max(tl.where(cols[None, :] == k - 1, ranked, float("-inf")), axis=1)
    y = tl.where(x >= kth[:, None], x, float("-inf"))
    tl.store(y_ptr + rows64 * stride_ym + cols[None, :], y, mask=mask)


def _launch_config(t: int, v: int) -> dict[str, int]:
    """Return the tile (rows up to 4096 logits, at most the row count) and warps."""
    block_v = triton.next_power_of_2(v)
    block_m = max(1, min(4096 // block_v, triton.next_power_of_2(t), 8))
    return {"block_m": block_m, "block_v": block_v, "num_warps": 8}


def topk_filter_sorted_block(
    logits: torch.Tensor,
    top_k: int = 50,
    *,
    block_m: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return logits with every entry below the row's top_k-th largest value set to -inf.

    Args:
        logits: (T, V) fp32 with V <= 16384, last dimension contiguous.
        top_k: Entries kept per row (>= 1; ties at the threshold are all kept; >= V keeps all).
        block_m: Rows per program (power of two; clamped to 16384 // next_pow2(V)); None picks.
        num_warps: Warps per program; None = 8.

    Returns:
        out: (T, V) fp32, contiguous.

    Raises:
        ValueError: logits is not 2D fp32, V > 16384, or top_k < 1.
    """
    if logits.dim() != 2 or logits.dtype != torch.float32:
        raise ValueError(f"logits must be (T, V) fp32; got {tuple(logits.shape)} {logits.dtype}")
    if logits.shape[1] > _MAX_V:
        raise ValueError(f"V = {logits.shape[1]} > {_MAX_V} does not fit; use topk_filter_bisect")
    if top_k < 1:
        raise ValueError(f"top_k must be >= 1; got {top_k}")
    x = logits if logits.stride(-1) == 1 else logits.contiguous()
    t, v = x.shape
    y = torch.empty((t, v), dtype=x.dtype, device=x.device)
    if y.numel() == 0:
        return y
    cfg = _launch_config(t, v)
    given = {"block_m": block_m, "num_warps": num_warps}
    cfg.update({key: value for key, value in given.items() if value is not None})
    # a requested block_m is clamped so that the tile stays within _MAX_V logits
    cfg["block_m"] = max(1, min(cfg["block_m"], _MAX_V // cfg["block_v"]))
    _topk_filter_sorted_block_kernel[(triton.cdiv(t, cfg["block_m"]),)](
        x, y,
        t, v, min(top_k, cfg["block_v"] + 1),
        x.stride(0), y.stride(0),
        BLOCK_M=cfg["block_m"], BLOCK_V=cfg["block_v"],
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
