"""
---
id: rms_norm_residual_gated_out
title: RMSNorm of (x + residual) times sigmoid(gate), three-input fused norm over multi-row tiles
op_family: norm
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [multi-row-tile, fused-residual-add, sigmoid-gate, fp32-accumulate, single-pass]
status: reference
launcher: rms_norm_residual_gated_out
tuning:
  block_m: [4, 1, 2, 8, 16]
  num_warps: [4, 1, 2, 8]
args:
  x: {shape: [..., N], dtypes: [bf16, fp16, fp32], aliases: [hidden_states, input]}
  residual: {shape: [..., N], like: x, aliases: [res]}
  gate: {shape: [..., N], like: x, aliases: [g, z]}
  weight: {shape: [N], dtypes: [float], aliases: [w]}
  eps: {type: float, default: 1.0e-6, aliases: [epsilon, variance_epsilon, norm_eps, rms_norm_eps]}
returns:
  - {name: y, shape: [..., N], dtype: x}
  - {name: residual_out, shape: [..., N], dtype: x}
problem:
  shapes: [{rows: 5, hidden: 300}, {rows: 1, hidden: 129}]
  dtypes: [fp32, bf16]
  atol: 0.02
  rtol: 0.02
measured: []
---
Exactly: h = x + residual, rounded to x's dtype and returned as residual_out (the next layer's
residual, a new tensor: the inputs are not modified); then y = h * rsqrt(mean(h^2) + eps) * weight
* sigmoid(gate), where the norm uses the rounded h, the sum of squares, rsqrt, weight and sigmoid
are fp32, and y is rounded once to x's dtype. The gate is an output gate (sigmoid, applied after
the weight), as in gated-attention output blocks, not the silu(z) gate of gated_rms_norm. Design:
program i owns a (BLOCK_M, N) tile (N padded to a power of two) of BLOCK_M consecutive rows: three
tile loads, the add, a row reduction along axis 1, the gated scale and two tile stores, so every
element is read three times and written twice in one pass (10 bytes per bf16 element), and the
weight row is loaded once per BLOCK_M rows. Multi-row tiles keep narrow rows (N <= 1024) from
wasting lanes. Limits: the whole tile lives in registers, so BLOCK_M * N must stay within a few
tens of thousands of values (rows wider than 65536 are rejected).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _rms_norm_residual_gated_kernel(
    # pointers
    x_ptr,
    r_ptr,
    g_ptr,
    w_ptr,
    y_ptr,
    h_ptr,
    # sizes
    M,
    N,
    # scalars
    eps,
    # meta
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    cmask = cols < N
    mask = (rows < M)[:, None] & cmask[None, :]
    offs = rows.to(tl.int64)[:, None] * N + cols[None, :]  # all tensors contiguous (M, N)

    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    r = tl.load(r_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    h = (x + r).to(h_ptr.dtype.element_ty)  # round once: the norm sees the stored residual
    tl.store(h_ptr + offs, h, mask=mask)
    hf = h.to(tl.float32)

    inv_rms = tl.rsqrt(tl.sum(hf * hf, axis=1) / N + eps)  # (BLOCK_M,)
    w = tl.load(w_ptr + cols, mask=cmask, other=0.0).to(tl.float32)
    g = tl.load(g_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    y = hf * inv_rms[:, None] * w[None, :] * tl.sigmoid(g)
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


def rms_norm_residual_gated_out(
    x: torch.Tensor,
    residual: torch.Tensor,
    gate: torch.Tensor,
    weight: torch.Tensor,
    eps: float = 1e-6,
    *,
    block_m: int = 4,
    num_warps: int = 4,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (rms_norm(x + residual) * weight * sigmoid(gate), x + residual).

    Args:
        x: (..., N) bf16/fp16/fp32.
        residual: Same shape and dtype as x.
        gate: Same shape and dtype as x (pre-sigmoid output gate).
        weight: (N,) float.
        eps: Added to mean(h^2) before the reciprocal square root.
        block_m: Rows per program (power of two).
        num_warps: Warps per program.

    Returns:
        (y, residual_out): both x's shape and dtype, contiguous.

    Raises:
        ValueError: Shapes or dtypes disagree, the row is wider than 65536, or block_m is bad.
    """
    n = x.shape[-1]
    for name, t in (("residual", residual), ("gate", gate)):
        if t.shape != x.shape or t.dtype != x.dtype:
            raise ValueError(
                f"{name} must match x {x.dtype} {tuple(x.shape)}; got {t.dtype} {tuple(t.shape)}"
            )
    if weight.shape != (n,):
        raise ValueError(f"weight must be ({n},) to match x; got {tuple(weight.shape)}")
    if n > 65536:
        raise ValueError(f"row width {n} > 65536 does not fit in registers")
    if block_m <= 0 or block_m & (block_m - 1):
        raise ValueError(f"block_m {block_m} must be a power of two")
    x2, r2, g2 = (t.reshape(-1, n).contiguous() for t in (x, residual, gate))
    m = x2.shape[0]
    y = torch.empty_like(x2)
    h = torch.empty_like(x2)
    if m and n:
        _rms_norm_residual_gated_kernel[(triton.cdiv(m, block_m),)](
            x2, r2, g2, weight.contiguous(), y, h,
            m, n,
            eps,
            BLOCK_M=block_m, BLOCK_N=triton.next_power_of_2(n),
            num_warps=num_warps,
        )  # fmt: skip
    return y.reshape(x.shape), h.reshape(x.shape)


def reference(
    x: torch.Tensor,
    residual: torch.Tensor,
    gate: torch.Tensor,
    weight: torch.Tensor,
    eps: float = 1e-6,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (y, residual_out) computed in fp32 PyTorch with the same single rounding of h."""
    h = (x.float() + residual.float()).to(x.dtype)
    hf = h.float()
    normed = hf * torch.rsqrt(hf.pow(2).mean(dim=-1, keepdim=True) + eps) * weight.float()
    return (normed * torch.sigmoid(gate.float())).to(x.dtype), h


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return kwargs for ``shape = {"rows", "hidden"}``: all N(0, 1)."""
    size = (shape["rows"], shape["hidden"])
    return {
        "x": torch.randn(size, device=device).to(dtype),
        "residual": torch.randn(size, device=device).to(dtype),
        "gate": torch.randn(size, device=device).to(dtype),
        "weight": torch.randn(shape["hidden"], device=device).to(dtype),
    }
