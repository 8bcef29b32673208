"""
---
id: rms_norm_rowwise
title: RMSNorm with one program per row and the whole row held in registers
op_family: norm
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [row-per-program, single-pass, fp32-accumulate]
status: reference
launcher: rms_norm_rowwise
tuning:
  num_warps: [4, 1, 2, 8, 16]
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
  - {device: NVIDIA H200, shape: rms_norm/0, dtype: bf16, latency_us: 6.4, sol_fraction: 0.455, date: '2026-12-03'}
---
RMSNorm y = x * rsqrt(mean(x^2) + eps) * w with one program per row: the program loads the whole row
(padded to the next power of two) into registers once, reduces the sum of squares in fp32, scales
and stores, so each element is read once and written once (2 + 2 bytes per bf16 element plus the
weight, which stays in L2). The weight multiply happens in fp32 before the single cast to the output
dtype. Limits: rows wider than 65536 do not fit (use rms_norm_looped); with few rows (decode, T <
number of SMs) most SMs idle (use rms_norm_multirow for narrow rows, or split the row); registers
per thread grow with the row, so very wide rows at small num_warps spill.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _rms_norm_rowwise_kernel(
    # pointers
    x_ptr,
    w_ptr,
    y_ptr,
    # sizes
    N,
    # strides (elements; the last dim is contiguous)
    stride_xm,
    stride_ym,
    # scalars
    eps,
    # meta
    BLOCK_N: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride can pass 2^31 elements
    offs = tl.arange(0, BLOCK_N)
    mask = offs < N

    # cast to fp32 right after the load: all arithmetic below is fp32
    x = tl.load(x_ptr + row * stride_xm + offs, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)

    # padded lanes hold 0 so they add nothing; divide by the true width N
    mean_sq = tl.sum(x * x, axis=0) / N
    inv_rms = tl.rsqrt(mean_sq + eps)
    y = x * inv_rms * w
    tl.store(y_ptr + row * stride_ym + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


def _launch_config(n: int) -> dict[str, int]:
    """Return the row block (next power of two) and warps: about 8 to 16 elements per thread."""
    block_n = triton.next_power_of_2(n)
    num_warps = min(max(block_n // 512, 1), 16)
    return {"block_n": block_n, "num_warps": num_warps}


def rms_norm_rowwise(
    x: torch.Tensor,
    weight: torch.Tensor,
    eps: float = 1e-6,
    *,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return RMSNorm(x) * weight over the last dimension.

    Args:
        x: (..., N) bf16/fp16/fp32, last dimension contiguous.
        weight: (N,) any float dtype, contiguous.
        eps: Added to mean(x^2) before the reciprocal square root.
        num_warps: Warps per program; None picks by row width.

    Returns:
        y: same shape and dtype as ``x``, contiguous.

    Raises:
        ValueError: The shapes do not match or the row is wider than 65536.
    """
    n = x.shape[-1]
    if weight.shape != (n,):
        raise ValueError(f"weight must be ({n},) for x {tuple(x.shape)}; got {tuple(weight.shape)}")
    if n > 65536:
        raise ValueError(f"row width {n} > 65536 does not fit in registers; use rms_norm_looped")
    x2 = x.reshape(-1, n)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    y = torch.empty((x2.shape[0], n), dtype=x.dtype, device=x.device)
    if y.numel() == 0:
        return y.reshape(x.shape)
    cfg = _launch_config(n)
    if num_warps is not None:
        cfg["num_warps"] = num_warps
    _rms_norm_rowwise_kernel[(x2.shape[0],)](
        x2, weight.contiguous(), y,
        n,
        x2.stride(0), y.stride(0),
        eps,
        BLOCK_N=cfg["block_n"],
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
