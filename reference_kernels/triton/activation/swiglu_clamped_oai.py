"""
---
id: swiglu_clamped_oai
title: Clamped SwiGLU with alpha (gpt-oss), interleaved gate/up split in registers
op_family: activation
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [row-column-grid, register-deinterleave, fused-gate, clamp, exp2, fp32-accumulate]
status: reference
launcher: swiglu_clamped_oai
tuning:
  block_n: [1024, 256, 512, 2048]
  num_warps: [4, 1, 2, 8]
args:
  x: {shape: [..., 2*D], dtypes: [bf16, fp16, fp32], aliases: [input, hidden_states]}
  alpha: {type: float, default: 1.702, aliases: [swiglu_alpha]}
  limit: {type: float, default: 7.0, aliases: [swiglu_limit, clamp_limit]}
  interleaved: {type: bool, default: true}
returns:
  - {name: out, shape: [..., D], dtype: x}
problem:
  shapes: [{rows: 3, d: 500}, {rows: 4, d: 33, interleaved: false}]
  dtypes: [fp32, bf16]
measured: []
---
The gpt-oss MoE activation. With gate g and up u taken from x (..., 2d) -- interleaved (g = x[...,
0::2], u = x[..., 1::2], the gpt-oss checkpoint layout) or as halves [g | u] when interleaved is
False -- it computes exactly: g' = min(g, limit); u' = clamp(u, -limit, limit); out = g' *
sigmoid(alpha * g') * (u' + 1), in fp32, rounded once to x's dtype (defaults alpha = 1.702, limit =
7.0). Note the asymmetric clamp (g has no lower bound: sigmoid already sends g -> -inf to 0) and the
+1 on the linear half. Program (r, j) owns row r and output columns j*BLOCK_N..: in the interleaved
layout it loads the 2*BLOCK_N contiguous inputs as one vector run and splits gate and up lanes in
registers (reshape to (BLOCK_N, 2) + tl.split), so no strided half-efficiency loads; in the halves
layout it loads two contiguous runs. Bytes per output element: 2 reads + 1 write (6 bytes in bf16);
about 12 FLOPs. Limits: one row per program, so many small rows (d < 256) give tiny programs; the
eager gpt-oss code rounds after each bf16 op, this kernel rounds once (differences of one bf16 ulp).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _swiglu_clamped_oai_kernel(
    # pointers
    x_ptr,
    out_ptr,
    # sizes
    D,
    # strides (elements; the last dim is contiguous)
    stride_xm,
    stride_om,
    # scalars
    alpha,
    limit,
    # meta
    INTERLEAVED: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride can pass 2^31 elements
    col0 = tl.program_id(1) * BLOCK_N
    x_row = x_ptr + row * stride_xm
    offs = col0 + tl.arange(0, BLOCK_N)
    mask = offs < D
    if INTERLEAVED:
        # one contiguous run of 2 * BLOCK_N inputs [g0 u0 g1 u1 ...], split in registers
        offs2 = 2 * col0 + tl.arange(0, 2 * BLOCK_N)
        pairs = tl.load(x_row + offs2, mask=offs2 < 2 * D, other=0.0).to(tl.float32)
        gate, up = tl.split(tl.reshape(pairs, (BLOCK_N, 2)))
    else:
        gate = tl.load(x_row + offs, mask=mask, other=0.0).to(tl.float32)
        up = tl.load(x_row + D + offs, mask=mask, other=0.0).to(tl.float32)
    gate = tl.minimum(gate, limit)  # upper clamp only
    up = tl.clamp(up, -limit, limit)
    glu = gate / (1.0 + tl.exp2(-alpha * 1.4426950408889634 * gate))  # g * sigmoid(alpha * g)
    out = glu * (up + 1.0)
    tl.store(out_ptr + row * stride_om + offs, out.to(out_ptr.dtype.element_ty), mask=mask)


def _launch_config(d: int) -> dict[str, int]:
    """Return the column block (at most 1024) and warps (about 8 outputs per thread)."""
    block_n = min(triton.next_power_of_2(d), 1024)
    return {"block_n": block_n, "num_warps": min(max(block_n // 256, 1), 8)}


def swiglu_clamped_oai(
    x: torch.Tensor,
    alpha: float = 1.702,
    limit: float = 7.0,
    interleaved: bool = True,
    *,
    block_n: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return min(g, limit) * sigmoid(alpha * min(g, limit)) * (clamp(u, -limit, limit) + 1).

    Args:
        x: (..., 2d) bf16/fp16/fp32, last dimension contiguous.
        alpha: Slope inside the sigmoid (gpt-oss: 1.702).
        limit: Clamp bound, > 0 (gpt-oss: 7.0).
        interleaved: True: g = x[..., 0::2], u = x[..., 1::2]; False: x = [g | u] halves.
        block_n: Output columns per program (power of two); None = min(next_pow2(d), 1024).
        num_warps: Warps per program; None picks by block.

    Returns:
        out: (..., d) in x's dtype, contiguous.

    Raises:
        ValueError: The last dimension is odd or zero, limit <= 0, or block_n not a power of two.
    """
    two_d = x.shape[-1] if x.dim() else 0
    if two_d % 2 or two_d == 0:
        raise ValueError(f"last dimension must be even and > 0 (gate, up); got {tuple(x.shape)}")
    if not limit > 0:
        raise ValueError(f"limit must be > 0; got {limit}")
    if block_n is not None and (block_n < 1 or block_n & (block_n - 1)):
        raise ValueError(f"block_n must be a power of two; got {block_n}")
    d = two_d // 2
    x2 = x.reshape(-1, two_d)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    out = torch.empty((x2.shape[0], d), dtype=x.dtype, device=x.device)
    if out.numel() > 0:
        cfg = _launch_config(d)
        given = {"block_n": block_n, "num_warps": num_warps}
        cfg.update({key: value for key, value in given.items() if value is not None})
        grid = (x2.shape[0], triton.cdiv(d, cfg["block_n"]))
        _swiglu_clamped_oai_kernel[grid](
            x2, out,
            d,
            x2.stride(0), out.stride(0),
            float(alpha), float(limit),
            INTERLEAVED=bool(interleaved), BLOCK_N=cfg["block_n"],
            num_warps=cfg["num_warps"],
        )  # fmt: skip
    return out.reshape(*x.shape[:-1], d)


def reference(
    x: torch.Tensor, alpha: float = 1.702, limit: float = 7.0, interleaved: bool = True
) -> torch.Tensor:
    """Return the gpt-oss clamped SwiGLU in fp32, cast once to x's dtype."""
    xf = x.float()
    gate, up = (xf[..., 0::2], xf[..., 1::2]) if interleaved else xf.chunk(2, dim=-1)
    gate = gate.clamp(max=limit)
    up = up.clamp(min=-limit, max=limit)
    return (gate * torch.sigmoid(alpha * gate) * (up + 1)).to(x.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return inputs for ``{"rows", "d"}`` (+ ``"interleaved"``): x ~ N(0, 1) * 5 (clamps hit)."""
    x = (torch.randn(shape["rows"], 2 * shape["d"], device=device) * 5).to(dtype)
    return {"x": x, "interleaved": shape.get("interleaved", True)}
