"""
---
id: l2_norm_multirow
title: Row-wise L2 normalisation over 2D tiles of BLOCK_M rows per program
op_family: norm
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [multi-row-tile, 2d-block, fp32-accumulate]
status: reference
launcher: l2_norm_multirow
tuning:
  block_m: [8, 1, 2, 4, 16, 32]
  num_warps: [4, 1, 2, 8]
args:
  x: {shape: [..., N], dtypes: [bf16, fp16, fp32], aliases: [hidden_states, input]}
  eps: {type: float, default: 1.0e-6, aliases: [epsilon, variance_epsilon, norm_eps, rms_norm_eps]}
returns:
  - {name: y, shape: [..., N], dtype: x}
problem:
  shapes: [{rows: 3, hidden: 1000}, {rows: 33, hidden: 64}]
  dtypes: [fp32, bf16]
measured: []
---
y = x * rsqrt(sum(x^2) + eps) per row (atrex30 l2_norm: fp32 math, eps inside the root, one
rounding at the end), where each program owns a (BLOCK_M, BLOCK_N) tile of BLOCK_M consecutive
rows padded to BLOCK_N = next_pow2(N) and reduces the sums of squares along axis 1. Every thread
holds elements of several rows, so the loads of BLOCK_M rows are in flight together and the
reductions of the rows overlap, which is what narrow rows (q/k heads of 64..256 before a
delta-rule recurrence, or 2048-wide rows in decode) need to reach bandwidth without a persistent
loop. Grid = cdiv(M, BLOCK_M) programs, no loop inside a program. Bytes per element: one read and
one write (4 bytes in bf16). Limits: the tile lives in registers, so wide rows need BLOCK_M = 1..2
and rows past 65536 are refused; with few rows a large BLOCK_M leaves SMs idle.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _l2_norm_multirow_kernel(
    # pointers
    x_ptr,
    y_ptr,
    # sizes
    M,
    N,
    # strides (elements; the last dim is contiguous)
    stride_xm,
    stride_ym,
    # scalars
    eps,
    # meta
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    mask = (rows < M)[:, None] & (cols < N)[None, :]
    rows64 = rows.to(tl.int64)[:, None]  # int64: rows * stride can pass 2^31 elements

    x = tl.load(x_ptr + rows64 * stride_xm + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    inv_norm = tl.rsqrt(tl.sum(x * x, axis=1) + eps)  # (BLOCK_M,), fp32; padded lanes are 0
    y = x * inv_norm[:, None]
    tl.store(y_ptr + rows64 * stride_ym + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


def _launch_config(m: int, n: int) -> dict[str, int]:
    """Return a tile of about 4096 elements (at most the row count) and its warps."""
    block_n = triton.next_power_of_2(n)
    block_m = max(1, min(4096 // block_n, triton.next_power_of_2(m), 32))
    return {
        "block_m": block_m,
        "block_n": block_n,
        "num_warps": 4 if block_m * block_n >= 2048 else 2,
    }


def l2_norm_multirow(
    x: torch.Tensor,
    eps: float = 1e-6,
    *,
    block_m: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return x * rsqrt(sum(x^2) + eps) over the last dimension, BLOCK_M rows per program.

    Args:
        x: (..., N) bf16/fp16/fp32, last dimension contiguous.
        eps: Added to sum(x^2) before the reciprocal square root.
        block_m: Rows per program (power of two); None picks about 4096 elements per tile.
        num_warps: Warps per program; None picks by tile size.

    Returns:
        y: same shape and dtype as ``x``, contiguous.

    Raises:
        ValueError: The row is wider than 65536 or block_m is not a power of two.
    """
    n = x.shape[-1]
    if n > 65536:
        raise ValueError(f"row width {n} of x {tuple(x.shape)} > 65536 does not fit in registers")
    if block_m is not None and (block_m < 1 or block_m & (block_m - 1)):
        raise ValueError(f"block_m must be a power of two; got {block_m}")
    x2 = x.reshape(-1, n)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    m = x2.shape[0]
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if y.numel() == 0:
        return y.reshape(x.shape)
    cfg = _launch_config(m, n)
    given = {"block_m": block_m, "num_warps": num_warps}
    cfg.update({key: value for key, value in given.items() if value is not None})
    cfg["block_m"] = max(1, min(cfg["block_m"], 2**20 // cfg["block_n"]))  # Triton's tile limit
    _l2_norm_multirow_kernel[(triton.cdiv(m, cfg["block_m"]),)](
        x2, y,
        m, n,
        x2.stride(0), y.stride(0),
        eps,
        BLOCK_M=cfg["block_m"], BLOCK_N=cfg["block_n"],
        num_warps=cfg["num_warps"],
    )  # fmt: skip
    return y.reshape(x.shape)


def reference(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Return x * rsqrt(sum(x^2) + eps) computed in fp32 and cast to x's dtype."""
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).sum(dim=-1, keepdim=True) + eps)).to(x.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"x"}`` for ``shape = {"rows", "hidden"}``: x ~ N(0, 1) (atrex l2_norm scale)."""
    return {"x": torch.randn(shape["rows"], shape["hidden"], device=device).to(dtype)}
