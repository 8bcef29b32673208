"""
---
id: row_mean_var_chan_merge
title: Row variance and mean of a multi-row tile, chunk statistics merged by Chan's parallel formula
op_family: reduction
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [multi-row-tile, chunked-loop, chan-parallel-variance, fp32-accumulate]
status: reference
launcher: row_mean_var_chan_merge
tuning:
  block_m: [4, 1, 2, 8, 16]
  block_n: [256, 32, 64, 128, 512, 1024]
  num_warps: [4, 1, 2, 8]
args:
  x: {shape: [M, N], dtypes: [bf16, fp16, fp32], aliases: [input, hidden_states]}
  correction: {type: int, default: 1, aliases: [ddof]}
returns:
  - {name: var, shape: [M], dtype: x}
  - {name: mean, shape: [M], dtype: x}
problem:
  shapes: [{rows: 5, cols: 300, offset: 100.0}, {rows: 3, cols: 2, correction: 0}]
  dtypes: [fp32, bf16]
measured: []
---
(var, mean) of every row, as torch.var_mean(x, dim=-1, correction=correction), in one pass over
memory. Each program owns BLOCK_M rows and walks them in (BLOCK_M x BLOCK_N) tiles; for every row of
a tile it computes the chunk's count, mean and M2 (sum of squared deviations from the chunk mean,
from registers) and merges them into the row's running (n, mean, M2) with Chan's parallel update:
delta = mean_c - mean, mean += delta * n_c / (n + n_c), M2 += M2_c + delta^2 * n * n_c / (n + n_c).
All BLOCK_M rows merge side by side as vectors, so short rows (N of a few hundred) still give each
program a full tile of loads; unlike sum and sum-of-squares accumulation there is no E[x^2] - mean^2
cancellation, so rows with a large mean keep fp32 accuracy. var = M2 / max(N - correction, 0)
(inf/NaN where torch gives them). Bytes: one read per element (2 B in bf16) plus two row scalars
out. FLOPs: about 5 per element. When it wins: statistics-only passes (norm calibration, batch
statistics over a row layout) without a normalise step; layer_norm_welford_looped fuses the same
merge into a normalise with one row per program. Limits: the merge divides per chunk (a few extra
FLOPs per row and chunk); rows are independent, so one very long row uses one program.
"""

import torch
import triton
import triton.language as tl

_FLOATS = (torch.bfloat16, torch.float16, torch.float32)


@triton.jit
def _row_mean_var_chan_merge_kernel(
    # pointers
    x_ptr,
    var_ptr,  # (M,) in x's dtype
    mean_ptr,  # (M,) in x's dtype
    # sizes
    M,
    N,
    # strides (elements; the last dim is contiguous)
    stride_xm,
    # scalars
    denom,  # max(N - correction, 0) as fp32
    # meta
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_mask = rows < M
    offs = tl.arange(0, BLOCK_N)
    x_rows = x_ptr + rows[:, None].to(tl.int64) * stride_xm

    count = tl.zeros((BLOCK_M,), tl.float32)  # running n, mean and M2 per row
    mean = tl.zeros((BLOCK_M,), tl.float32)
    m2 = tl.zeros((BLOCK_M,), tl.float32)
    for start in range(0, N, BLOCK_N):
        cols = start + offs
        mask = row_mask[:, None] & (cols < N)[None, :]
        x = tl.load(x_rows + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        n_c = tl.minimum(N - start, BLOCK_N).to(tl.float32)  # same count for every row
        mean_c = tl.sum(x, axis=1) / n_c
        dev = tl.where(mask, x - mean_c[:, None], 0.0)
        m2_c = tl.sum(dev * dev, axis=1)
        total = count + n_c
        delta = mean_c - mean
        mean += delta * (n_c / total)
        m2 += m2_c + delta * delta * (count * n_c / total)
        count = total
    var = m2 / denom  # denom 0 gives inf or NaN, as torch.var_mean
    tl.store(var_ptr + rows, var.to(var_ptr.dtype.element_ty), mask=row_mask)
    tl.store(mean_ptr + rows, mean.to(mean_ptr.dtype.element_ty), mask=row_mask)


def _launch_config(n: int) -> dict[str, int]:
    """Return a tile of about 1K-4K elements: up to 1024 columns, rows stacked to fill it."""
    block_n = min(1024, max(triton.next_power_of_2(n), 16))
    return {"block_m": max(1, min(16, 4096 // block_n)), "block_n": block_n, "num_warps": 4}


def row_mean_var_chan_merge(
    x: torch.Tensor,
    correction: int = 1,
    *,
    block_m: int | None = None,
    block_n: int | None = None,
    num_warps: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (var, mean) of every row of x, as torch.var_mean(x, -1, correction=correction).

    Args:
        x: (M, N) bf16/fp16/fp32 with N >= 1 (a non-contiguous last dim is copied).
        correction: Subtracted from N in the variance's divisor (1 = unbiased, 0 = biased).
        block_m: Rows per program (power of two); None fills a ~4K-element tile.
        block_n: Columns per loop step (power of two); None = min(1024, next_pow2(N)).
        num_warps: Warps per program; None = 4.

    Returns:
        (var, mean): two (M,) tensors in x's dtype.

    Raises:
        ValueError: x is not 2D bf16/fp16/fp32, N is 0, or correction < 0.
    """
    if x.dim() != 2 or x.dtype not in _FLOATS:
        raise ValueError(f"x must be (M, N) bf16/fp16/fp32; got {tuple(x.shape)} {x.dtype}")
    m, n = x.shape
    if n == 0:
        raise ValueError(f"x {tuple(x.shape)} has empty rows; var_mean needs N >= 1")
    if correction < 0:
        raise ValueError(f"correction must be >= 0; got {correction}")
    cfg = _launch_config(n)
    given = {"block_m": block_m, "block_n": block_n, "num_warps": num_warps}
    cfg.update({key: value for key, value in given.items() if value is not None})
    x2 = x if x.stride(-1) == 1 else x.contiguous()
    var = torch.empty((m,), dtype=x.dtype, device=x.device)
    mean = torch.empty((m,), dtype=x.dtype, device=x.device)
    if m == 0:
        return var, mean
    _row_mean_var_chan_merge_kernel[(triton.cdiv(m, cfg["block_m"]),)](
        x2, var, mean,
        m, n,
        x2.stride(0),
        float(max(n - correction, 0)),
        BLOCK_M=cfg["block_m"], BLOCK_N=cfg["block_n"],
        num_warps=cfg["num_warps"],
    )  # fmt: skip
    return var, mean


def reference(x: torch.Tensor, correction: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Return torch.var_mean over the last dim in fp64, cast to x's dtype."""
    var, mean = torch.var_mean(x.double(), dim=-1, correction=correction)
    return var.to(x.dtype), mean.to(x.dtype)


def make_inputs(shape: dict, dtype: torch.dtype = torch.float32, device: str = "cpu") -> dict:
    """Return ``{"x", "correction"}`` for ``{"rows", "cols"}`` (+ ``"offset"``, ``"correction"``).

    x ~ offset + N(0, 1): a large offset is the case where E[x^2] - mean^2 would cancel.
    """
    x = torch.randn(shape["rows"], shape["cols"], device=device) + shape.get("offset", 0.0)
    return {"x": x.to(dtype), "correction": shape.get("correction", 1)}
