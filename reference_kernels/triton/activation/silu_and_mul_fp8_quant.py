"""
---
id: silu_and_mul_fp8_quant
title: SwiGLU gate silu(gate) * up with a dynamic per-token FP8 quantisation epilogue
op_family: activation
dsl: triton
vendor: nvidia
arch: [sm_89, sm_90]
dtypes: [bf16, fp16, fp32, fp8_e4m3fn]
bound: memory
techniques: [row-per-program, chunked-loop, two-pass, fused-gate, absmax-reduction, fp8-e4m3, exp2]
status: reference
launcher: silu_and_mul_fp8_quant
tuning:
  block_n: [1024, 256, 512, 2048, 4096]
  num_warps: [4, 1, 2, 8]
args:
  x: {shape: [..., 2*D], dtypes: [bf16, fp16, fp32], aliases: [input, hidden_states]}
returns:
  - {name: q, shape: [..., D], dtype: fp8_e4m3fn}
  - {name: scale, shape: [..., 1], dtype: fp32}
problem:
  shapes: [{rows: 3, d: 500}, {rows: 9, d: 64}]
  dtypes: [fp32, bf16]
  atol: 0.01
  rtol: 0.01
measured: []
---
The gated-MLP activation of an FP8 model feeding the down projection: y = silu(gate) * up for x
(..., 2d) = [gate | up], all in fp32 (no intermediate rounding: y goes straight to fp8), then a
dynamic per-token scale = absmax(y) / 448 (1 for an all-zero row) and q = fp8_e4m3fn(clamp(y /
scale, +-448)). A per-token scale needs the whole row's absmax before the first value can be
quantised, so one program per row walks its d columns twice in BLOCK_N chunks: pass 1 computes y
and keeps a running elementwise max of |y| (reduced once at the end), pass 2 recomputes y (the
SiLU is cheap next to memory) and stores q. When d <= BLOCK_N the second pass re-reads from L1/L2.
Fusing removes the bf16 write and re-read of y that separate activation and quant kernels pay:
bytes per output are 4 read in pass 1, up to 4 more in pass 2 (L2 hits for moderate d) and 1
written, against 4 + 2 + 2 + 1. Limits: one program per row, so decode (T = 1..8) runs on T SMs;
e4m3fn only (ROCm e4m3fnuz uses 240); the clamp only guards rounding of y / scale above 448.
"""

import torch
import triton
import triton.language as tl

FP8_MAX = 448.0  # largest finite float8_e4m3fn


@triton.jit
def _silu_and_mul_fp8_quant_kernel(
    # pointers
    x_ptr,
    q_ptr,
    scale_ptr,
    # sizes
    D,
    # strides (elements; the last dim is contiguous)
    stride_xm,
    stride_qm,
    # scalars
    fp8_max,
    # meta
    BLOCK_N: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride can pass 2^31 elements
    gate_row = x_ptr + row * stride_xm
    up_row = gate_row + D  # the up half follows the gate half in the same row
    q_row = q_ptr + row * stride_qm
    offs = tl.arange(0, BLOCK_N)

    # pass 1: running elementwise max of |silu(gate) * up|, reduced once after the loop
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for start in range(0, D, BLOCK_N):
        cols = start + offs
        mask = cols < D
        gate = tl.load(gate_row + cols, mask=mask, other=0.0).to(tl.float32)
        up = tl.load(up_row + cols, mask=mask, other=0.0).to(tl.float32)
        y = gate / (1.0 + tl.exp2(-gate * 1.4426950408889634)) * up  # masked lanes give 0
        acc = tl.maximum(acc, tl.abs(y))
    amax = tl.max(acc, axis=0)
    scale = tl.where(amax == 0.0, 1.0, amax / fp8_max)
    tl.store(scale_ptr + row, scale)

    # pass 2: recompute y and store it quantised
    for start in range(0, D, BLOCK_N):
        cols = start + offs
        mask = cols < D
        gate = tl.load(gate_row + cols, mask=mask, other=0.0).to(tl.float32)
        up = tl.load(up_row + cols, mask=mask, other=0.0).to(tl.float32)
        y = gate / (1.0 + tl.exp2(-gate * 1.4426950408889634)) * up
        q = tl.clamp(y / scale, -fp8_max, fp8_max)
        tl.store(q_row + cols, q.to(q_ptr.dtype.element_ty), mask=mask)


def _launch_config(d: int) -> dict[str, int]:
    """Return the chunk width (at most 1024, at least the row) and warps (about 8 per thread)."""
    block_n = min(triton.next_power_of_2(d), 1024)
    return {"block_n": block_n, "num_warps": min(max(block_n // 256, 1), 8)}


def silu_and_mul_fp8_quant(
    x: torch.Tensor,
    *,
    block_n: int | None = None,
    num_warps: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (q, scale) with q * scale ~ silu(x[..., :d]) * x[..., d:], one scale per row.

    Args:
        x: (..., 2d) bf16/fp16/fp32, last dimension contiguous; [gate | up].
        block_n: Columns per loop step (power of two); None = min(next_pow2(d), 1024).
        num_warps: Warps per program; None picks by chunk width.

    Returns:
        (q, scale): q (..., d) float8_e4m3fn; scale (..., 1) fp32.

    Raises:
        ValueError: The last dimension is odd or zero, or block_n is not a power of two.
    """
    two_d = x.shape[-1]
    if two_d % 2 or two_d == 0:
        raise ValueError(f"last dimension must be even and > 0 ([gate | up]); got {tuple(x.shape)}")
    if block_n is not None and (block_n < 1 or block_n & (block_n - 1)):
        raise ValueError(f"block_n must be a power of two; got {block_n}")
    d = two_d // 2
    x2 = x.reshape(-1, two_d)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    m = x2.shape[0]
    q = torch.empty((m, d), dtype=torch.float8_e4m3fn, device=x.device)
    scale = torch.empty((m, 1), dtype=torch.float32, device=x.device)
    if m > 0:
        cfg = _launch_config(d)
        given = {"block_n": block_n, "num_warps": num_warps}
        cfg.update({key: value for key, value in given.items() if value is not None})
        _silu_and_mul_fp8_quant_kernel[(m,)](
            x2, q, scale,
            d,
            x2.stride(0), q.stride(0),
            FP8_MAX,
            BLOCK_N=cfg["block_n"],
            num_warps=cfg["num_warps"],
        )  # fmt: skip
    lead = x.shape[:-1]
    return q.reshape(*lead, d), scale.reshape(*lead, 1)


def reference(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (q, scale) from y = silu(gate) * up computed in fp32, quantised per row."""
    gate, up = x.float().chunk(2, dim=-1)
    y = torch.nn.functional.silu(gate) * up
    amax = y.abs().amax(dim=-1, keepdim=True)
    scale = torch.where(amax == 0, torch.ones_like(amax), amax / FP8_MAX)
    return (y / scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn), scale


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"x"}`` for ``shape = {"rows", "d"}``: x (rows, 2d) ~ N(0, 1)."""
    return {"x": torch.randn(shape["rows"], 2 * shape["d"], device=device).to(dtype)}
