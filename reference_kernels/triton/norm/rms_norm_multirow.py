"""
---
id: rms_norm_multirow
title: RMSNorm over a 2D tile of BLOCK_M rows per program for narrow rows
op_family: norm
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [multi-row-tile, 2d-block, weight-reuse, fp32-accumulate]
status: reference
launcher: rms_norm_multirow
tuning:
  block_m: [8, 1, 2, 4, 16, 32]
  num_warps: [4, 1, 2, 8]
args:
  x: {shape: [..., N], dtypes: [bf16, fp16, fp32], aliases: [hidden_states, input]}
  weight: {shape: [N], dtypes: [float], aliases: [w]}
  eps: {type: float, default: 1.0e-6, aliases: [epsilon, variance_epsilon, norm_eps, rms_norm_eps]}
returns:
  - {name: y, shape: [..., N], dtype: x}
problem:
  shapes: [{rows: 3, hidden: 1000}, {rows: 33, hidden: 64}]
  dtypes: [fp32, bf16]
measured:
  - {device: NVIDIA H200, shape: rms_norm/0, dtype: bf16, latency_us: 6.16, sol_fraction: 0.4883, date: '2026-12-03'}
---
RMSNorm y = x * rsqrt(mean(x^2) + eps) * w where each program owns a (BLOCK_M, BLOCK_N) tile:
BLOCK_M consecutive rows, each padded to BLOCK_N = next_pow2(N), reduced along axis 1 in fp32. The
weight row is loaded once per program and broadcast over BLOCK_M rows, and each thread gets several
rows' worth of work, which is what narrow rows (head-wise norms with N = 64..512, millions of rows)
need: a row-per-program kernel there launches tiny programs that are dominated by launch and
reduction latency. Bytes: one read and one write of x per element. Limits: BLOCK_M * BLOCK_N lives
in registers, so wide rows (N >= 8192) need BLOCK_M = 1..2 (rms_norm_rowwise is then the same
thing); with few rows, larger BLOCK_M means fewer programs and idle SMs.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _rms_norm_multirow_kernel(
    # pointers
    x_ptr,
    w_ptr,
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
    pid = tl.program_id(0)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    row_mask = rows < M
    col_mask = cols < N
    mask = row_mask[:, None] & col_mask[None, :]

    # int64 row offsets: M * stride can pass 2^31 elements
    rows64 = rows.to(tl.int64)
    x = tl.load(x_ptr + rows64[:, None] * stride_xm + cols[None, :], mask=mask, other=0.0)
    x = x.to(tl.float32)  # fp32 from here on
    # one weight load per program, reused by all BLOCK_M rows
    w = tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)

    inv_rms = tl.rsqrt(tl.sum(x * x, axis=1) / N + eps)  # (BLOCK_M,)
    y = x * inv_rms[:, None] * w[None, :]
    y_ptrs = y_ptr + rows64[:, None] * stride_ym + cols[None, :]
    tl.store(y_ptrs, y.to(y_ptr.dtype.element_ty), mask=mask)


def _launch_config(m: int, n: int) -> dict[str, int]:
    """Return the tile (about 4096 elements, at most the row count) and warps for (M, N)."""
    block_n = triton.next_power_of_2(n)
    block_m = max(1, min(4096 // block_n, triton.next_power_of_2(m), 64))
    num_warps = 4 if block_m * block_n >= 2048 else 2
    return {"block_m": block_m, "block_n": block_n, "num_warps": num_warps}


def rms_norm_multirow(
    x: torch.Tensor,
    weight: torch.Tensor,
    eps: float = 1e-6,
    *,
    block_m: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return RMSNorm(x) * weight over the last dimension, BLOCK_M rows per program.

    Args:
        x: (..., N) bf16/fp16/fp32, last dimension contiguous.
        weight: (N,) any float dtype, contiguous.
        eps: Added to mean(x^2) before the reciprocal square root.
        block_m: Rows per program (power of two); None picks about 4096 elements per tile.
        num_warps: Warps per program; None picks by tile size.

    Returns:
        y: same shape and dtype as ``x``, contiguous.

    Raises:
        ValueError: The shapes do not match or the row is wider than 2^20.
    """
    n = x.shape[-1]
    if weight.shape != (n,):
        raise ValueError(f"weight must be ({n},) for x {tuple(x.shape)}; got {tuple(weight.shape)}")
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
    if cfg["block_n"] > 2**20:
        raise ValueError(f"row width {n} of x {tuple(x.shape)} exceeds a 2^20-element tile")
    # a requested block_m is clamped so that the tile stays within Triton's 2^20 elements
    cfg["block_m"] = max(1, min(cfg["block_m"], 2**20 // cfg["block_n"]))
    _rms_norm_multirow_kernel[(triton.cdiv(m, cfg["block_m"]),)](
        x2, weight.contiguous(), y,
        m, n,
        x2.stride(0), y.stride(0),
        eps,
        BLOCK_M=cfg["block_m"], BLOCK_N=cfg["block_n"],
        num_warps=cfg["num_warps"],
    )  # fmt: skip
    return y.reshape(x.shape)


def reference(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Return RMSNorm(x) * weight computed in fp32 and cast to x's dtype."""
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps) * weight.float()
    return y.to(x.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"x", "weight"}`` for ``shape = {"rows", "hidden"}``: x ~ 0.02 N, w ~ 1 + 0.02 N."""
    rows, hidden = shape["rows"], shape["hidden"]
    x = (torch.randn(rows, hidden, device=device) * 0.02).to(dtype)
    weight = (1.0 + 0.02 * torch.randn(hidden, device=device)).to(dtype)
    return {"x": x, "weight": weight}
