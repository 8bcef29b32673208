"""
---
id: column_sum_tiled_dim0
title: Sum over dim 0 of a (rows, cols) tensor, column-strip programs walking coalesced 2-D tiles
op_family: reduction
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [column-strip-per-program, 2d-tile, coalesced-loads, fp32-accumulate, chunked-loop]
status: reference
launcher: column_sum_tiled_dim0
tuning:
  block_m: [32, 4, 8, 16, 64]
  block_n: [128, 16, 32, 64, 256]
  num_warps: [4, 1, 2, 8]
args:
  x: {shape: [M, N], dtypes: [bf16, fp16, fp32], aliases: [input, grad_output]}
returns:
  - {name: y, shape: [N], dtype: x}
problem:
  shapes: [{rows: 70, cols: 50}, {rows: 1, cols: 300}]
  dtypes: [fp32, bf16]
measured: []
---
y[n] = sum over m of x[m, n] (torch.sum(x, dim=0) with fp32 accumulation), e.g. a bias gradient
or a batch reduction of a row-major activation. Reducing along the strided dimension with one
program per column would read one element per row per program (uncoalesced, 32x the memory
transactions). Instead each program owns a strip of BLOCK_N adjacent columns and walks the rows
in (BLOCK_M x BLOCK_N) tiles: every tile row is BLOCK_N contiguous elements (a full 128-byte line
for 64 bf16 columns), the tile is added into a (BLOCK_M x BLOCK_N) fp32 register accumulator with
no reduction in the loop, and one axis-0 tl.sum at the end yields the strip's column sums. Bytes:
one read per element (2 B in bf16) plus one write per column. The result is deterministic (fixed
order, no atomics). Limits: the grid is cdiv(N, BLOCK_N) programs, so a narrow tensor with many
rows (N = 64, M = 1e6) runs on one or two SMs; a split-M variant with atomics or a second pass would
spread it. Any strides work (the row stride may be arbitrary; the column stride is passed too).
"""

import torch
import triton
import triton.language as tl

_FLOATS = (torch.bfloat16, torch.float16, torch.float32)


@triton.jit
def _column_sum_tiled_dim0_kernel(
    # pointers
    x_ptr,
    y_ptr,
    # sizes
    M,
    N,
    # strides (elements)
    stride_xm,
    stride_xn,
    # meta
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < N
    offs_m = tl.arange(0, BLOCK_M)
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)  # no cross-lane work inside the loop
    for start in range(0, M, BLOCK_M):
        rows = start + offs_m
        mask = (rows < M)[:, None] & col_mask[None, :]
        ptrs = x_ptr + rows[:, None].to(tl.int64) * stride_xm + cols[None, :] * stride_xn
        acc += tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + cols, tl.sum(acc, axis=0).to(y_ptr.dtype.element_ty), mask=col_mask)


def _launch_config(m: int, n: int) -> dict[str, int]:
    """Return a (32 x 128) tile, narrowed for small tensors, and 4 warps."""
    return {"block_m": min(32, max(triton.next_power_of_2(m), 1)),
            "block_n": min(128, max(triton.next_power_of_2(n), 16)), "num_warps": 4}  # fmt: skip


def column_sum_tiled_dim0(
    x: torch.Tensor,
    *,
    block_m: int | None = None,
    block_n: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return x.sum(dim=0) for a 2D x, accumulated in fp32 and cast to x's dtype.

    Args:
        x: (M, N) bf16/fp16/fp32, any strides.
        block_m: Rows per loop step (power of two); None = min(32, next_pow2(M)).
        block_n: Columns per program (power of two); None = min(128, next_pow2(N)).
        num_warps: Warps per program; None = 4.

    Returns:
        y: (N,) in x's dtype (zeros when M is 0).

    Raises:
        ValueError: x is not 2D bf16/fp16/fp32.
    """
    if x.dim() != 2 or x.dtype not in _FLOATS:
        raise ValueError(f"x must be (M, N) bf16/fp16/fp32; got {tuple(x.shape)} {x.dtype}")
    m, n = x.shape
    y = torch.zeros((n,), dtype=x.dtype, device=x.device)
    if m == 0 or n == 0:
        return y
    cfg = _launch_config(m, n)
    given = {"block_m": block_m, "block_n": block_n, "num_warps": num_warps}
    cfg.update({key: value for key, value in given.items() if value is not None})
    _column_sum_tiled_dim0_kernel[(triton.cdiv(n, cfg["block_n"]),)](
        x, y,
        m, n,
        x.stride(0), x.stride(1),
        BLOCK_M=cfg["block_m"], BLOCK_N=cfg["block_n"],
        num_warps=cfg["num_warps"],
    )  # fmt: skip
    return y


def reference(x: torch.Tensor) -> torch.Tensor:
    """Return x.float().sum(0) cast to x's dtype."""
    return x.float().sum(dim=0).to(x.dtype)


def make_inputs(shape: dict, dtype: torch.dtype = torch.float32, device: str = "cpu") -> dict:
    """Return ``{"x"}`` for ``{"rows", "cols"}``: N(0, 1) + 0.25 so column sums are not ~0."""
    x = torch.randn(shape["rows"], shape["cols"], device=device) + 0.25
    return {"x": x.to(dtype)}
