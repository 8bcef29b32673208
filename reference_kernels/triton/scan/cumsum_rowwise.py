"""
---
id: cumsum_rowwise
title: Inclusive prefix sum along rows with tl.cumsum per chunk and a carried scalar total
op_family: scan
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32, int32, int64]
bound: memory
techniques: [row-per-program, chunked-loop, carried-prefix-sum, fp32-accumulate]
status: reference
launcher: cumsum_rowwise
tuning:
  block_n: [1024, 256, 512, 2048, 4096]
  num_warps: [4, 1, 2, 8, 16]
args:
  x: {shape: [..., N], dtypes: [bf16, fp16, fp32, int32, int64], aliases: [input, values]}
returns:
  - {name: y, shape: [..., N], dtype: x}
problem:
  shapes: [{rows: 3, cols: 1000}, {rows: 9, cols: 64}]
  dtypes: [fp32, bf16]
  atol: 0.02
  rtol: 0.02
measured: []
---
y[..., i] = x[..., 0] + ... + x[..., i] along the last dimension (torch.cumsum(x, -1)). One program
per row walks the row in BLOCK_N chunks: tl.cumsum scans the chunk in registers (a warp-shuffle
scan across the lanes), the carry (the sum of all earlier chunks) is added, and the carry grows by
the chunk's total, so a row of any length costs one read and one write per element (4 B in bf16).
Floats accumulate in fp32 and are rounded once at the store; int32/int64 accumulate in int64 and
return int64, as torch.cumsum does for integers (the returned dtype is then int64, not x's). The
fp32 order (scan within a chunk, then the carry) differs from a sequential sum by a few ulps of
the running total. Limits: one program per row, so a handful of very long rows use a handful of
SMs (a decoupled look-back or a two-kernel chunk-sum scan spreads one row over the GPU); the carry
chain serialises the chunks of a row.
"""

import torch
import triton
import triton.language as tl

_FLOATS = (torch.bfloat16, torch.float16, torch.float32)
_INTS = (torch.int32, torch.int64)


@triton.jit
def _cumsum_rowwise_kernel(
    # pointers
    x_ptr,
    y_ptr,
    # sizes
    N,
    # strides (elements; the last dim is contiguous)
    stride_xm,
    stride_ym,
    # meta
    IS_INT: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride can pass 2^31 elements
    offs = tl.arange(0, BLOCK_N)
    acc_dtype = tl.int64 if IS_INT else tl.float32  # int64 for ints, fp32 for floats

    carry = tl.zeros((), acc_dtype)
    for start in range(0, N, BLOCK_N):
        cols = start + offs
        mask = cols < N
        x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0).to(acc_dtype)
        y = tl.cumsum(x, axis=0) + carry  # inclusive scan of the chunk, shifted by the carry
        tl.store(y_ptr + row * stride_ym + cols, y.to(y_ptr.dtype.element_ty), mask=mask)
        carry += tl.sum(x, axis=0)  # masked lanes loaded 0, so they add nothing


def _launch_config(n: int) -> dict[str, int]:
    """Return the chunk width (at most 4096, at least the row) and warps (about 8 per thread)."""
    block_n = min(triton.next_power_of_2(n), 4096)
    return {"block_n": block_n, "num_warps": min(max(block_n // 256, 1), 16)}


def cumsum_rowwise(
    x: torch.Tensor,
    *,
    block_n: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return the inclusive prefix sum of x along its last dimension.

    Args:
        x: (..., N) bf16/fp16/fp32/int32/int64, at least 1D.
        block_n: Chunk per loop step (power of two); None = min(next_pow2(N), 4096).
        num_warps: Warps per program; None picks by chunk width.

    Returns:
        y: same shape as ``x``; x's dtype for floats, int64 for integers (as torch.cumsum).

    Raises:
        ValueError: x is 0-d or has an unsupported dtype.
    """
    if x.dim() == 0 or x.dtype not in _FLOATS + _INTS:
        raise ValueError(
            f"x must be at least 1D bf16/fp16/fp32/int32/int64; got {tuple(x.shape)} {x.dtype}"
        )
    n = x.shape[-1]
    x2 = x.reshape(-1, n)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    is_int = x.dtype in _INTS
    y = torch.empty(x2.shape, dtype=torch.int64 if is_int else x.dtype, device=x.device)
    if y.numel() == 0:
        return y.reshape(x.shape)
    cfg = _launch_config(n)
    given = {"block_n": block_n, "num_warps": num_warps}
    cfg.update({key: value for key, value in given.items() if value is not None})
    _cumsum_rowwise_kernel[(x2.shape[0],)](
        x2, y,
        n,
        x2.stride(0), y.stride(0),
        IS_INT=is_int, BLOCK_N=cfg["block_n"],
        num_warps=cfg["num_warps"],
    )  # fmt: skip
    return y.reshape(x.shape)


def reference(x: torch.Tensor) -> torch.Tensor:
    """Return torch.cumsum along the last dim (fp32 for floats, cast back; int64 for ints)."""
    if x.dtype in _INTS:
        return torch.cumsum(x, dim=-1)
    return torch.cumsum(x.float(), dim=-1).to(x.dtype)


def make_inputs(shape: dict, dtype: torch.dtype = torch.float32, device: str = "cpu") -> dict:
    """Return ``{"x"}`` for ``{"rows", "cols"}``: N(0, 1) floats, or ints in [-100, 100)."""
    size = (shape["rows"], shape["cols"])
    if dtype in _INTS:
        return {"x": torch.randint(-100, 100, size, device=device, dtype=dtype)}
    return {"x": torch.randn(size, device=device).to(dtype)}
