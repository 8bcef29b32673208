"""
---
id: layer_norm_backward_fused
title: LayerNorm backward, a row tile per program fusing dx with dw/db partials, then a column sum
op_family: norm
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [backward, multi-row-tile, partial-reduction, two-kernel, recompute-stats,
  fp32-accumulate]
status: reference
launcher: layer_norm_backward_fused
tuning:
  block_m: [8, 1, 2, 4, 16, 32]
  block_c: [64, 16, 32, 128, 256]
  num_warps: [4, 1, 2, 8]
args:
  dy: {shape: [M, N], dtypes: [bf16, fp16, fp32], aliases: [grad_output, grad_y, dout]}
  x: {shape: [M, N], like: dy, aliases: [hidden_states, input]}
  weight: {shape: [N], dtypes: [float], aliases: [w, gamma]}
  eps: {type: float, default: 1.0e-5, aliases: [epsilon, variance_epsilon, layer_norm_eps]}
returns:
  - {name: dx, shape: [M, N], dtype: x}
  - {name: dw, shape: [N], dtype: weight}
  - {name: db, shape: [N], dtype: weight}
problem:
  shapes: [{rows: 5, hidden: 300}, {rows: 9, hidden: 64}]
  dtypes: [fp32, bf16]
  atol: 0.02
  rtol: 0.02
measured: []
---
Backward of y = (x - mean) * rstd * w + b over the last dim: with xhat = (x - mean) * rstd and g =
dy * w, dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), dw = sum over rows of dy * xhat and db =
sum over rows of dy. Kernel 1: program i owns a (BLOCK_M, N) tile of rows held in registers,
recomputes each row's mean and (biased) variance from x in fp32 (nothing is saved by the forward),
writes the tile's dx, and reduces dy * xhat and dy over its BLOCK_M rows into one fp32 row each,
stored as row i of two (ceil(M / BLOCK_M), N) partial buffers. Kernel 2 sums the partials over their
rows with one program per BLOCK_C columns. Bigger tiles shrink the partial buffers (and the second
kernel) by BLOCK_M but cost registers (BLOCK_M * N fp32 values of x, dy and xhat per program).
Bytes: dy and x read once, dx written once (6 bytes per bf16 element) plus 16 * N / BLOCK_M bytes of
partials per row. Limits: N up to 65536 with BLOCK_M * N bounded by registers (use small block_m for
wide rows); the bias is not needed (db does not depend on it).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _ln_bwd_tile_kernel(
    # pointers
    dy_ptr,
    x_ptr,
    w_ptr,
    dx_ptr,
    dw_part_ptr,
    db_part_ptr,
    # sizes
    M,
    N,
    # strides (elements; the last dim is contiguous)
    stride_m,
    # scalars
    eps,
    # meta
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    pid = tl.program_id(0)
    rows = (pid * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    cmask = cols < N
    mask = (rows < M)[:, None] & cmask[None, :]
    offs = rows[:, None] * stride_m + cols[None, :]
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(dy_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=cmask, other=0.0).to(tl.float32)

    mean = tl.sum(x, axis=1) / N
    xc = tl.where(mask, x - mean[:, None], 0.0)  # padded lanes stay 0
    rstd = tl.rsqrt(tl.sum(xc * xc, axis=1) / N + eps)
    xhat = xc * rstd[:, None]
    g = dy * w[None, :]
    mean_g = tl.sum(g, axis=1) / N
    mean_gx = tl.sum(g * xhat, axis=1) / N
    dx = rstd[:, None] * (g - mean_g[:, None] - xhat * mean_gx[:, None])
    tl.store(dx_ptr + offs, dx.to(dx_ptr.dtype.element_ty), mask=mask)
    # the tile's share of dw and db: one fp32 row each (rows past M hold dy = 0)
    part = pid.to(tl.int64) * N + cols
    tl.store(dw_part_ptr + part, tl.sum(dy * xhat, axis=0), mask=cmask)
    tl.store(db_part_ptr + part, tl.sum(dy, axis=0), mask=cmask)


@triton.jit
def _ln_bwd_reduce_kernel(
    dw_part_ptr,
    db_part_ptr,
    dw_ptr,
    db_ptr,
    P,
    N,
    BLOCK_P: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    cols = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = cols < N
    dw = tl.zeros((BLOCK_C,), dtype=tl.float32)
    db = tl.zeros((BLOCK_C,), dtype=tl.float32)
    for start in range(0, P, BLOCK_P):
        prow = start + tl.arange(0, BLOCK_P)
        mask = (prow < P)[:, None] & cmask[None, :]
        offs = prow[:, None].to(tl.int64) * N + cols[None, :]
        dw += tl.sum(tl.load(dw_part_ptr + offs, mask=mask, other=0.0), axis=0)
        db += tl.sum(tl.load(db_part_ptr + offs, mask=mask, other=0.0), axis=0)
    tl.store(dw_ptr + cols, dw.to(dw_ptr.dtype.element_ty), mask=cmask)
    tl.store(db_ptr + cols, db.to(db_ptr.dtype.element_ty), mask=cmask)


def layer_norm_backward_fused(
    dy: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor,
    eps: float = 1e-5,
    *,
    block_m: int = 8,
    block_c: int = 64,
    num_warps: int = 4,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Return (dx, dw, db), the gradients of LayerNorm(x) * weight + bias for dy.

    Args:
        dy: (M, N) bf16/fp16/fp32 gradient of the output.
        x: (M, N) the forward input, same dtype as dy.
        weight: (N,) float weight (gamma).
        eps: The forward's eps (added to the biased variance).
        block_m: Rows per program of kernel 1 (a power of two).
        block_c: Columns per program of the partial reduction (a power of two).
        num_warps: Warps per program.

    Returns:
        dx: (M, N) in x's dtype; dw and db: (N,) in weight's dtype.

    Raises:
        ValueError: Shapes or dtypes disagree, N > 65536 or a block size is not a power of two.
    """
    if x.dim() != 2 or dy.shape != x.shape or dy.dtype != x.dtype:
        raise ValueError(f"dy and x must be 2-D, same shape and dtype; got {tuple(dy.shape)} "
                         f"{dy.dtype} and {tuple(x.shape)} {x.dtype}")  # fmt: skip
    m, n = x.shape
    if weight.shape != (n,):
        raise ValueError(f"weight must be ({n},) for x {tuple(x.shape)}; got {tuple(weight.shape)}")
    if n > 65536:
        raise ValueError(f"row width {n} > 65536 does not fit in registers")
    for name, value in (("block_m", block_m), ("block_c", block_c)):
        if value < 1 or value & (value - 1):
            raise ValueError(f"{name} {value} must be a power of two")
    x, dy = x.contiguous(), dy.contiguous()
    dx = torch.empty_like(x)
    dw = torch.zeros(n, dtype=weight.dtype, device=x.device)
    db = torch.zeros(n, dtype=weight.dtype, device=x.device)
    if m == 0:
        return dx, dw, db
    p = triton.cdiv(m, block_m)
    dw_part = torch.empty((p, n), dtype=torch.float32, device=x.device)
    db_part = torch.empty((p, n), dtype=torch.float32, device=x.device)
    _ln_bwd_tile_kernel[(p,)](
        dy, x, weight.contiguous(), dx, dw_part, db_part,
        m, n,
        x.stride(0),
        eps,
        BLOCK_M=block_m, BLOCK_N=triton.next_power_of_2(n),
        num_warps=num_warps,
    )  # fmt: skip
    _ln_bwd_reduce_kernel[(triton.cdiv(n, block_c),)](
        dw_part, db_part, dw, db, p, n,
        BLOCK_P=min(triton.next_power_of_2(p), 32), BLOCK_C=block_c,
        num_warps=num_warps,
    )  # fmt: skip
    return dx, dw, db


def reference(
    dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-5
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Return (dx, dw, db) by autograd through torch's fp32 layer_norm, cast back."""
    xf = x.float().requires_grad_(True)
    wf = weight.float().requires_grad_(True)
    bf = torch.zeros_like(wf).requires_grad_(True)
    y = torch.nn.functional.layer_norm(xf, (x.shape[-1],), wf, bf, eps)
    dx, dw, db = torch.autograd.grad(y, (xf, wf, bf), dy.float())
    return dx.to(x.dtype), dw.to(weight.dtype), db.to(weight.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"dy", "x", "weight"}`` for ``shape = {"rows", "hidden"}``; x has a 0.5 offset."""
    rows, hidden = shape["rows"], shape["hidden"]
    return {
        "dy": torch.randn(rows, hidden, device=device).to(dtype),
        "x": (0.5 + torch.randn(rows, hidden, device=device)).to(dtype),
        "weight": (1.0 + 0.1 * torch.randn(hidden, device=device)).to(dtype),
    }
