"""
---
id: gelu_and_mul_erf_2d
title: GeGLU with exact erf GELU on a 2-D grid of (row block x column block) tiles
op_family: activation
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [2d-tiles, fused-gate, erf, fp32-accumulate, vectorized-loads]
status: reference
launcher: gelu_and_mul_erf_2d
tuning:
  block_m: [4, 1, 2, 8, 16]
  block_n: [512, 128, 256, 1024]
  num_warps: [4, 1, 2, 8]
args:
  x: {shape: [..., 2*D], dtypes: [bf16, fp16, fp32], aliases: [input, hidden_states]}
returns:
  - {name: out, shape: [..., D], dtype: x}
problem:
  shapes: [{rows: 3, d: 1000}, {rows: 9, d: 65}]
  dtypes: [fp32, bf16]
measured: []
---
GeGLU with the exact GELU: x (..., 2d) holds [gate | up] and out = 0.5 gate (1 + erf(gate /
sqrt(2))) * up, evaluated in fp32 and rounded once at the store. The grid is two-dimensional:
program (i, j) owns a BLOCK_M x BLOCK_N tile (rows i*BLOCK_M.., output columns j*BLOCK_N..) and
loads the matching gate and up tiles as BLOCK_M contiguous runs each. Because the columns are split
across programs, a decode batch of 1-8 rows with d = 14336 still fills the GPU (d / BLOCK_N programs
per row block), and stacking rows keeps each program at a few thousand elements when d is small.
Bytes per output element: 2 reads + 1 write (6 bytes in bf16); erf is a libdevice polynomial (~20
FLOPs), still far below the memory time. Limits: no loop, so per-program work is fixed by the tile;
very small tensors are launch-bound; needs an even last dimension.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _gelu_and_mul_erf_2d_kernel(
    # pointers
    x_ptr,
    out_ptr,
    # sizes
    M,
    D,
    # strides (elements; the last dim is contiguous)
    stride_xm,
    stride_om,
    # meta
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (offs_m < M)[:, None] & (offs_n < D)[None, :]
    rows = offs_m[:, None].to(tl.int64)  # int64: row * stride can pass 2^31 elements
    gate_ptrs = x_ptr + rows * stride_xm + offs_n[None, :]
    gate = tl.load(gate_ptrs, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(gate_ptrs + D, mask=mask, other=0.0).to(tl.float32)
    act = 0.5 * gate * (1.0 + tl.math.erf(gate * 0.7071067811865476))  # exact GELU in fp32
    out_ptrs = out_ptr + rows * stride_om + offs_n[None, :]
    tl.store(out_ptrs, (act * up).to(out_ptr.dtype.element_ty), mask=mask)


def _launch_config(m: int, d: int) -> dict[str, int]:
    """Return a tile of up to 1024 columns, rows stacked to ~2K elements, 4 warps."""
    block_n = min(1024, triton.next_power_of_2(d))
    block_m = max(1, min(16, 2048 // block_n, triton.next_power_of_2(m)))
    return {"block_m": block_m, "block_n": block_n, "num_warps": 4}


def gelu_and_mul_erf_2d(
    x: torch.Tensor,
    *,
    block_m: int | None = None,
    block_n: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return gelu(x[..., :d]) * x[..., d:] (exact erf GELU), in fp32 and rounded once.

    Args:
        x: (..., 2d) bf16/fp16/fp32, last dimension contiguous; [gate | up].
        block_m: Rows per tile (power of two); None picks by d.
        block_n: Output columns per tile (power of two); None = min(next_pow2(d), 1024).
        num_warps: Warps per program; None = 4.

    Returns:
        out: (..., d) in x's dtype, contiguous.

    Raises:
        ValueError: The last dimension is odd or zero, or a block is not a power of two.
    """
    two_d = x.shape[-1] if x.dim() else 0
    if two_d % 2 or two_d == 0:
        raise ValueError(f"last dimension must be even and > 0 ([gate | up]); got {tuple(x.shape)}")
    for name, block in (("block_m", block_m), ("block_n", block_n)):
        if block is not None and (block < 1 or block & (block - 1)):
            raise ValueError(f"{name} must be a power of two; got {block}")
    d = two_d // 2
    x2 = x.reshape(-1, two_d)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    m = x2.shape[0]
    out = torch.empty((m, d), dtype=x.dtype, device=x.device)
    if out.numel() > 0:
        cfg = _launch_config(m, d)
        given = {"block_m": block_m, "block_n": block_n, "num_warps": num_warps}
        cfg.update({key: value for key, value in given.items() if value is not None})
        grid = (triton.cdiv(m, cfg["block_m"]), triton.cdiv(d, cfg["block_n"]))
        _gelu_and_mul_erf_2d_kernel[grid](
            x2, out,
            m, d,
            x2.stride(0), out.stride(0),
            BLOCK_M=cfg["block_m"], BLOCK_N=cfg["block_n"],
            num_warps=cfg["num_warps"],
        )  # fmt: skip
    return out.reshape(*x.shape[:-1], d)


def reference(x: torch.Tensor) -> torch.Tensor:
    """Return gelu(gate) * up (exact erf GELU) in fp32, cast once to x's dtype."""
    gate, up = x.float().chunk(2, dim=-1)
    return (torch.nn.functional.gelu(gate) * up).to(x.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"x"}`` for ``shape = {"rows", "d"}``: x (rows, 2d) ~ N(0, 1) * 2."""
    return {"x": (torch.randn(shape["rows"], 2 * shape["d"], device=device) * 2).to(dtype)}
