"""
---
id: sum_rows_split_atomic
title: Row sums of long rows split over several programs, fp32 partials merged by atomic_add
op_family: reduction
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [split-row, 2d-grid, atomic-reduction, fp32-accumulate, chunked-loop]
status: reference
launcher: sum_rows_split_atomic
tuning:
  num_splits: [8, 1, 2, 4, 16, 32]
  block_n: [1024, 128, 256, 512, 2048, 4096]
  num_warps: [4, 1, 2, 8, 16]
args:
  x: {shape: [M, N], dtypes: [bf16, fp16, fp32], aliases: [input, values]}
returns:
  - {name: y, shape: [M], dtype: x}
problem:
  shapes: [{rows: 3, cols: 1000}, {rows: 5, cols: 7}]
  dtypes: [fp32, bf16]
measured: []
---
y[m] = sum over n of x[m, n] (torch.sum(x, dim=-1) with fp32 accumulation) for few, long rows. The
grid is (M, S): program (m, s) owns a contiguous span of cdiv(cdiv(N, S), BLOCK_N) chunks of row m,
keeps a BLOCK_N-wide fp32 per-lane accumulator over its chunks, reduces it once and adds the partial
into a zeroed fp32 row buffer with one tl.atomic_add; a second tiny kernel casts the buffer to x's
dtype (skipped for fp32, whose buffer is the result). A decode-style batch of 4 rows of 256K
elements thus occupies 4 * S SMs instead of 4, with no extra pass over x to combine partials. Bytes:
one read per element (2 B in bf16), 4 B of atomics per program. FLOPs: one add per element. Limits:
fp32 atomics make the summation order, hence the last bits, vary from run to run
(sum_two_pass_partials is the deterministic form); short rows waste programs, so S should shrink to
1 when M alone fills the GPU; non-contiguous rows are copied first.
"""

import torch
import triton
import triton.language as tl

_FLOATS = (torch.bfloat16, torch.float16, torch.float32)


@triton.jit
def _sum_rows_split_atomic_kernel(
    # pointers
    x_ptr,
    acc_ptr,  # fp32 (M,), zeroed
    # sizes
    N,
    span,  # columns per split, a multiple of BLOCK_N
    # strides (elements; the last dim is contiguous)
    stride_xm,
    # meta
    BLOCK_N: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride can pass 2^31 elements
    split = tl.program_id(1)
    offs = tl.arange(0, BLOCK_N)
    x_row = x_ptr + row * stride_xm
    start = split * span
    end = tl.minimum(start + span, N)
    acc = tl.zeros((BLOCK_N,), tl.float32)  # per-lane partial sums
    for c in range(start, end, BLOCK_N):
        cols = c + offs
        acc += tl.load(x_row + cols, mask=cols < end, other=0.0).to(tl.float32)
    tl.atomic_add(acc_ptr + row, tl.sum(acc, axis=0))  # one atomic per program


@triton.jit
def _cast_rows_kernel(
    acc_ptr,  # fp32 (M,), the merged sums
    y_ptr,  # (M,) in x's dtype
    M,
    BLOCK: tl.constexpr,
):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < M
    acc = tl.load(acc_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, acc.to(y_ptr.dtype.element_ty), mask=mask)  # one rounding, at the end


def _launch_config(m: int, n: int) -> dict[str, int]:
    """Return the chunk (<= 1024), splits (8, fewer for short rows) and warps."""
    block_n = min(1024, max(triton.next_power_of_2(n), 16))
    return {"num_splits": 8, "block_n": block_n, "num_warps": 4}


def sum_rows_split_atomic(
    x: torch.Tensor,
    *,
    num_splits: int | None = None,
    block_n: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return the sum of every row of x (M,), accumulated in fp32 and cast to x's dtype.

    Args:
        x: (M, N) bf16/fp16/fp32 (a non-contiguous last dim is copied).
        num_splits: Programs per row (clamped to the chunk count); None = 8.
        block_n: Columns per program per loop step (power of two); None = min(1024, next_pow2(N)).
        num_warps: Warps per program; None = 4.

    Returns:
        y: (M,) in x's dtype.

    Raises:
        ValueError: x is not 2D bf16/fp16/fp32, or num_splits < 1.
    """
    if x.dim() != 2 or x.dtype not in _FLOATS:
        raise ValueError(f"x must be (M, N) bf16/fp16/fp32; got {tuple(x.shape)} {x.dtype}")
    cfg = _launch_config(*x.shape)
    given = {"num_splits": num_splits, "block_n": block_n, "num_warps": num_warps}
    cfg.update({key: value for key, value in given.items() if value is not None})
    if cfg["num_splits"] < 1:
        raise ValueError(f"num_splits must be >= 1; got {cfg['num_splits']}")
    x2 = x if x.stride(-1) == 1 else x.contiguous()
    m, n = x2.shape
    if m == 0 or n == 0:
        return torch.zeros((m,), dtype=x.dtype, device=x.device)
    acc = torch.zeros((m,), dtype=torch.float32, device=x.device)  # the atomics' target
    chunks = triton.cdiv(n, cfg["block_n"])
    splits = min(cfg["num_splits"], chunks)
    span = triton.cdiv(chunks, splits) * cfg["block_n"]
    grid = (m, triton.cdiv(n, span))
    _sum_rows_split_atomic_kernel[grid](
        x2, acc,
        n, span,
        x2.stride(0),
        BLOCK_N=cfg["block_n"],
        num_warps=cfg["num_warps"],
    )  # fmt: skip
    if x.dtype == torch.float32:
        return acc
    y = torch.empty((m,), dtype=x.dtype, device=x.device)
    _cast_rows_kernel[(triton.cdiv(m, 1024),)](acc, y, m, BLOCK=1024)
    return y


def reference(x: torch.Tensor) -> torch.Tensor:
    """Return x.float().sum(-1) cast to x's dtype."""
    return x.float().sum(dim=-1).to(x.dtype)


def make_inputs(shape: dict, dtype: torch.dtype = torch.float32, device: str = "cpu") -> dict:
    """Return ``{"x"}`` for ``{"rows", "cols"}``: N(0, 1) + 0.25 so row sums are not ~0."""
    x = torch.randn(shape["rows"], shape["cols"], device=device) + 0.25
    return {"x": x.to(dtype)}
