"""
---
id: rms_norm_looped
title: RMSNorm for very wide rows, two chunked passes over the row per program
op_family: norm
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [row-per-program, chunked-loop, two-pass, fp32-accumulate]
status: reference
launcher: rms_norm_looped
tuning:
  block_n: [1024, 256, 512, 2048, 4096]
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
  - {device: NVIDIA H200, shape: rms_norm/0, dtype: bf16, latency_us: 6.88, sol_fraction: 0.4047, date: '2026-12-03'}
---
RMSNorm y = x * rsqrt(mean(x^2) + eps) * w for rows of any width: one program per row walks the row
in BLOCK_N chunks twice. Pass 1 accumulates x^2 element-wise into an fp32 vector (one tree reduction
at the end, which is also more accurate than a running scalar); pass 2 reloads each chunk, scales by
the weight and stores. Registers are bounded by BLOCK_N whatever the width, so 64K..1M-wide rows
work without spilling. Cost: x is read twice (the second read usually hits L2 for rows up to a few
MB), so DRAM traffic is 2 + 2 bytes per bf16 element when the row stays in L2 and 4 + 2 when it does
not. Limits: one program per row, so few wide rows leave SMs idle (a split-row reduction would fix
that); for rows that fit in registers rms_norm_rowwise reads x only once.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _rms_norm_looped_kernel(
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
    x_row = x_ptr + row * stride_xm
    y_row = y_ptr + row * stride_ym
    offs = tl.arange(0, BLOCK_N)

    # pass 1: element-wise fp32 partial sums of x^2, reduced once after the loop
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        cols = start + offs
        x = tl.load(x_row + cols, mask=cols < N, other=0.0).to(tl.float32)
        acc += x * x
    inv_rms = tl.rsqrt(tl.sum(acc, axis=0) / N + eps)

    # pass 2: reload (mostly from L2), scale, store
    for start in range(0, N, BLOCK_N):
        cols = start + offs
        mask = cols < N
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_row + cols, (x * inv_rms * w).to(y_ptr.dtype.element_ty), mask=mask)


def _launch_config(n: int) -> dict[str, int]:
    """Return the chunk width (at most 4096, at least the row) and warps (about 8 per thread)."""
    block_n = min(triton.next_power_of_2(n), 4096)
    num_warps = min(max(block_n // 256, 1), 8)
    return {"block_n": block_n, "num_warps": num_warps}


def rms_norm_looped(
    x: torch.Tensor,
    weight: torch.Tensor,
    eps: float = 1e-6,
    *,
    block_n: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return RMSNorm(x) * weight over the last dimension, looping over the row in chunks.

    Args:
        x: (..., N) bf16/fp16/fp32, last dimension contiguous; N may be arbitrarily large.
        weight: (N,) any float dtype, contiguous.
        eps: Added to mean(x^2) before the reciprocal square root.
        block_n: Chunk width (power of two); None picks min(next_pow2(N), 4096).
        num_warps: Warps per program; None picks by chunk width.

    Returns:
        y: same shape and dtype as ``x``, contiguous.

    Raises:
        ValueError: The weight does not match the last dimension of x.
    """
    n = x.shape[-1]
    if weight.shape != (n,):
        raise ValueError(f"weight must be ({n},) for x {tuple(x.shape)}; got {tuple(weight.shape)}")
    x2 = x.reshape(-1, n)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    y = torch.empty((x2.shape[0], n), dtype=x.dtype, device=x.device)
    if y.numel() == 0:
        return y.reshape(x.shape)
    cfg = _launch_config(n)
    given = {"block_n": block_n, "num_warps": num_warps}
    cfg.update({key: value for key, value in given.items() if value is not None})
    _rms_norm_looped_kernel[(x2.shape[0],)](
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
