"""
---
id: rms_norm_backward_dx_dw_partials
title: RMSNorm backward, dx per row on a persistent grid plus per-program dw partials reduced after
op_family: norm
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [backward, persistent-grid, grid-stride-rows, partial-reduction, two-kernel,
  recompute-rstd, fp32-accumulate]
status: reference
launcher: rms_norm_backward_dx_dw_partials
tuning:
  programs_per_sm: [2, 1, 4, 8]
  block_c: [64, 16, 32, 128, 256]
  num_warps: [4, 1, 2, 8]
args:
  dy: {shape: [M, N], dtypes: [bf16, fp16, fp32], aliases: [grad_output, grad_y, dout]}
  x: {shape: [M, N], like: dy, aliases: [hidden_states, input]}
  weight: {shape: [N], dtypes: [float], aliases: [w]}
  eps: {type: float, default: 1.0e-6, aliases: [epsilon, variance_epsilon, rms_norm_eps]}
returns:
  - {name: dx, shape: [M, N], dtype: x}
  - {name: dw, shape: [N], dtype: weight}
problem:
  shapes: [{rows: 5, hidden: 300}, {rows: 9, hidden: 64}]
  dtypes: [fp32, bf16]
  atol: 0.02
  rtol: 0.02
measured: []
---
Backward of y = x * r * w with r = rsqrt(mean(x^2) + eps): with g = dy * w, dx = r * g - x * r^3 *
sum(g * x) / N, and dw = sum over rows of dy * x * r. Kernel 1 runs a persistent grid of P = min(M,
programs_per_sm * SMs) programs; program p walks rows p, p + P, ..., recomputes r from x (no saved
rstd is needed), writes the row's dx and adds dy * x * r into a fp32 register row that it stores
once, at the end, as row p of a (P, N) fp32 partial buffer. Kernel 2 reduces that buffer over P with
one program per BLOCK_C columns, looping over the partial rows in chunks. The weight gradient so
needs no atomics and is deterministic, and its extra traffic is P * N * 8 bytes, tiny next to the M
* N * 6 bytes (bf16) of dy, x and dx. Wins for the usual training shapes (M >> SMs); limits: rows
wider than 65536 do not fit in registers, and with M < P the grid has idle slots (P is clamped to
M). dw is rounded once to the weight's dtype.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _rms_bwd_rows_kernel(
    # pointers
    dy_ptr,
    x_ptr,
    w_ptr,
    dx_ptr,
    part_ptr,
    # sizes
    M,
    N,
    # strides (elements; the last dim is contiguous)
    stride_m,
    # scalars
    eps,
    # meta
    BLOCK_N: tl.constexpr,
):
    pid = tl.program_id(0)
    num_programs = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    dw_acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    # int64 start makes row * stride int64
    for row in range(pid.to(tl.int64), M, num_programs):
        x = tl.load(x_ptr + row * stride_m + cols, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + row * stride_m + cols, mask=mask, other=0.0).to(tl.float32)
        r = tl.rsqrt(tl.sum(x * x, axis=0) / N + eps)  # recomputed: no saved rstd
        g = dy * w
        dot = tl.sum(g * x, axis=0)
        dx = r * g - x * (r * r * r * dot / N)
        tl.store(dx_ptr + row * stride_m + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)
        dw_acc += dy * x * r
    tl.store(part_ptr + pid.to(tl.int64) * N + cols, dw_acc, mask=mask)


@triton.jit
def _sum_partials_kernel(
    part_ptr,
    dw_ptr,
    P,
    N,
    BLOCK_P: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    cols = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = cols < N
    acc = tl.zeros((BLOCK_C,), dtype=tl.float32)
    for start in range(0, P, BLOCK_P):
        prow = start + tl.arange(0, BLOCK_P)
        mask = (prow < P)[:, None] & cmask[None, :]
        acc += tl.sum(
            tl.load(part_ptr + prow[:, None] * N + cols[None, :], mask=mask, other=0.0), 0
        )
    tl.store(dw_ptr + cols, acc.to(dw_ptr.dtype.element_ty), mask=cmask)


def _num_sms(device: torch.device) -> int:
    """Return the device's SM count (4 on the CPU, where the interpreter runs tests)."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4


def rms_norm_backward_dx_dw_partials(
    dy: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor,
    eps: float = 1e-6,
    *,
    programs_per_sm: int = 2,
    block_c: int = 64,
    num_warps: int = 4,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (dx, dw), the gradients of RMSNorm(x) * weight for the output gradient dy.

    Args:
        dy: (M, N) bf16/fp16/fp32 gradient of the output.
        x: (M, N) the forward input, same dtype as dy.
        weight: (N,) float weight.
        eps: The forward's eps.
        programs_per_sm: Persistent programs per SM of kernel 1 (also the partial-buffer rows).
        block_c: Columns per program of the partial reduction (a power of two).
        num_warps: Warps per program.

    Returns:
        dx: (M, N) in x's dtype; dw: (N,) in weight's dtype.

    Raises:
        ValueError: Shapes or dtypes disagree, N > 65536 or block_c is not a power of two.
    """
    if x.dim() != 2 or dy.shape != x.shape or dy.dtype != x.dtype:
        raise ValueError(f"dy and x must be 2-D, same shape and dtype; got {tuple(dy.shape)} "
                         f"{dy.dtype} and {tuple(x.shape)} {x.dtype}")  # fmt: skip
    m, n = x.shape
    if weight.shape != (n,):
        raise ValueError(f"weight must be ({n},) for x {tuple(x.shape)}; got {tuple(weight.shape)}")
    if n > 65536:
        raise ValueError(f"row width {n} > 65536 does not fit in registers")
    if block_c < 1 or block_c & (block_c - 1):
        raise ValueError(f"block_c {block_c} must be a power of two")
    x, dy = x.contiguous(), dy.contiguous()
    dx = torch.empty_like(x)
    dw = torch.empty(n, dtype=weight.dtype, device=x.device)
    if m == 0:
        return dx, dw.zero_()
    p = max(1, min(m, programs_per_sm * _num_sms(x.device)))
    partial = torch.empty((p, n), dtype=torch.float32, device=x.device)
    _rms_bwd_rows_kernel[(p,)](
        dy, x, weight.contiguous(), dx, partial,
        m, n,
        x.stride(0),
        eps,
        BLOCK_N=triton.next_power_of_2(n),
        num_warps=num_warps,
    )  # fmt: skip
    _sum_partials_kernel[(triton.cdiv(n, block_c),)](
        partial, dw, p, n, BLOCK_P=min(triton.next_power_of_2(p), 32), BLOCK_C=block_c,
        num_warps=num_warps,
    )  # fmt: skip
    return dx, dw


def reference(
    dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (dx, dw) by autograd through the fp32 RMSNorm forward, cast to the input dtypes."""
    xf = x.float().requires_grad_(True)
    wf = weight.float().requires_grad_(True)
    y = xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps) * wf
    dx, dw = torch.autograd.grad(y, (xf, wf), dy.float())
    return dx.to(x.dtype), dw.to(weight.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"dy", "x", "weight"}`` for ``shape = {"rows", "hidden"}``, all N(0, 1)-ish."""
    rows, hidden = shape["rows"], shape["hidden"]
    return {
        "dy": torch.randn(rows, hidden, device=device).to(dtype),
        "x": torch.randn(rows, hidden, device=device).to(dtype),
        "weight": (1.0 + 0.1 * torch.randn(hidden, device=device)).to(dtype),
    }
